"""plugflow.utils.data against torch.utils.data: datasets, random_split, samplers, collation of
every structure default_collate handles, DataLoader options and errors, and worker processes
(ordering, worker_init_fn, get_worker_info, IterableDataset sharding, seeding, persistent
workers, a worker raising, a worker dying, timeouts)."""

import collections
import math
import os
import pickle
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import plugflow as pf
import plugflow.utils.data as pdata
from helpers import from_torch


@pytest.fixture
def rng():
    return np.random.default_rng()


def normalize(x):
    """A library-neutral form of a (nested) batch: tensors become (dtype name, shape, values)."""
    if isinstance(x, (pf.Tensor, torch.Tensor)):
        values = (x.float() if repr(x.dtype).endswith("bfloat16") else x).numpy()
        return ("tensor", repr(x.dtype).split(".")[-1], tuple(x.shape), values.tolist())
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return (type(x).__name__, tuple(normalize(v) for v in x))
    if isinstance(x, collections.abc.Mapping):
        return (type(x).__name__, {k: normalize(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [normalize(v) for v in x])
    return x


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the point is to compare whatever is raised)
        return type(e), str(e)
    return None


def same_error(pf_fn, torch_fn):
    """plugflow raises what torch raises: same type, same message."""
    expected = error_of(torch_fn)
    assert expected is not None
    assert error_of(pf_fn) == expected


# ---- datasets -------------------------------------------------------------------------------------

def test_tensor_dataset(rng):
    x, y = rng.standard_normal((7, 3)).astype(np.float32), rng.integers(0, 5, size=7)
    p = pdata.TensorDataset(pf.from_numpy(x), pf.from_numpy(y))
    t = tdata.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    assert len(p) == len(t) == 7
    for i in (0, 3, 6, -1):
        assert normalize(p[i]) == normalize(t[i])
    assert normalize(p[1:4]) == normalize(t[1:4])
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        pdata.TensorDataset(pf.zeros(3), pf.zeros(4))


def test_concat_chain_and_subset():
    a, b = pdata.TensorDataset(pf.arange(3)), pdata.TensorDataset(pf.arange(10, 15))
    both = a + b
    assert isinstance(both, pdata.ConcatDataset) and len(both) == 8 and both.cumulative_sizes == [3, 8]
    assert [both[i][0].item() for i in range(8)] == [0, 1, 2, 10, 11, 12, 13, 14]
    assert both[-1][0].item() == 14 and both[-8][0].item() == 0
    torch_both = tdata.TensorDataset(torch.arange(3)) + tdata.TensorDataset(torch.arange(5))
    same_error(lambda: both[-9], lambda: torch_both[-9])
    with pytest.raises(AssertionError, match="datasets should not be an empty iterable"):
        pdata.ConcatDataset([])

    class Stream(pdata.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    with pytest.raises(AssertionError, match="does not support IterableDataset"):
        pdata.ConcatDataset([a, Stream(2)])
    chain = Stream(2) + Stream(3)
    assert isinstance(chain, pdata.ChainDataset) and list(chain) == [0, 1, 0, 1, 2] and len(chain) == 5
    subset = pdata.Subset(b, [4, 0, 2])
    assert len(subset) == 3 and [subset[i][0].item() for i in range(3)] == [14, 10, 12]
    assert subset[[0, 2]][0].tolist() == [14, 12]  # a list index goes to the dataset in one call


def test_random_split_lengths_match_torch(rng):
    for _ in range(10):
        n = int(rng.integers(0, 50))
        k = int(rng.integers(1, 5))
        fractions = rng.dirichlet(np.ones(k)).tolist()
        fractions[-1] = 1 - sum(fractions[:-1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zero-length splits warn in both
            got = error_of(lambda: pdata.random_split(range(n), fractions)) or \
                [len(s) for s in pdata.random_split(range(n), fractions)]
            want = error_of(lambda: tdata.random_split(range(n), fractions)) or \
                [len(s) for s in tdata.random_split(range(n), fractions)]
        assert got == want
        cut = sorted(rng.integers(0, n + 1, size=k - 1).tolist())
        lengths = [hi - lo for lo, hi in zip([0] + cut, cut + [n])]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lengths summing to 1 count as fractions, as in torch
            splits = pdata.random_split(range(n), lengths)
        assert [len(s) for s in splits] == lengths
        assert sorted(i for s in splits for i in s) == list(range(n))  # disjoint, covering


def test_random_split_generator_and_errors():
    seed = int(np.random.default_rng().integers(2**31))
    first = [list(s) for s in pdata.random_split(range(30), [0.3, 0.7], generator=pf.Generator().manual_seed(seed))]
    again = [list(s) for s in pdata.random_split(range(30), [0.3, 0.7], generator=pf.Generator().manual_seed(seed))]
    other = [list(s) for s in pdata.random_split(range(30), [0.3, 0.7], generator=pf.Generator().manual_seed(seed + 1))]
    assert first == again and first != other
    same_error(lambda: pdata.random_split(range(5), [2, 2]), lambda: tdata.random_split(range(5), [2, 2]))
    same_error(lambda: pdata.random_split(range(5), [1.5, -0.5]), lambda: tdata.random_split(range(5), [1.5, -0.5]))
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        pdata.random_split(range(1), [0.5, 0.5])


# ---- samplers -------------------------------------------------------------------------------------

def test_sequential_and_batch_sampler(rng):
    for _ in range(10):
        n, batch_size = int(rng.integers(0, 20)), int(rng.integers(1, 7))
        for drop_last in (False, True):
            p = pdata.BatchSampler(pdata.SequentialSampler(range(n)), batch_size, drop_last)
            t = tdata.BatchSampler(tdata.SequentialSampler(range(n)), batch_size, drop_last)
            assert list(p) == list(t) and len(p) == len(t)
    for bad in (0, -1, 1.5, True, "2"):
        same_error(lambda: pdata.BatchSampler(range(3), bad, False), lambda: tdata.BatchSampler(range(3), bad, False))
    same_error(lambda: pdata.BatchSampler(range(3), 2, 1), lambda: tdata.BatchSampler(range(3), 2, 1))


def test_random_sampler(rng):
    n = int(rng.integers(1, 40))
    seed = int(rng.integers(2**31))
    g = pf.Generator().manual_seed(seed)
    sampler = pdata.RandomSampler(range(n), generator=g)
    epoch1, epoch2 = list(sampler), list(sampler)
    assert sorted(epoch1) == sorted(epoch2) == list(range(n)) and len(sampler) == n
    assert list(pdata.RandomSampler(range(n), generator=pf.Generator().manual_seed(seed))) == epoch1
    if n > 5:
        assert epoch1 != epoch2  # the generator advances between epochs
    more = list(pdata.RandomSampler(range(n), num_samples=2 * n + 3, generator=g))
    counts = np.bincount(more, minlength=n)  # whole permutations, then part of one more
    full = (2 * n + 3) // n
    assert len(more) == 2 * n + 3 and counts.min() >= full and counts.max() <= full + 1
    drawn = list(pdata.RandomSampler(range(n), replacement=True, num_samples=70, generator=g))
    assert len(drawn) == 70 and all(0 <= i < n for i in drawn)
    # Without a generator: driven by the default generator, so manual_seed repeats it.
    pf.manual_seed(seed)
    first = list(pdata.RandomSampler(range(n)))
    pf.manual_seed(seed)
    assert list(pdata.RandomSampler(range(n))) == first
    for kwargs in ({"replacement": 1}, {"num_samples": 0}, {"num_samples": -2}, {"num_samples": 2.0}):
        same_error(lambda: pdata.RandomSampler(range(3), **kwargs), lambda: tdata.RandomSampler(range(3), **kwargs))
    same_error(lambda: pdata.RandomSampler([]), lambda: tdata.RandomSampler([]))


def test_subset_random_sampler(rng):
    indices = rng.choice(100, size=int(rng.integers(0, 20)), replace=False).tolist()
    seed = int(rng.integers(2**31))
    sampler = pdata.SubsetRandomSampler(indices, generator=pf.Generator().manual_seed(seed))
    order = list(sampler)
    assert sorted(order) == sorted(indices) and len(sampler) == len(indices)
    assert list(pdata.SubsetRandomSampler(indices, generator=pf.Generator().manual_seed(seed))) == order


def test_weighted_random_sampler(rng):
    weights = rng.uniform(0.1, 2, size=6)
    weights[[1, 4]] = 0  # never drawn
    g = pf.Generator().manual_seed(int(rng.integers(2**31)))
    draws = list(pdata.WeightedRandomSampler(weights.tolist(), 20000, generator=g))
    counts = np.bincount(draws, minlength=6)
    expected = 20000 * weights / weights.sum()
    assert counts[1] == counts[4] == 0
    assert np.all(np.abs(counts - expected) <= 6 * np.sqrt(expected) + 1)
    # Without replacement: distinct indices, zero weights excluded, the first pick proportional.
    firsts = []
    sampler = pdata.WeightedRandomSampler(pf.from_numpy(weights), 4, replacement=False, generator=g)
    for _ in range(3000):
        picks = list(sampler)
        assert len(set(picks)) == 4 and not {1, 4} & set(picks)
        firsts.append(picks[0])
    expected = 3000 * weights / weights.sum()
    assert np.all(np.abs(np.bincount(firsts, minlength=6) - expected) <= 6 * np.sqrt(expected) + 1)
    assert len(sampler) == 4


def test_weighted_random_sampler_errors():
    for args, kwargs in [(([1.0, 2.0], 0), {}), (([1.0, 2.0], True), {}), (([1.0, 2.0], 2), {"replacement": 0}),
                         (([[1.0, 2.0]], 2), {})]:
        same_error(lambda: pdata.WeightedRandomSampler(*args, **kwargs),
                   lambda: tdata.WeightedRandomSampler(*args, **kwargs))
    for weights, n, replacement in [([1.0, -1.0], 2, True), ([0.0, 0.0], 1, True), ([1.0, float("nan")], 1, True),
                                    ([1.0, float("inf")], 1, False), ([1.0, 2.0], 3, False)]:
        with pytest.raises(RuntimeError, match="multinomial|without replacement"):
            list(pdata.WeightedRandomSampler(weights, n, replacement))
        with pytest.raises(RuntimeError):
            list(tdata.WeightedRandomSampler(weights, n, replacement))
    # PyTorch 1.13 on CPU then returns a zero-weight index; plugflow refuses instead.
    with pytest.raises(RuntimeError, match="not enough non-negative category"):
        list(pdata.WeightedRandomSampler([1.0, 0.0, 0.0], 2, replacement=False))


def test_distributed_sampler(rng):
    for _ in range(8):
        n, replicas = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        for drop_last in (False, True):
            per_rank = []
            for rank in range(replicas):
                p = pdata.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
                t = tdata.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
                assert list(p) == list(t) and len(p) == len(t)
                shuffled = pdata.DistributedSampler(range(n), replicas, rank, seed=7, drop_last=drop_last)
                per_rank.append(list(shuffled))
                assert len(per_rank[-1]) == len(p)
                assert list(pdata.DistributedSampler(range(n), replicas, rank, seed=7, drop_last=drop_last)) == \
                    per_rank[-1]  # every process computes the same order
            covered = sorted(i for share in per_rank for i in share)
            if drop_last:
                assert len(set(covered)) == len(covered)  # disjoint
            else:
                assert set(covered) == set(range(n))
    sampler = pdata.DistributedSampler(range(40), 2, 0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first  # a new epoch, a new order
    same_error(lambda: pdata.DistributedSampler(range(4), 2, 2), lambda: tdata.DistributedSampler(range(4), 2, 2))
    with pytest.raises(RuntimeError):
        pdata.DistributedSampler(range(4))  # no process group


# ---- collation ------------------------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])


def sample_structures(rng, i):
    """Samples of every kind default_collate handles; same values for both libraries."""
    arr = rng.standard_normal((2, 3)).astype(np.float32)
    return [
        lambda: (arr, np.int16(i), np.float64(i / 2), np.bool_(i % 2)),
        lambda: {"image": arr, "label": i, "score": i * 0.5, "name": f"s{i}", "raw": b"b", "flag": i % 2 == 0},
        lambda: Point(x=arr[0], y=[i, i + 1]),
        lambda: [arr[1], (i, float(i))],
        lambda: collections.OrderedDict(a={"deep": [arr]}, b=i),
    ]


@pytest.mark.filterwarnings("ignore:In future, it will be an error for 'np.bool_'")  # torch's own warning
def test_default_collate_structures_match_torch(rng):
    for n in (1, 3):
        state = rng.bit_generator.state
        samples_pf = [sample_structures(rng, i) for i in range(n)]
        rng.bit_generator.state = state
        samples_t = [sample_structures(rng, i) for i in range(n)]
        for k in range(len(samples_pf[0])):
            got = pdata.default_collate([s[k]() for s in samples_pf])
            want = tdata.default_collate([s[k]() for s in samples_t])
            assert normalize(got) == normalize(want), k


def test_default_collate_tensors(rng):
    for shape in [(), (3,), (2, 0), (4, 5)]:
        data = rng.standard_normal((3,) + shape)
        ts = [torch.from_numpy(np.array(d)) for d in data]
        ps = [pf.from_numpy(np.array(d)) for d in data]
        assert normalize(pdata.default_collate(ps)) == normalize(tdata.default_collate(ts))
        # non-contiguous samples
        assert normalize(pdata.default_collate([p.t() if p.dim() == 2 else p for p in ps])) == \
            normalize(tdata.default_collate([t.t() if t.dim() == 2 else t for t in ts]))
    batch = pdata.default_collate([{"t": pf.ones(2, dtype=pf.bfloat16)}, {"t": pf.zeros(2, dtype=pf.bfloat16)}])
    assert batch["t"].dtype is pf.bfloat16 and tuple(batch["t"].shape) == (2, 2)
    with pytest.raises(RuntimeError):
        pdata.default_collate([pf.zeros(2), pf.zeros(3)])


def test_default_collate_errors():
    for batch in ([[1, 2], [3]], [object(), object()], [np.array(["a"]), np.array(["b"])],
                  [np.array([object()]), np.array([object()])]):
        same_error(lambda: pdata.default_collate(batch), lambda: tdata.default_collate(batch))


def test_default_convert(rng):
    arr = rng.standard_normal(3)
    for value in [arr, np.int32(4), {"a": arr, "b": [arr, "s"]}, Point(arr, 2), (arr, 1), "text", 5,
                  np.array(["str"])]:
        got, want = pdata.default_convert(value), tdata.default_convert(value)
        if isinstance(want, np.ndarray):
            assert got is value
        else:
            assert normalize(got) == normalize(want)


# ---- DataLoader, one process ----------------------------------------------------------------------

class Squares(pdata.Dataset):
    """Sample i: (i, i*i as a float tensor); records nothing, picklable."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i, pf.full((2,), float(i * i))


def test_dataloader_batches_match_torch(rng):
    for _ in range(6):
        n = int(rng.integers(0, 25))
        x = rng.standard_normal((n, 3)).astype(np.float32)
        y = rng.integers(0, 10, size=n)
        batch_size = int(rng.integers(1, 8))
        for drop_last in (False, True):
            p = pdata.DataLoader(pdata.TensorDataset(pf.from_numpy(x), pf.from_numpy(y)), batch_size=batch_size,
                                 drop_last=drop_last)
            t = tdata.DataLoader(tdata.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                                 batch_size=batch_size, drop_last=drop_last)
            assert len(p) == len(t)
            assert [normalize(b) for b in p] == [normalize(b) for b in t]


def test_dataloader_without_batching_and_custom_collate(rng):
    data = [rng.standard_normal(3) for _ in range(4)]
    p = list(pdata.DataLoader(data, batch_size=None))
    t = list(tdata.DataLoader(data, batch_size=None))
    assert [normalize(b) for b in p] == [normalize(b) for b in t]
    assert len(pdata.DataLoader(data, batch_size=None)) == 4
    assert list(pdata.DataLoader(range(5), batch_size=2, collate_fn=sum)) == [1, 5, 4]
    batches = list(pdata.DataLoader(range(6), batch_sampler=[[5, 0], [3], [1, 2, 4]]))
    assert [b.tolist() for b in batches] == [[5, 0], [3], [1, 2, 4]]
    batches = list(pdata.DataLoader(range(6), sampler=[4, 2, 0], batch_size=2))
    assert [b.tolist() for b in batches] == [[4, 2], [0]]


def test_dataloader_shuffle_with_generator(rng):
    seed = int(rng.integers(2**31))
    n = 37

    def epochs(loader):
        return [[v for b in loader for v in b[0].tolist()] for _ in range(2)]

    first = epochs(pdata.DataLoader(Squares(n), batch_size=4, shuffle=True, generator=pf.Generator().manual_seed(seed)))
    again = epochs(pdata.DataLoader(Squares(n), batch_size=4, shuffle=True, generator=pf.Generator().manual_seed(seed)))
    assert first == again
    assert sorted(first[0]) == sorted(first[1]) == list(range(n))
    assert first[0] != first[1] and first[0] != list(range(n))
    with_workers = epochs(pdata.DataLoader(Squares(n), batch_size=4, shuffle=True, num_workers=2,
                                           generator=pf.Generator().manual_seed(seed)))
    assert with_workers == first  # the order comes from the main process's sampler
    pf.manual_seed(seed)
    plain = epochs(pdata.DataLoader(Squares(n), batch_size=4, shuffle=True))
    pf.manual_seed(seed)
    assert epochs(pdata.DataLoader(Squares(n), batch_size=4, shuffle=True)) == plain


class Stream(pdata.IterableDataset):
    """start..end-1, each worker taking its share by get_worker_info()."""

    def __init__(self, start, end, with_len=True):
        self.start, self.end, self.with_len = start, end, with_len

    def __iter__(self):
        info = pdata.get_worker_info()
        if info is None:
            return iter(range(self.start, self.end))
        per_worker = math.ceil((self.end - self.start) / info.num_workers)
        lo = self.start + info.id * per_worker
        return iter(range(lo, min(lo + per_worker, self.end)))

    def __len__(self):
        if not self.with_len:
            raise TypeError("no len")
        return self.end - self.start


class TorchStream(tdata.IterableDataset):
    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        return iter(range(self.start, self.end))

    def __len__(self):
        return self.end - self.start


def test_iterable_dataset_single_process(rng):
    n = int(rng.integers(0, 20))
    for batch_size, drop_last in [(None, False), (1, False), (3, False), (3, True)]:
        p = pdata.DataLoader(Stream(0, n), batch_size=batch_size, drop_last=drop_last)
        t = tdata.DataLoader(TorchStream(0, n), batch_size=batch_size, drop_last=drop_last)
        assert [normalize(b) for b in p] == [normalize(b) for b in t]
        assert len(p) == len(t)
    for kwargs in ({"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}):
        same_error(lambda: pdata.DataLoader(Stream(0, 3), **kwargs),
                   lambda: tdata.DataLoader(TorchStream(0, 3), **kwargs))
    with pytest.raises(TypeError):
        len(pdata.DataLoader(Stream(0, 3, with_len=False)))


def test_dataloader_argument_errors_match_torch():
    cases = [dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=3), dict(persistent_workers=True),
             dict(sampler=[0], shuffle=True), dict(batch_sampler=[[0]], batch_size=2),
             dict(batch_sampler=[[0]], shuffle=True), dict(batch_sampler=[[0]], drop_last=True),
             dict(batch_size=None, drop_last=True), dict(multiprocessing_context="fork"),
             dict(num_workers=1, multiprocessing_context="nonsense"), dict(num_workers=1, multiprocessing_context=3),
             dict(batch_size=0)]
    for kwargs in cases:
        same_error(lambda: pdata.DataLoader(range(3), **kwargs), lambda: tdata.DataLoader(range(3), **kwargs))
    loader = pdata.DataLoader(range(3))
    for attr in ("batch_size", "sampler", "dataset", "drop_last", "batch_sampler", "persistent_workers"):
        same_error(lambda: setattr(loader, attr, None), lambda: setattr(tdata.DataLoader(range(3)), attr, None))
    loader.num_workers = 0  # other attributes stay settable


def test_pin_memory_is_accepted():
    batches = list(pdata.DataLoader(Squares(5), batch_size=2, pin_memory=True))
    assert [b[0].tolist() for b in batches] == [[0, 1], [2, 3], [4]]


# ---- DataLoader with worker processes -------------------------------------------------------------

class WorkerProbe(pdata.Dataset):
    """Sample i reports which process made it, get_worker_info() there, and a random draw."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = pdata.get_worker_info()
        return {"i": i, "pid": os.getpid(), "worker": info.id, "num_workers": info.num_workers, "seed": info.seed,
                "rand": pf.rand(2), "np": np.random.randint(1 << 30), "init": os.environ.get("PF_TEST_INIT", "")}


def record_init(worker_id):
    assert pdata.get_worker_info().id == worker_id
    os.environ["PF_TEST_INIT"] = f"init{worker_id}"


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_workers_keep_order_and_match_single_process(rng):
    x = rng.standard_normal((23, 4)).astype(np.float32)
    dataset = pdata.TensorDataset(pf.from_numpy(x), pf.arange(23))
    single = [normalize(b) for b in pdata.DataLoader(dataset, batch_size=3)]
    for num_workers, prefetch in [(1, 2), (2, 1), (3, 4)]:
        loader = pdata.DataLoader(dataset, batch_size=3, num_workers=num_workers, prefetch_factor=prefetch)
        assert [normalize(b) for b in loader] == single
        assert len(loader) == len(single)
    unbatched = list(pdata.DataLoader(dataset, batch_size=None, num_workers=2))
    assert [normalize(b) for b in unbatched] == [normalize(b) for b in pdata.DataLoader(dataset, batch_size=None)]


def test_worker_info_init_fn_and_seeds():
    assert pdata.get_worker_info() is None
    seed = int(np.random.default_rng().integers(2**31))

    def run():
        loader = pdata.DataLoader(WorkerProbe(), batch_size=None, num_workers=2, worker_init_fn=record_init,
                                  generator=pf.Generator().manual_seed(seed))
        return list(loader)

    samples = run()
    assert [s["i"] for s in samples] == list(range(12))
    assert {s["pid"] for s in samples}.isdisjoint({os.getpid()}) and len({s["pid"] for s in samples}) == 2
    for s in samples:
        assert s["worker"] == s["i"] % 2 and s["num_workers"] == 2 and s["init"] == f"init{s['worker']}"
    seeds = {s["worker"]: s["seed"] for s in samples}
    assert seeds[1] == seeds[0] + 1
    again = run()  # the same generator seed: the same worker seeds, so the same random draws
    assert [(s["seed"], s["rand"].tolist(), s["np"]) for s in again] == \
        [(s["seed"], s["rand"].tolist(), s["np"]) for s in samples]
    by_worker = {w: [s["rand"].tolist() for s in samples if s["worker"] == w] for w in (0, 1)}
    assert by_worker[0] != by_worker[1]  # workers draw different numbers
    assert "PF_TEST_INIT" not in os.environ  # init ran in the workers only


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_iterable_dataset_sharded_across_workers(rng):
    end = int(rng.integers(5, 40))
    for batch_size, drop_last in [(None, False), (4, False), (4, True)]:
        loader = pdata.DataLoader(Stream(0, end), batch_size=batch_size, drop_last=drop_last, num_workers=3)
        values = [v for b in loader for v in (b.tolist() if batch_size else [b])]
        if not drop_last:
            assert sorted(values) == list(range(end))
        else:  # each worker drops its own incomplete last batch
            per_worker = math.ceil(end / 3)
            shards = [range(w * per_worker, min((w + 1) * per_worker, end)) for w in range(3)]
            expected = [v for shard in shards for v in list(shard)[:len(shard) // 4 * 4]]
            assert sorted(values) == sorted(expected)


class Failing(pdata.Dataset):
    def __init__(self, error, bad_index=3):
        self.error, self.bad_index = error, bad_index

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == self.bad_index:
            raise_in_dataset(self.error)
        return pf.tensor(i)


def raise_in_dataset(error):
    raise error


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(a, b)


def test_worker_exception_is_reraised_with_its_traceback():
    for num_workers in (0, 2):
        loader = pdata.DataLoader(Failing(ValueError("bad sample")), batch_size=2, num_workers=num_workers)
        with pytest.raises(ValueError) as info:
            list(loader)
        if num_workers:
            message = str(info.value)
            assert "Caught ValueError in DataLoader worker process 1" in message
            assert "raise_in_dataset" in message and "bad sample" in message  # the worker's traceback
    with pytest.raises(KeyError, match="Caught KeyError"):
        list(pdata.DataLoader(Failing(KeyError("k")), num_workers=2))
    with pytest.raises(RuntimeError, match="Caught TwoArgError"):
        list(pdata.DataLoader(Failing(TwoArgError(1, 2)), num_workers=2))
    class LocalError(Exception):  # cannot be pickled back to the main process
        pass

    with pytest.raises(RuntimeError, match="(?s)DataLoader worker process 0.*LocalError: local"):
        list(pdata.DataLoader(Failing(LocalError("local")), num_workers=1, timeout=20))
    with pytest.raises(ZeroDivisionError, match="worker_init"):
        list(pdata.DataLoader(Squares(4), num_workers=2, worker_init_fn=lambda worker_id: 1 / 0))
    # Batches before the failing one arrive; the loader stays usable afterwards.
    it = iter(pdata.DataLoader(Failing(ValueError("x"), bad_index=5), batch_size=2, num_workers=2))
    assert next(it).tolist() == [0, 1] and next(it).tolist() == [2, 3]
    with pytest.raises(ValueError):
        next(it)


def unpicklable_collate(batch):
    return lambda: batch


def test_unpicklable_batch_raises_instead_of_hanging():
    with pytest.raises(Exception, match="DataLoader worker process"):
        list(pdata.DataLoader(Squares(4), batch_size=2, num_workers=1, collate_fn=unpicklable_collate, timeout=20))


class Dies(pdata.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 2:
            os._exit(1)
        return i


class Slow(pdata.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(3)
        return i


def test_dead_worker_and_timeout_raise_instead_of_hanging():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly"):
        list(pdata.DataLoader(Dies(), num_workers=2))
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.3 seconds"):
        list(pdata.DataLoader(Slow(), num_workers=1, timeout=0.3))
    assert time.monotonic() - start < 10


def test_persistent_workers():
    loader = pdata.DataLoader(WorkerProbe(), batch_size=3, num_workers=2, persistent_workers=True)
    first = list(loader)
    pids = {p for b in first for p in b["pid"].tolist()}
    it = iter(loader)  # a new epoch, abandoned early
    next(it)
    second = list(loader)
    assert [b["i"].tolist() for b in first] == [b["i"].tolist() for b in second] == [[0, 1, 2], [3, 4, 5],
                                                                                        [6, 7, 8], [9, 10, 11]]
    assert {p for b in second for p in b["pid"].tolist()} == pids  # the same worker processes
    stream = pdata.DataLoader(Stream(0, 10), batch_size=2, num_workers=2, persistent_workers=True)
    assert sorted(v for b in stream for v in b.tolist()) == list(range(10))
    assert sorted(v for b in stream for v in b.tolist()) == list(range(10))


def test_spawned_workers():
    # A dataset class from plugflow itself: the spawned interpreter need not import this test module.
    dataset = pdata.TensorDataset(pf.arange(5) ** 2)
    loader = pdata.DataLoader(dataset, batch_size=2, num_workers=1, multiprocessing_context="spawn")
    assert [b[0].tolist() for b in loader] == [[0, 1], [4, 9], [16]]


def test_tensors_cross_processes_exactly(rng):
    data = [from_torch(torch.from_numpy(rng.standard_normal((3, 2)))).to(dtype)
            for dtype in (pf.float32, pf.float64, pf.float16, pf.bfloat16, pf.int64, pf.int8, pf.uint8, pf.bool)]
    got = list(pdata.DataLoader(data, batch_size=None, num_workers=2))
    for a, b in zip(got, data):
        assert a.dtype is b.dtype and normalize(a) == normalize(b)
    big = pf.arange(10000.0)
    assert len(pickle.dumps(big[10:20])) < len(pickle.dumps(big)) / 100  # a view pickles only its elements
