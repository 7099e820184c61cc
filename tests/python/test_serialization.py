"""plugflow.save / plugflow.load against torch.save / torch.load: round trips of every dtype,
views and shared storages, nested containers, files crossing between the two libraries in both
directions (zip and legacy formats), map_location, pickling of tensors, atomic saves, and
corrupt, truncated and malicious files."""

import collections
import io
import os
import pickle
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
    loaded = serialization._RestrictedUnpickler(buf, None, "utf-8").load()
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
        with pytest.raises(pickle.UnpicklingError, match="refuses to set the state"):
            pf.load(io.BytesIO(hostile))
    t = torch_tensor(rng, (4,), "float32")
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    same_tensor(pf.load(buf), t)


def test_hostile_tensor_geometry_is_refused(rng):
    storage = serialization._LoadedStorage("float32", pf.zeros(10))
    for offset, size, stride in [(0, (11,), (1,)), (5, (2, 3), (3, 1)), (-1, (2,), (1,)), (0, (2,), (-1,)),
                                 (0, (2, 2), (1,)), (0, ("x",), (1,))]:
        with pytest.raises(RuntimeError, match="corrupt checkpoint"):
            serialization._rebuild_tensor_v2(storage, offset, size, stride)


def test_bad_arguments(rng, tmp_path):
    with pytest.raises(TypeError):
        pf.save(pf.zeros(1), 42)
    with pytest.raises(TypeError):
        pf.load(42)
    with pytest.raises(ValueError):
        pf.save(pf.zeros(1), io.BytesIO(), pickle_protocol=1)
    with pytest.raises(FileNotFoundError):
        pf.load(tmp_path / "missing.pt")
