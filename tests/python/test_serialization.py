"""plugflow.save / plugflow.load against torch.save / torch.load: round trips of every dtype,
views and shared storages, nested containers, files crossing between the two libraries in both
directions (zip and legacy formats), map_location, pickling of tensors, atomic saves, and
corrupt, truncated and malicious files."""

import collections
import errno
import fcntl
import io
import json
import os
import pickle
import re
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import torch

import plugflow as pf
from plugflow import serialization
from helpers import DTYPE_NAMES, FLOAT_NAMES, from_torch, random_data

SHAPES = [(), (1,), (0,), (7,), (3, 5), (2, 0, 3), (4, 1, 3)]


@pytest.fixture
def rng():
    return np.random.default_rng()


def pf_tensor(rng, shape, dtype):
    return from_torch(torch_tensor(rng, shape, dtype))


def torch_tensor(rng, shape, dtype):
    t = torch.from_numpy(np.ascontiguousarray(random_data(rng, shape, dtype)))
    return t.bfloat16() if dtype == "bfloat16" else t


def as_numpy(t):
    """Values of a plugflow or torch tensor as numpy (bfloat16 widened exactly to float32)."""
    if isinstance(t, pf.Tensor):
        return (t.float() if t.dtype is pf.bfloat16 else t).numpy()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def same_tensor(a, b):
    """Same dtype name, shape and values (bit-exact, NaN-free data)."""
    assert repr(a.dtype).split(".")[-1] == repr(b.dtype).split(".")[-1]
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(as_numpy(a), as_numpy(b))


def pf_round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    pf.save(obj, buf)
    buf.seek(0)
    return pf.load(buf, **load_kwargs)


def views_of(base):
    """Views sharing base's memory: offset, transposed, strided, expanded."""
    return {"base": base, "offset": base[1:], "transposed": base.t(), "strided": base[::2, 1::2],
            "row": base[2], "expanded": base[0:1].expand(3, base.shape[1])}


# ---- round trips ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_round_trip_every_dtype(rng, dtype):
    tensors = {str(shape): pf_tensor(rng, shape, dtype) for shape in SHAPES}
    loaded = pf_round_trip(tensors)
    assert list(loaded) == list(tensors)
    for key, t in tensors.items():
        same_tensor(loaded[key], t)
        assert loaded[key].stride() == t.stride()


@pytest.mark.parametrize("dtype", FLOAT_NAMES)
def test_requires_grad_survives_and_loaded_tensors_are_leaves(rng, dtype):
    x = pf_tensor(rng, (3, 4), dtype).requires_grad_()
    y = x * 2  # not a leaf: saved as its values, loaded as a leaf that requires grad (as torch)
    loaded = pf_round_trip({"x": x, "y": y, "plain": x.detach()})
    assert loaded["x"].requires_grad and loaded["x"].is_leaf
    assert loaded["y"].requires_grad and loaded["y"].is_leaf
    assert not loaded["plain"].requires_grad
    same_tensor(loaded["y"].detach(), y.detach())
    (loaded["x"] * loaded["x"]).sum().backward()
    same_tensor(loaded["x"].grad, 2 * x.detach())


def test_views_keep_sharing_memory(rng):
    base = pf_tensor(rng, (6, 5), "float32")
    loaded = pf_round_trip(views_of(base))
    for name, view in views_of(base).items():
        same_tensor(loaded[name], view)
        assert loaded[name].stride() == view.stride(), name
        assert loaded[name].storage_offset() == view.storage_offset(), name
    loaded["base"][2, 3] = -100.0  # writes through to every loaded view of that element
    assert loaded["offset"][1, 3].item() == -100.0
    assert loaded["transposed"][3, 2].item() == -100.0
    assert loaded["row"][3].item() == -100.0


def test_small_view_met_before_its_base(rng):
    base = pf_tensor(rng, (30,), "int32")
    obj = [base[3:5], base[::7], base]  # the record's size is known only after the last tensor
    for zip_format in (True, False):
        buf = io.BytesIO()
        pf.save(obj, buf, _use_new_zipfile_serialization=zip_format)
        buf.seek(0)
        for got, want in zip(torch.load(buf), obj):
            same_tensor(got, want)
        buf.seek(0)
        loaded = pf.load(buf)
        for got, want in zip(loaded, obj):
            same_tensor(got, want)
        loaded[2][4] = -1
        assert loaded[0][1].item() == -1


def test_a_view_alone_saves_only_what_it_reaches(rng):
    big = pf_tensor(rng, (1000,), "float64")
    buf = io.BytesIO()
    pf.save(big[10:20], buf)
    assert len(buf.getvalue()) < 2000  # 20 elements (offset 10 + 10), not 1000
    buf.seek(0)
    same_tensor(pf.load(buf), big[10:20])


def test_nested_containers_and_plain_values(rng):
    t = pf_tensor(rng, (2, 3), "float32")
    obj = collections.OrderedDict(
        model=collections.OrderedDict([("w", t), ("b", pf_tensor(rng, (3,), "float64"))]),
        history=[1, 2.5, None, True, "text", b"\x00bytes", (t, [t[0]]), {"nested": {"deep": pf.arange(3)}}],
        config={"dtype": pf.float16, "device": pf.device("cpu"), "size": pf.Size([2, 3]), "set": {1, 2},
                "frozen": frozenset({"a"}), "complex": 1 + 2j, "slice": slice(1, 5, 2)},
        numpy={"array": rng.standard_normal((2, 3)), "scalar": np.float64(2.5), "int": np.int32(7)},
        step=10)
    loaded = pf_round_trip(obj)
    assert type(loaded) is collections.OrderedDict and type(loaded["model"]) is collections.OrderedDict
    same_tensor(loaded["model"]["w"], t)
    history = loaded["history"]
    assert history[:6] == [1, 2.5, None, True, "text", b"\x00bytes"]
    assert isinstance(history[6], tuple) and isinstance(history[6][1], list)
    assert history[6][0] is loaded["model"]["w"]  # one object saved twice loads as one object
    same_tensor(history[6][1][0], t[0])
    same_tensor(history[7]["nested"]["deep"], pf.arange(3))
    config = loaded["config"]
    assert config["dtype"] is pf.float16 and config["device"] == pf.device("cpu")
    assert type(config["size"]) is pf.Size and config["size"] == (2, 3)
    assert config["set"] == {1, 2} and config["frozen"] == frozenset({"a"})
    assert config["complex"] == 1 + 2j and config["slice"] == slice(1, 5, 2)
    np.testing.assert_array_equal(loaded["numpy"]["array"], obj["numpy"]["array"])
    assert loaded["numpy"]["scalar"] == 2.5 and loaded["numpy"]["int"].dtype == np.int32
    assert loaded["step"] == 10


def test_paths_and_file_objects(rng, tmp_path):
    t = pf_tensor(rng, (4, 3), "float32")
    pf.save(t, str(tmp_path / "a.pt"))
    pf.save(t, tmp_path / "b.pt")  # os.PathLike
    with open(tmp_path / "c.pt", "wb") as f:
        pf.save(t, f)
    for name in ("a.pt", "b.pt", "c.pt"):
        same_tensor(pf.load(tmp_path / name), t)
        with open(tmp_path / name, "rb") as f:
            same_tensor(pf.load(f), t)
    assert sorted(os.listdir(tmp_path)) == ["a.pt", "b.pt", "c.pt"]  # no temporary files left


class WriteOnly:
    def __init__(self):
        self.chunks = []

    def write(self, data):
        self.chunks.append(bytes(data))
        return len(data)


class ReadOnly:
    def __init__(self, data):
        self._buf = io.BytesIO(data)

    def read(self, n=-1):
        return self._buf.read(n)


def test_unseekable_streams(rng):
    obj = {"a": pf_tensor(rng, (4, 3), "float32").t(), "b": pf_tensor(rng, (5,), "bfloat16")}
    for zip_format in (True, False):
        sink = WriteOnly()
        pf.save(obj, sink, _use_new_zipfile_serialization=zip_format)
        loaded = pf.load(ReadOnly(b"".join(sink.chunks)))
        same_tensor(loaded["a"], obj["a"])
        same_tensor(loaded["b"], obj["b"])


def test_same_object_gives_the_same_bytes(rng):
    obj = {"w": pf_tensor(rng, (3, 3), "float32"), "n": 1}
    first, second = io.BytesIO(), io.BytesIO()
    pf.save(obj, first)
    pf.save(obj, second)
    assert first.getvalue() == second.getvalue()


def test_storage_records_are_64_byte_aligned(rng):
    buf = io.BytesIO()
    pf.save({"a": pf_tensor(rng, (3,), "float32"), "b": pf_tensor(rng, (5,), "int16")}, buf)
    with zipfile.ZipFile(buf) as zf:
        for info in zf.infolist():
            data_offset = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            assert data_offset % 64 == 0, info.filename
            assert info.compress_type == zipfile.ZIP_STORED


# ---- plugflow <-> torch ---------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_torch_loads_plugflow_checkpoints(rng, protocol):
    base = pf_tensor(rng, (6, 5), "float32")
    obj = {"views": views_of(base), "dtype": pf.int16, "size": pf.Size([1, 2]), "device": pf.device("cpu"),
           "grad": pf_tensor(rng, (2,), "float64").requires_grad_()}
    obj.update({name: pf_tensor(rng, (3, 2), name) for name in DTYPE_NAMES})
    buf = io.BytesIO()
    pf.save(obj, buf, pickle_protocol=protocol)
    buf.seek(0)
    loaded = torch.load(buf)
    for name in DTYPE_NAMES:
        same_tensor(loaded[name], obj[name])
    for name, view in obj["views"].items():
        same_tensor(loaded["views"][name], view)
        assert loaded["views"][name].stride() == view.stride()
        assert loaded["views"][name].storage_offset() == view.storage_offset()
    shared = {loaded["views"][name].storage().data_ptr() for name in obj["views"]}
    assert len(shared) == 1  # one storage in torch too
    assert loaded["dtype"] is torch.int16 and loaded["size"] == torch.Size([1, 2])
    assert loaded["device"] == torch.device("cpu")
    assert loaded["grad"].requires_grad


def test_torch_loads_plugflow_legacy_format(rng):
    base = pf_tensor(rng, (4, 4), "float64")
    buf = io.BytesIO()
    pf.save({"a": base, "b": base[1:, ::2], "i": pf_tensor(rng, (3,), "int32")}, buf,
            _use_new_zipfile_serialization=False)
    buf.seek(0)
    loaded = torch.load(buf)
    same_tensor(loaded["a"], base)
    same_tensor(loaded["b"], base[1:, ::2])
    assert loaded["a"].storage().data_ptr() == loaded["b"].storage().data_ptr()
    buf.seek(0)
    same_tensor(pf.load(buf)["b"], base[1:, ::2])


@pytest.mark.parametrize("zip_format", [True, False])
def test_plugflow_loads_torch_checkpoints(rng, zip_format):
    base = torch_tensor(rng, (6, 5), "float32")
    obj = {"views": views_of(base), "param": torch.nn.Parameter(torch_tensor(rng, (3,), "float32")),
           "frozen": torch.nn.Parameter(torch_tensor(rng, (2,), "float32"), requires_grad=False),
           "dtype": torch.bfloat16, "size": torch.Size([4]), "list": [1, "two", (3.0,)],
           "od": collections.OrderedDict(a=torch.arange(3))}
    obj.update({name: torch_tensor(rng, (2, 3), name) for name in DTYPE_NAMES})
    obj.update({name + "_t": torch_tensor(rng, (3, 4), name).t() for name in DTYPE_NAMES})
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zip_format)
    buf.seek(0)
    loaded = pf.load(buf)
    for name in DTYPE_NAMES:
        same_tensor(loaded[name], obj[name])
        same_tensor(loaded[name + "_t"], obj[name + "_t"])
        assert loaded[name + "_t"].stride() == obj[name + "_t"].stride()
    for name, view in obj["views"].items():
        same_tensor(loaded["views"][name], view)
        assert loaded["views"][name].stride() == view.stride()
    loaded["views"]["base"][1, 0] = 42.0
    assert loaded["views"]["offset"][0, 0].item() == 42.0  # shared storage stays shared
    param = loaded["param"]
    assert type(param) is pf.nn.Parameter and param.requires_grad and param.is_leaf
    assert not loaded["frozen"].requires_grad
    same_tensor(param.detach(), obj["param"].detach())
    (param * 3).sum().backward()
    same_tensor(param.grad, pf.full((3,), 3.0))
    assert loaded["dtype"] is pf.bfloat16 and loaded["size"] == pf.Size([4])
    assert loaded["list"] == [1, "two", (3.0,)] and type(loaded["od"]) is collections.OrderedDict


def test_parameters_cross_both_ways(rng):
    weight = pf.nn.Parameter(pf_tensor(rng, (3, 2), "float32"))
    frozen = pf.nn.Parameter(pf_tensor(rng, (2,), "float64"), requires_grad=False)
    buf = io.BytesIO()
    pf.save({"weight": weight, "frozen": frozen}, buf)
    buf.seek(0)
    in_torch = torch.load(buf)
    assert type(in_torch["weight"]) is torch.nn.Parameter and in_torch["weight"].requires_grad
    assert not in_torch["frozen"].requires_grad
    same_tensor(in_torch["weight"].detach(), weight.detach())
    buf.seek(0)
    in_plugflow = pf.load(buf)
    assert type(in_plugflow["weight"]) is pf.nn.Parameter and in_plugflow["weight"].requires_grad
    assert type(in_plugflow["frozen"]) is pf.nn.Parameter and not in_plugflow["frozen"].requires_grad
    same_tensor(in_plugflow["frozen"].detach(), frozen.detach())
    copy = pickle.loads(pickle.dumps(weight))
    assert type(copy) is pf.nn.Parameter and copy.requires_grad


def test_plugflow_loads_torch_scalars_empties_and_offsets(rng):
    big = torch_tensor(rng, (50,), "int64")
    obj = [torch.tensor(2.5), torch.zeros(0, 4), big[45:], big[10:10], big[3:40:7]]
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    for got, want in zip(pf.load(buf), obj):
        same_tensor(got, want)


def test_state_dict_from_a_torch_module():
    module = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.BatchNorm1d(3))
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    buf.seek(0)
    loaded = pf.load(buf)
    assert list(loaded) == list(module.state_dict())
    for key, value in module.state_dict().items():
        same_tensor(loaded[key], value)


# ---- map_location ---------------------------------------------------------------------------------

def checkpoint_on(location, t):
    """A torch.save checkpoint of t whose storage claims to live at location."""
    buf = io.BytesIO()
    torch.save({"t": t}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src:
        records = {info.filename: src.read(info) for info in src.infolist()}
    name = next(n for n in records if n.endswith("data.pkl"))
    records[name] = records[name].replace(b"X\x03\x00\x00\x00cpu", b"X" + len(location).to_bytes(4, "little")
                                          + location.encode())
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for record, data in records.items():
            dst.writestr(record, data)
    out.seek(0)
    return out


def test_map_location(rng):
    t = torch_tensor(rng, (3, 2), "float32")
    for map_location in ("cpu", pf.device("cpu"), {"cuda:0": "cpu"}, lambda storage, location: storage,
                         lambda storage, location: None if location == "cpu" else storage):
        loaded = pf.load(checkpoint_on("cuda:0", t), map_location=map_location)["t"]
        assert loaded.device == pf.device("cpu")
        same_tensor(loaded, t)
    if not pf.cuda.is_available():
        with pytest.raises(RuntimeError, match="map_location"):
            pf.load(checkpoint_on("cuda:0", t))
    with pytest.raises(TypeError, match="map_location"):
        pf.load(checkpoint_on("cpu", t), map_location=3)
    with pytest.raises(RuntimeError, match="map_location"):
        pf.load(checkpoint_on("cpu", t), map_location=lambda storage, location: "nonsense")


# ---- Tensor pickling ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_tensor_pickling(rng, dtype):
    t = pf_tensor(rng, (4, 6), dtype)
    for view in (t, t.t(), t[1:, ::3], t[0:0], t[2, 3]):
        for protocol in (2, pickle.HIGHEST_PROTOCOL):
            copy = pickle.loads(pickle.dumps(view, protocol=protocol))
            assert type(copy) is pf.Tensor
            same_tensor(copy, view)
    if dtype in FLOAT_NAMES:
        copy = pickle.loads(pickle.dumps(t.requires_grad_() * 1))
        assert copy.requires_grad and copy.is_leaf
    t.note = "attribute"
    assert pickle.loads(pickle.dumps(t)).note == "attribute"


def test_pickled_tensors_load_through_the_restricted_unpickler(rng):
    t = pf_tensor(rng, (3,), "bfloat16")
    buf = io.BytesIO(pickle.dumps({"t": t}))
    loaded = serialization._RestrictedUnpickler(buf, len(buf.getvalue()), None, "utf-8").load()
    same_tensor(loaded["t"], t)


# ---- atomic saves ---------------------------------------------------------------------------------

def test_failed_save_leaves_the_previous_file(rng, tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    old = {"w": pf_tensor(rng, (5,), "float32")}
    pf.save(old, path)
    os.chmod(path, 0o640)
    new = {"a": pf_tensor(rng, (300,), "float32"), "b": pf_tensor(rng, (300,), "float64")}

    calls = []
    original = serialization._Storage.numpy

    def fail_on_second_storage(self):
        calls.append(self.key)
        if len(calls) == 2:  # data.pkl and the first storage are already in the temporary file
            raise OSError("disk full")
        return original(self)

    monkeypatch.setattr(serialization._Storage, "numpy", fail_on_second_storage)
    with pytest.raises(OSError, match="disk full"):
        pf.save(new, path)
    monkeypatch.undo()
    same_tensor(pf.load(path)["w"], old["w"])
    assert os.listdir(tmp_path) == ["ckpt.pt"]

    class Unpicklable:
        def __reduce__(self):
            raise pickle.PicklingError("cannot pickle this")

    with pytest.raises(pickle.PicklingError):
        pf.save({"a": new["a"], "bad": Unpicklable()}, path)
    same_tensor(pf.load(path)["w"], old["w"])
    assert os.listdir(tmp_path) == ["ckpt.pt"]

    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("I/O error")))
    with pytest.raises(OSError, match="I/O error"):
        pf.save(new, path)
    monkeypatch.undo()
    same_tensor(pf.load(path)["w"], old["w"])
    assert os.listdir(tmp_path) == ["ckpt.pt"]

    pf.save(new, path)  # a successful save replaces it, keeping the file's mode
    same_tensor(pf.load(path)["b"], new["b"])
    assert os.stat(path).st_mode & 0o777 == 0o640


def temporaries(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


# Saves argv[2] float32 elements to argv[1]; with argv[3] == "stall" it stops for good after the
# first storage record is written, saying so on stdout.
SAVE_WORKER = """
import signal, sys
import plugflow as pf
from plugflow import serialization

path, numel, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
write_record = serialization._write_record

def stall_after_the_first_storage(zf, name, payload):
    write_record(zf, name, payload)
    if name == "data/0":
        print("stalled", flush=True)
        signal.pause()

if mode == "stall":
    serialization._write_record = stall_after_the_first_storage
pf.save({"a": pf.arange(numel, dtype=pf.float32), "b": pf.ones(3)}, path)
"""


def start_saving(path, numel, mode):
    return subprocess.Popen([sys.executable, "-c", SAVE_WORKER, str(path), str(numel), mode], stdout=subprocess.PIPE,
                            text=True)


def test_a_killed_save_leaves_nothing_after_the_next_save(rng, tmp_path):
    path = tmp_path / "ckpt.pt"
    old = {"w": pf_tensor(rng, (5,), "float32")}
    pf.save(old, path)
    # A writer stopped mid-write holds its temporary file: a concurrent save leaves it alone.
    writer = start_saving(path, 1 << 20, "stall")
    try:
        assert writer.stdout.readline() == "stalled\n"
        assert len(temporaries(tmp_path)) == 1
        concurrent = {"c": pf_tensor(rng, (7,), "float64")}
        pf.save(concurrent, path)
        assert len(temporaries(tmp_path)) == 1
        same_tensor(pf.load(path)["c"], concurrent["c"])
    finally:
        writer.kill()
        writer.wait()
    # Killed, it leaves the temporary file and the target as it was; the next save removes it.
    assert len(temporaries(tmp_path)) == 1
    same_tensor(pf.load(path)["c"], concurrent["c"])
    pf.save(old, path)
    assert os.listdir(tmp_path) == ["ckpt.pt"]
    same_tensor(pf.load(path)["w"], old["w"])


def test_a_save_killed_at_any_moment_keeps_a_complete_file(rng, tmp_path):
    path = tmp_path / "ckpt.pt"
    old = {"w": pf_tensor(rng, (5,), "float32")}
    numel = 8 << 20  # 32 MiB
    for _ in range(3):
        pf.save(old, path)
        writer = start_saving(path, numel, "run")
        while writer.poll() is None and not temporaries(tmp_path):
            time.sleep(0.001)
        time.sleep(float(rng.uniform(0, 0.05)))  # somewhere in the write (or after it)
        writer.kill()
        writer.wait()
        loaded = pf.load(path)  # the old file or the new one, complete
        if "w" in loaded:
            same_tensor(loaded["w"], old["w"])
        else:
            assert np.array_equal(loaded["a"].numpy(), np.arange(numel, dtype=np.float32))
        pf.save(old, path)
        assert os.listdir(tmp_path) == ["ckpt.pt"]


def test_stale_temporaries_of_the_target_only_are_removed(rng, tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    names = {"dead": ".ckpt.pt.0123456789ab.tmp", "live": ".ckpt.pt.ba9876543210.tmp",
             "other target": ".other.pt.0123456789ab.tmp", "other pattern": ".ckpt.pt.notes.tmp",
             "prefix of the name": ".ckpt.0123456789ab.tmp"}
    for name in names.values():
        (tmp_path / name).write_bytes(b"partial")
    live = os.open(tmp_path / names["live"], os.O_RDWR)
    try:
        fcntl.flock(live, fcntl.LOCK_EX)  # as a writer in another process holds it
        pf.save(pf.ones(2), path)
        assert temporaries(tmp_path) == sorted(n for key, n in names.items() if key != "dead")
    finally:
        os.close(live)
    pf.save(pf.ones(2), path)
    assert temporaries(tmp_path) == sorted(n for key, n in names.items() if key not in ("dead", "live"))

    # Without locks (a file system that has none), only files untouched for an hour go.
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    for name, age in ((names["dead"], 7200), (names["live"], 60)):
        (tmp_path / name).write_bytes(b"partial")
        os.utime(tmp_path / name, (time.time() - age, time.time() - age))
    pf.save(pf.ones(3), path)
    assert names["dead"] not in temporaries(tmp_path) and names["live"] in temporaries(tmp_path)
    same_tensor(pf.load(path), pf.ones(3))


def test_an_interrupted_save_removes_its_temporary_file(rng, tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    old = pf_tensor(rng, (5,), "float32")
    pf.save(old, path)
    write_record = serialization._write_record

    def interrupt_after_the_first_storage(zf, name, payload):
        write_record(zf, name, payload)
        if name == "data/0":
            raise KeyboardInterrupt

    monkeypatch.setattr(serialization, "_write_record", interrupt_after_the_first_storage)
    with pytest.raises(KeyboardInterrupt):
        pf.save([pf_tensor(rng, (100,), "float32"), pf.ones(2)], path)
    assert os.listdir(tmp_path) == ["ckpt.pt"]
    same_tensor(pf.load(path), old)


def test_save_through_a_symlink_replaces_the_target(rng, tmp_path):
    target = tmp_path / "real.pt"
    pf.save(pf.zeros(2), target)
    (tmp_path / "link.pt").symlink_to(target)
    t = pf_tensor(rng, (3,), "float32")
    pf.save(t, tmp_path / "link.pt")
    assert (tmp_path / "link.pt").is_symlink()
    same_tensor(pf.load(target), t)


# ---- bad input ------------------------------------------------------------------------------------

def checkpoint_bytes(rng, zip_format=True):
    buf = io.BytesIO()
    pf.save({"a": pf_tensor(rng, (40,), "float32"), "b": [pf_tensor(rng, (3, 3), "int64"), "x"]}, buf,
            _use_new_zipfile_serialization=zip_format)
    return buf.getvalue()


@pytest.mark.parametrize("zip_format", [True, False])
def test_truncated_files_raise_runtime_error(rng, zip_format, tmp_path):
    data = checkpoint_bytes(rng, zip_format)
    cuts = {0, 1, 4, len(data) - 1} | set(rng.integers(1, len(data), size=25).tolist())
    for cut in sorted(cuts):
        with pytest.raises(RuntimeError):
            pf.load(io.BytesIO(data[:cut]))
    (tmp_path / "cut.pt").write_bytes(data[:len(data) // 2])
    with pytest.raises(RuntimeError, match="cut.pt"):
        pf.load(tmp_path / "cut.pt")


@pytest.mark.parametrize("zip_format", [True, False])
def test_corrupt_files_raise_runtime_error(rng, zip_format):
    data = checkpoint_bytes(rng, zip_format)
    for position in rng.integers(0, len(data), size=40).tolist():
        corrupt = bytearray(data)
        corrupt[position] ^= int(rng.integers(1, 256))
        try:
            pf.load(io.BytesIO(bytes(corrupt)))
        except RuntimeError:
            pass  # the usual outcome; a flip in a value or padding byte may load without error
    for size in (1, 10, 1000):
        with pytest.raises(RuntimeError):
            pf.load(io.BytesIO(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()))
    with pytest.raises(RuntimeError):
        pf.load(io.BytesIO(b""))


def test_zip_without_a_checkpoint_inside():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("something/else.txt", "hello")
    buf.seek(0)
    with pytest.raises(RuntimeError, match="data.pkl"):
        pf.load(buf)


def test_storage_record_of_the_wrong_size(rng):
    data = checkpoint_bytes(rng)
    with zipfile.ZipFile(io.BytesIO(data)) as src:
        records = {info.filename: src.read(info) for info in src.infolist()}
    records["archive/data/0"] = records["archive/data/0"][:-4]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name, payload in records.items():
            dst.writestr(name, payload)
    out.seek(0)
    with pytest.raises(RuntimeError, match="archive/data/0"):
        pf.load(out)


class RunsCode:
    """A pickle that runs a shell command when unpickled by an unrestricted loader."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class CallsEval:
    def __reduce__(self):
        return eval, ("__import__('os').getcwd()",)


def test_malicious_pickles_are_refused_without_running_anything(tmp_path):
    marker = tmp_path / "pwned"
    payloads = {"zip": io.BytesIO(), "legacy": io.BytesIO(),
                "raw pickle": io.BytesIO(pickle.dumps(RunsCode(marker), protocol=2)),
                "raw pickle protocol 5": io.BytesIO(pickle.dumps({"x": RunsCode(marker)}, protocol=5))}
    torch.save({"weights": torch.ones(2), "payload": RunsCode(marker)}, payloads["zip"])
    torch.save([torch.ones(2), RunsCode(marker)], payloads["legacy"], _use_new_zipfile_serialization=False)
    for name, buf in payloads.items():
        buf.seek(0)
        with pytest.raises(pickle.UnpicklingError, match="system"):
            pf.load(buf)
        assert not marker.exists(), name
    buf = io.BytesIO()
    torch.save({"payload": CallsEval()}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="eval"):
        pf.load(buf, weights_only=False)  # always restricted


def test_pickles_cannot_alter_the_allow_listed_objects(rng):
    # BUILD on the object torch.FloatStorage resolves to, setting its dtype to float64 (which would
    # misread every later float32 checkpoint), and on an allow-listed function.
    for target in (b"ctorch\nFloatStorage\n", b"ctorch._utils\n_rebuild_tensor_v2\n"):
        hostile = (b"\x80\x02" + target + b"}X\x05\x00\x00\x00dtypeX\x07\x00\x00\x00float64sb.")
        with pytest.raises(pickle.UnpicklingError, match="setting the state of .* is not allowed"):
            pf.load(io.BytesIO(hostile))
    t = torch_tensor(rng, (4,), "float32")
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    same_tensor(pf.load(buf), t)


def test_bad_arguments(rng, tmp_path):
    with pytest.raises(TypeError):
        pf.save(pf.zeros(1), 42)
    with pytest.raises(TypeError):
        pf.load(42)
    with pytest.raises(ValueError):
        pf.save(pf.zeros(1), io.BytesIO(), pickle_protocol=1)
    with pytest.raises(FileNotFoundError):
        pf.load(tmp_path / "missing.pt")


# ---- hostile checkpoints --------------------------------------------------------------------------

class TorchName:
    """A global in torch's namespace (torch.FloatStorage, ...), written into a crafted pickle."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle insists that reduce functions be callable
        raise TypeError("a placeholder")


class StorageId:
    """A storage's persistent id as torch.save writes it, with any element count."""

    def __init__(self, key, numel, storage_class="FloatStorage", legacy=False):
        self.pid = ("storage", TorchName("torch", storage_class), key, "cpu", numel) + ((None,) if legacy else ())


class TensorOf:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...) with any arguments."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())


class CraftingPickler(pickle._Pickler):
    dispatch = pickle._Pickler.dispatch.copy()

    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, StorageId) else None

    def reducer_override(self, obj):
        if isinstance(obj, TensorOf):
            return TorchName("torch._utils", "_rebuild_tensor_v2"), obj.args
        return NotImplemented

    def save_torch_name(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())

    dispatch[TorchName] = save_torch_name


def crafted_pickle(obj):
    buf = io.BytesIO()
    CraftingPickler(buf, 2).dump(obj)
    return buf.getvalue()


def crafted_zip(records, compression=zipfile.ZIP_STORED):
    """A checkpoint archive of {name under archive/: bytes}."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in records.items():
            zf.writestr(f"archive/{name}", data)
    return buf.getvalue()


def tensor_checkpoint(offset, size, stride, numel=4, record=None, storage_class="FloatStorage"):
    """A checkpoint of one tensor viewing storage '0' of numel elements (record: its bytes)."""
    pkl = crafted_pickle({"t": TensorOf(StorageId("0", numel, storage_class), offset, size, stride)})
    return crafted_zip({"data.pkl": pkl, "data/0": bytes(16) if record is None else record, "version": b"3\n"})


def legacy_checkpoint(storages):
    """A legacy-format checkpoint of a list of 1-D float tensors, one per (declared numel, bytes)."""
    out = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}):
        pickle.dump(header, out, protocol=2)
    ids = [StorageId(str(i), numel, legacy=True) for i, (numel, _) in enumerate(storages)]
    out.write(crafted_pickle([TensorOf(s, 0, (s.pid[4],), (1,)) for s in ids]))
    pickle.dump([s.pid[2] for s in ids], out, protocol=2)
    for (numel, data) in storages:
        out.write(numel.to_bytes(8, "little") + data)
    return out.getvalue()


def patch_member(data, name, **fields):
    """Rewrites fields of a zip member's local and central headers: method, flags, size (the
    uncompressed size)."""
    data = bytearray(data)
    offsets = {"local": {"flags": 6, "method": 8, "size": 22}, "central": {"flags": 8, "method": 10, "size": 24}}
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        local, central = zf.getinfo(name).header_offset, zf.start_dir
    while data[central + 46:central + 46 + len(name)] != name.encode():  # walk the central directory
        lengths = [int.from_bytes(data[central + i:central + i + 2], "little") for i in (28, 30, 32)]
        central += 46 + sum(lengths)
    for header, start in (("local", local), ("central", central)):
        for field, value in fields.items():
            width = 4 if field == "size" else 2
            at = start + offsets[header][field]
            data[at:at + width] = value.to_bytes(width, "little")
    return bytes(data)


def deflated_zeros_zip(member, nbytes, others):
    """An archive whose `member` is nbytes of zeros, deflated (a zip bomb), beside other records."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, data in others.items():
            zf.writestr(f"archive/{name}", data)
        with zf.open(f"archive/{member}", "w") as f:
            chunk = bytes(1 << 20)
            for _ in range(nbytes >> 20):
                f.write(chunk)
    return buf.getvalue()


def test_crafted_checkpoints_are_what_torch_writes(rng):
    # The crafting helpers write what torch reads: a valid crafted checkpoint loads the same in
    # both, including a stride-0 view (broadcast views are valid).
    values = rng.standard_normal(6).astype(np.float32)
    for offset, size, stride in [(0, (2, 3), (3, 1)), (1, (2, 2), (1, 2)), (0, (1000, 6), (0, 1)), (6, (0, 5), (1, 1))]:
        data = tensor_checkpoint(offset, size, stride, numel=6, record=values.tobytes())
        expected = torch.load(io.BytesIO(data))["t"]
        same_tensor(pf.load(io.BytesIO(data))["t"], expected)
    data = legacy_checkpoint([(3, values[:3].tobytes()), (2, values[3:5].tobytes())])
    for got, want in zip(pf.load(io.BytesIO(data)), torch.load(io.BytesIO(data))):
        same_tensor(got, want)


BOMB_BYTES = 128 << 20  # what each zip bomb inflates to


def hostile_checkpoints(rng):
    """name -> (file contents, a phrase its error must hold)."""
    good = checkpoint_bytes(rng)
    giant = io.BytesIO()
    torch.save(torch.ones(4).as_strided((2**31, 2**31), (0, 0)), giant)  # 16 bytes, 2**62 elements
    small_pickle = crafted_pickle({"t": TensorOf(StorageId("0", 4), 0, (4,), (1,))})
    cases = {
        "zero-length": (b"", "empty"),
        "garbage": (rng.integers(0, 256, 1000, dtype=np.uint8).tobytes(), "invalid magic number"),
        "zip garbage": (b"PK\x03\x04" + rng.integers(0, 256, 1000, dtype=np.uint8).tobytes(), "not a valid checkpoint"),
        "truncated zip": (good[:len(good) // 2], "not a valid checkpoint"),
        "giant stride-0 view": (giant.getvalue(), "more than any tensor can hold"),
        "giant 3-d view": (tensor_checkpoint(0, (2**40, 2**40, 2**40), (0, 0, 0)), "more than any tensor can hold"),
        "offset past the end": (tensor_checkpoint(5, (1,), (1,)), "does not fit record 'archive/data/0'"),
        "view past the end": (tensor_checkpoint(0, (3,), (2,)), "does not fit record 'archive/data/0'"),
        "negative stride": (tensor_checkpoint(3, (2,), (-1,)), "invalid size"),
        "negative size": (tensor_checkpoint(0, (-2,), (1,)), "invalid size"),
        "negative offset": (tensor_checkpoint(-1, (2,), (1,)), "invalid size"),
        "size and stride lengths differ": (tensor_checkpoint(0, (2, 2), (1,)), "invalid size"),
        "non-integer size": (tensor_checkpoint(0, ("x",), (1,)), "has the size"),
        "huge declared storage": (tensor_checkpoint(0, (4,), (1,), numel=2**40), "holds 16 bytes, its storage needs"),
        "record too short": (tensor_checkpoint(0, (3,), (1,), record=bytes(12)), "holds 12 bytes, its storage needs 16"),
        "record claims 2 GiB": (patch_member(tensor_checkpoint(0, (4,), (1,), numel=2**29), "archive/data/0",
                                             size=2**31), "which the file cannot hold"),
        "negative element count": (tensor_checkpoint(0, (1,), (1,), numel=-4), "malformed storage id"),
        "storage of two dtypes": (crafted_zip({"data.pkl": crafted_pickle(
            [TensorOf(StorageId("0", 4), 0, (4,), (1,)), TensorOf(StorageId("0", 2, "LongStorage"), 0, (2,), (1,))]),
            "data/0": bytes(16)}), "viewed as both float32 and int64"),
        "missing record": (crafted_zip({"data.pkl": small_pickle}), "record 'archive/data/0' is missing"),
        "compression method 99": (patch_member(tensor_checkpoint(0, (4,), (1,)), "archive/data.pkl", method=99),
                                  "compression method 99"),
        "bzip2 pickle": (crafted_zip({"data.pkl": small_pickle, "data/0": bytes(16)}, zipfile.ZIP_BZIP2),
                         "compression method 12"),
        "encrypted": (patch_member(tensor_checkpoint(0, (4,), (1,)), "archive/data.pkl", flags=1), "encrypted"),
        # Opcodes whose few bytes claim a TiB (BINBYTES8, BYTEARRAY8, FRAME): nothing is allocated.
        "pickled bytes of 1 TiB": (crafted_zip({"data.pkl": b"\x80\x04\x8e" + (2**40).to_bytes(8, "little")}),
                                   "pickle data was truncated"),
        "pickled bytearray of 1 TiB": (crafted_zip({"data.pkl": b"\x80\x05\x96" + (2**40).to_bytes(8, "little")}),
                                       "pickle data was truncated"),
        "pickle frame of 1 TiB": (crafted_zip({"data.pkl": b"\x80\x04\x95" + (2**40).to_bytes(8, "little")}),
                                  "pickle data was truncated"),
        "trailing bytes after the pickle": (crafted_zip({"data.pkl": small_pickle + b"junk", "data/0": bytes(16)}),
                                            "goes on after its pickle"),
        "byte order of 1 MB": (crafted_zip({"data.pkl": small_pickle, "data/0": bytes(16), "byteorder": bytes(1 << 20)}),
                               "more than the 16"),
        "unknown byte order": (crafted_zip({"data.pkl": small_pickle, "data/0": bytes(16), "byteorder": b"middle"}),
                               "unknown byte order"),
        "legacy huge storage": (legacy_checkpoint([(2**40, bytes(16))]), "truncated"),
        "legacy storages sharing the file": (legacy_checkpoint([(1000, bytes(4000))] * 2 + [(1000, b"")] * 8),
                                             "truncated"),
        # Zip bombs, each inflating to BOMB_BYTES: as the pickle, as a record larger than its
        # storage, and as a record whose headers claim the storage's 16 bytes.
        "bomb pickle": (deflated_zeros_zip("data.pkl", BOMB_BYTES, {}), "invalid load key"),
        "bomb record": (deflated_zeros_zip("data/0", BOMB_BYTES, {"data.pkl": small_pickle}),
                        f"holds {BOMB_BYTES} bytes, its storage needs 16"),
        "bomb record claiming 16 bytes": (patch_member(deflated_zeros_zip("data/0", BOMB_BYTES, {"data.pkl": small_pickle}),
                                                       "archive/data/0", size=16), "CRC"),
    }
    return cases


# Loads each file in a fresh process (a crash shows as its exit status), touches what loads and
# measures the peak memory of each load (VmHWM, reset through clear_refs before each).
LOAD_WORKER = """
import io, json, sys
import plugflow as pf

def peak_kib():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])

def rss_kib():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])

# One valid load first: what the first load sets up once (imports, the unpickler's tables) is not
# a hostile file's growth (a sanitized build's allocator makes that tens of MiB).
warm = io.BytesIO()
pf.save({"t": pf.zeros(2)}, warm)
warm.seek(0)
pf.load(warm)

results = {}
for path in sys.argv[1:]:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = rss_kib()
    try:
        obj = pf.load(path)
        tensors = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else [obj]
        results[path] = ["loaded", [float(t.clone().sum()) for t in tensors]]
    except BaseException as e:
        results[path] = [type(e).__name__, str(e), isinstance(e, RuntimeError)]
    results[path].append(peak_kib() - before)
print(json.dumps(results))
"""


def test_hostile_checkpoints_raise_clear_errors(rng, tmp_path):
    cases = hostile_checkpoints(rng)
    paths = {}
    for i, (name, (data, _)) in enumerate(cases.items()):
        paths[name] = str(tmp_path / f"hostile{i}.pt")
        with open(paths[name], "wb") as f:
            f.write(data)
    proc = subprocess.run([sys.executable, "-c", LOAD_WORKER, *paths.values()], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    for name, (_, phrase) in cases.items():
        path = paths[name]
        kind, *details = results[path]
        assert kind != "loaded", f"{name}: loaded {details}"
        message, is_runtime_error, peak_growth_kib = details
        assert is_runtime_error, f"{name}: {kind}: {message}"
        assert f"plugflow.load: '{path}'" in message, f"{name}: the message does not name the file: {message}"
        assert phrase in message, f"{name}: {message}"
        assert peak_growth_kib < (BOMB_BYTES >> 10) // 8, f"{name}: peak memory grew by {peak_growth_kib} KiB"


def test_errors_name_the_file(rng, tmp_path):
    data = tensor_checkpoint(5, (1,), (1,))
    path = tmp_path / "view.pt"
    path.write_bytes(data)
    named = re.escape(f"plugflow.load: '{path}': ")
    with open(path, "rb") as f:
        with pytest.raises(RuntimeError, match=named + "corrupt checkpoint"):
            pf.load(f)
    with pytest.raises(RuntimeError, match="plugflow.load: <file-like object>: corrupt checkpoint"):
        pf.load(io.BytesIO(data))
    with pytest.raises(RuntimeError, match="plugflow.load: <file-like object>: the file is empty"):
        pf.load(ReadOnly(b""))
    hostile = io.BytesIO()
    torch.save({"payload": RunsCode(tmp_path / "pwned")}, hostile)
    path.write_bytes(hostile.getvalue())
    with pytest.raises(pickle.UnpicklingError, match=named + "the global 'posix.system' is not allowed"):
        pf.load(path)
    if not pf.cuda.is_available():
        path.write_bytes(checkpoint_on("cuda:0", torch_tensor(rng, (2,), "float32")).getvalue())
        with pytest.raises(RuntimeError, match=named + "Attempting to deserialize"):
            pf.load(path)
