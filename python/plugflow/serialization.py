"""plugflow.save and plugflow.load: checkpoints in PyTorch's file format.

save() writes what torch.save writes: a zip archive holding `archive/data.pkl` (the object,
pickled with protocol 2, each tensor as `torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, requires_grad, OrderedDict())` and each storage as a persistent id
`('storage', torch.FloatStorage, key, location, numel)`), the raw little-endian bytes of every
storage in `archive/data/<key>` (64-byte aligned) and `archive/version`. torch.load reads it, and
plugflow never imports torch: the torch names are written into the pickle as plain references.
Tensors that share memory (views of one tensor) share one storage record, so they still share
memory after loading, in plugflow and in PyTorch.

load() reads those archives, whether written by plugflow.save or by torch.save, and torch.save's
older non-zip format (`_use_new_zipfile_serialization=False`). It never runs code from the file:
its unpickler resolves only an allow-list of names (tensor and storage rebuilds, torch/plugflow
dtypes, devices and sizes, collections.OrderedDict, plain containers, numpy arrays and scalars)
and raises pickle.UnpicklingError naming anything else. That is PyTorch's `weights_only=True`,
always: checkpoints of tensors, state dicts and plain values load; pickled instances of other
classes (whole modules, user objects) do not. A truncated, corrupt or hostile file raises
RuntimeError naming the file: sizes, views and zip records are checked against the file before
memory is allocated or touched (docs/design.md).
"""

import builtins
import codecs
import collections
import contextlib
import fcntl
import io
import math
import os
import pickle
import re
import secrets
import stat
import struct
import sys
import time
import zipfile

from . import _C, _tensor
from ._C import Tensor
from ._size import Size

__all__ = ["save", "load", "DEFAULT_PROTOCOL"]

DEFAULT_PROTOCOL = 2  # torch.serialization.DEFAULT_PROTOCOL

_ARCHIVE = "archive"  # the top-level folder in the zip; readers accept any name
_FORMAT_VERSION = b"3\n"  # what torch 1.13 writes to <archive>/version
_ALIGNMENT = 64  # storage records start on 64-byte boundaries, as torch.save writes them
# The legacy (non-zip) format: three small pickles, the object, the list of storage keys, then
# each storage as an int64 element count followed by its bytes.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

_DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
# torch's typed storage class for each dtype: the second item of a storage's persistent id.
_STORAGE_CLASS = {"bool": "BoolStorage", "uint8": "ByteStorage", "int8": "CharStorage", "int16": "ShortStorage",
                  "int32": "IntStorage", "int64": "LongStorage", "float16": "HalfStorage",
                  "bfloat16": "BFloat16Storage", "float32": "FloatStorage", "float64": "DoubleStorage"}
# numpy's dtype for each storage's bytes (bfloat16 travels as its raw 16 bits). numpy itself is
# imported on first use, keeping `import plugflow` free of it.
_NUMPY_DTYPE = dict({name: name for name in _DTYPE_NAMES}, bfloat16="uint16")
# torch's dtype aliases, which a pickled torch.dtype may be written as.
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
                  "short": "int16"}


def _dtype_name(dtype):
    return repr(dtype).rpartition(".")[2]  # plugflow.float32 -> "float32"


def _parameter_class():
    """plugflow.nn.Parameter once it exists, else None (parameters load as plain tensors)."""
    return getattr(sys.modules.get("plugflow.nn"), "Parameter", None)


# ==== save ========================================================================================

class _TorchName:
    """A global in torch's namespace (torch.FloatStorage, torch._utils._rebuild_tensor_v2, ...),
    written into the pickle as a reference without importing torch."""

    _interned = {}

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args, **kwargs):
        # Never called: pickle only insists that what it writes as a reduce function be callable.
        raise TypeError(f"{self.module}.{self.name} is a placeholder for PyTorch's function")

    @classmethod
    def get(cls, module, name):
        # One object per name, so the pickle memo writes each reference once.
        return cls._interned.setdefault((module, name), cls(module, name))


class _Storage:
    """One storage record: the memory that a group of saved tensors views."""

    def __init__(self, key, tensor):
        self.key = key
        self.tensor = tensor  # a member of the group; also keeps the memory (and its address) alive
        self.dtype = _dtype_name(tensor.dtype)
        self.location = str(tensor.device)
        self.numel = 0  # elements [0, numel) of the memory cover every tensor of the group

    def persistent_id(self, legacy):
        pid = ("storage", _TorchName.get("torch", _STORAGE_CLASS[self.dtype]), self.key, self.location, self.numel)
        return pid + (None,) if legacy else pid  # the legacy format adds view metadata

    def numpy(self):
        """The storage's bytes as a contiguous numpy array on the CPU."""
        import numpy as np

        flat = _C.as_strided(self.tensor.detach(), (self.numel,), (1,), 0).cpu()
        if self.dtype == "bfloat16":  # float32 holds bfloat16 exactly; its top 16 bits are the bfloat16
            return (flat.float().numpy().view(np.uint32) >> 16).astype(np.uint16)
        return np.ascontiguousarray(flat.numpy())


class _StorageTable:
    """Assigns saved tensors to storage records. Tensors viewing the same memory (same device,
    dtype and start address) share a record that covers all of them. The object is pickled twice:
    the first pass (_SizingPickler) sizes the records, since a storage's persistent id holds its
    length; the second (_CheckpointPickler) writes. Both meet the tensors in the same order."""

    def __init__(self):
        self.storages = {}  # (device, dtype, base address) -> _Storage
        self._visits = []  # the storage of each tensor met in the first pass, in order
        self._next_visit = None  # set by finish(): the second pass replays _visits

    def storage_for(self, t):
        if self._next_visit is not None:
            storage = self._visits[self._next_visit]
            self._next_visit += 1
            if t.numel() and t.storage_offset() + _reach(t) > storage.numel:
                raise RuntimeError("plugflow.save: a tensor changed while the object was being saved")
            return storage
        if t.numel() == 0:  # no memory to share: a record of its own, read at offset 0
            base = ("empty", len(self._visits))
        else:
            base = t.data_ptr() - t.storage_offset() * t.element_size()
        key = (str(t.device), _dtype_name(t.dtype), base)
        storage = self.storages.get(key)
        if storage is None:
            storage = self.storages[key] = _Storage(str(len(self.storages)), t)
        if t.numel():
            storage.numel = max(storage.numel, t.storage_offset() + _reach(t))
        self._visits.append(storage)
        return storage

    def finish(self):
        self._next_visit = 0


def _reach(t):
    """How many elements past its offset a non-empty tensor reaches."""
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


class _SizingPickler(pickle.Pickler):
    """The first pass: the fast C pickler, into nothing, registering every tensor it meets."""

    def __init__(self, table, protocol):
        super().__init__(_Discard(), protocol)
        self._table = table

    def reducer_override(self, obj):
        if not isinstance(obj, Tensor):
            return NotImplemented
        parameter = _parameter_class()
        if parameter is not None and isinstance(obj, parameter):
            return _discard, (obj.detach(),)  # the second pass saves the parameter's data the same way
        self._table.storage_for(obj)
        return _discard, ()


def _discard(*args):
    """The stand-in reduce function of the sizing pass (never called)."""


class _CheckpointPickler(pickle._Pickler):
    """Pickles plugflow objects as their torch counterparts. The pure-Python pickler, because the
    C one refuses to write a reference to a module it cannot import (torch)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def __init__(self, file, protocol, table, legacy):
        super().__init__(file, protocol)
        self._table = table
        self._legacy = legacy

    def persistent_id(self, obj):
        if type(obj) is _Storage:
            return obj.persistent_id(self._legacy)
        return None

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            parameter = _parameter_class()
            if parameter is not None and isinstance(obj, parameter):
                return (_TorchName.get("torch._utils", "_rebuild_parameter"),
                        (obj.detach(), obj.requires_grad, collections.OrderedDict()))
            if obj.grad_fn is not None:  # as torch.save: the values, as a leaf
                obj = obj.detach().requires_grad_(obj.requires_grad)
            storage = self._table.storage_for(obj)
            offset = obj.storage_offset() if obj.numel() else 0
            return (_TorchName.get("torch._utils", "_rebuild_tensor_v2"),
                    (storage, offset, tuple(obj.shape), obj.stride(), obj.requires_grad, collections.OrderedDict()))
        if isinstance(obj, _C.device):
            return _TorchName.get("torch", "device"), (str(obj),)
        if isinstance(obj, Size):
            return _TorchName.get("torch", "Size"), (tuple(obj),)
        return NotImplemented

    def _save_torch_name(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("ascii"))
        self.memoize(obj)

    def _save_dtype(self, obj):
        self._save_torch_name(_TorchName.get("torch", _dtype_name(obj)))

    dispatch[_TorchName] = _save_torch_name
    dispatch[_C.dtype] = _save_dtype


class _Discard:
    """The sink of the sizing pass."""

    def write(self, data):
        return len(data)


def _pickle(obj, file, protocol, legacy):
    """Pickles obj into file and returns its storage records, by key order."""
    table = _StorageTable()
    _SizingPickler(table, protocol).dump(obj)
    table.finish()
    _CheckpointPickler(file, protocol, table, legacy).dump(obj)
    return sorted(table.storages.values(), key=lambda s: int(s.key))


def _record_info(zf, name, nbytes):
    """A stored (uncompressed) zip entry whose data starts on an _ALIGNMENT boundary: the local
    header gets an extra field of padding, as torch's writer does."""
    info = zipfile.ZipInfo(name)  # the default date (1980-01-01): the same object gives the same bytes
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = nbytes
    zip64_extra = 20 if nbytes * 1.05 > zipfile.ZIP64_LIMIT else 0  # zipfile's own rule
    header = 30 + len(name.encode("utf-8")) + 4 + zip64_extra
    padding = -(zf.fp.tell() + header) % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
    return info


def _write_record(zf, name, payload):
    payload = memoryview(payload).cast("B")
    with zf.open(_record_info(zf, f"{_ARCHIVE}/{name}", payload.nbytes), "w") as record:
        record.write(payload)


def _write_zip(obj, f, protocol):
    data = io.BytesIO()
    storages = _pickle(obj, data, protocol, legacy=False)
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        _write_record(zf, "data.pkl", data.getbuffer())
        for s in storages:
            _write_record(zf, f"data/{s.key}", s.numpy())  # one storage's host copy at a time
        _write_record(zf, "version", _FORMAT_VERSION)


def _write_legacy(obj, f, protocol):
    for header in (_LEGACY_MAGIC, _LEGACY_PROTOCOL,
                   {"protocol_version": _LEGACY_PROTOCOL, "little_endian": sys.byteorder == "little",
                    "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(header, f, protocol=protocol)
    storages = _pickle(obj, f, protocol, legacy=True)
    by_key = sorted(storages, key=lambda s: s.key)  # torch writes them in string order of the keys
    pickle.dump([s.key for s in by_key], f, protocol=protocol)
    for s in by_key:
        f.write(struct.pack("<q", s.numel))
        f.write(memoryview(s.numpy()).cast("B"))


# A temporary file of a save untouched this long is stale even where its writer's lock cannot be
# checked (a file system without locks).
_STALE_TEMPORARY_SECONDS = 3600


def _temporary_name_pattern(name):
    """Matches the temporary files that saves to `name` write (`.<name>.<12 hex digits>.tmp`)."""
    return re.compile(re.escape(f".{name}.") + r"[0-9a-f]{12}\.tmp")


def _create_locked_temporary(folder, name):
    """Creates the temporary file of a save to folder/name and locks it for as long as it is open:
    the lock is what tells later saves that its writer is alive (the system drops it when a
    process dies, even by SIGKILL)."""
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)  # the umask applies
        try:
            with contextlib.suppress(OSError):  # a file system without locks: the age rule alone applies
                fcntl.flock(fd, fcntl.LOCK_EX)
            # Another save may have taken the file for stale between its creation and the lock.
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return tmp, fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)


def _remove_stale_temporaries(folder, name):
    """Removes what earlier saves to folder/name left behind when they were killed mid-write:
    temporary files whose lock no process holds. A live writer's file is never touched (it holds
    its lock); where the file system has no locks, only files untouched for an hour go."""
    pattern = _temporary_name_pattern(name)
    try:
        entries = [e for e in os.scandir(folder) if pattern.fullmatch(e.name) and not e.is_symlink()]
    except OSError:
        return
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            except OSError:
                if time.time() - os.fstat(fd).st_mtime < _STALE_TEMPORARY_SECONDS:
                    continue
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
        finally:
            os.close(fd)


def _atomic_write(path, write):
    """Writes a file through a temporary file in the same folder, synced and then renamed over
    the target, so a crash or an error mid-write leaves any previous file intact. The temporary
    file is removed on any error or interrupt; one left by a killed process goes at the next save
    to the same path."""
    path = os.path.realpath(path)  # through a symlink: replace its target, keep the link
    folder, name = os.path.split(path)
    _remove_stale_temporaries(folder, name)
    tmp, fd = _create_locked_temporary(folder, name)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            write(f)
            f.flush()
            os.fsync(fd)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))  # an overwritten file keeps its mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)  # only now: the lock must hold until the rename
    # Sync the folder too, so the rename itself survives a power loss.
    with contextlib.suppress(OSError):
        folder_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(folder_fd)
        finally:
            os.close(folder_fd)


class _Flushable:
    """A write-only file object with the flush() zipfile calls."""

    def __init__(self, f):
        self.write = f.write

    def flush(self):
        pass


def save(obj, f, pickle_module=None, pickle_protocol=DEFAULT_PROTOCOL, _use_new_zipfile_serialization=True):
    """Saves obj (a tensor, a state dict, nested dicts/lists/tuples of tensors and plain values)
    to f, a path or a writable binary file object, in PyTorch's checkpoint format.

    Writing to a path is atomic: the file is either the complete new checkpoint or, after a crash
    or an exception, whatever was there before; the temporary file a killed save leaves is removed
    by the next save to the same path. pickle_module is accepted for torch.save's
    signature; plugflow always uses its own pickler (it writes torch's names without torch)."""
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("plugflow.save supports only the standard pickle module")
    if not isinstance(pickle_protocol, int) or not 2 <= pickle_protocol <= pickle.HIGHEST_PROTOCOL:
        raise ValueError(f"pickle_protocol must be an int from 2 to {pickle.HIGHEST_PROTOCOL}, "
                         f"got {pickle_protocol!r}")
    writer = _write_zip if _use_new_zipfile_serialization else _write_legacy

    def write(stream):
        writer(obj, stream, pickle_protocol)

    if isinstance(f, (str, bytes, os.PathLike)):
        _atomic_write(os.fsdecode(f), write)
    elif callable(getattr(f, "write", None)):
        if callable(getattr(f, "flush", None)):
            write(f)
            f.flush()
        else:
            write(_Flushable(f))
    else:
        raise TypeError(f"plugflow.save: f must be a path or a writable binary file object, got {type(f).__name__}")


# ==== load ========================================================================================

class _CheckpointError(RuntimeError):
    """A load failure plugflow diagnosed; load() puts the file's name in front of the message."""


class _ForbiddenGlobal(pickle.UnpicklingError, RuntimeError):
    """A name outside the allow-list: the file is malicious, not a plain checkpoint, or corrupt
    (garbage can decode as a global), hence both an UnpicklingError and a RuntimeError."""


# The most bytes a tensor may span: its byte size must fit an int64, as every size in the core.
_MAX_TENSOR_BYTES = 2**63 - 1


class _StorageClass:
    """What torch.FloatStorage & co. resolve to on load: the storage's dtype."""

    def __init__(self, dtype_name):
        self.dtype = dtype_name

    def __repr__(self):
        return f"torch.{_STORAGE_CLASS[self.dtype]}"


class _LoadedStorage:
    """A storage read from a checkpoint: a flat tensor that the saved tensors are views of."""

    def __init__(self, dtype, tensor, record):
        self.dtype = dtype
        self.tensor = tensor
        self.record = record  # where its bytes are in the file, for error messages

    def size(self):
        return self.tensor.numel()

    __len__ = size

    def __repr__(self):
        return f"{_STORAGE_CLASS[self.dtype]}(size={self.size()}, device={self.tensor.device})"


def _int_tuple(value, what, storage):
    if not isinstance(value, (tuple, list)) or not all(type(v) is int for v in value):
        raise _CheckpointError(f"corrupt checkpoint: a tensor of {storage.record} has the {what} {value!r:.200}")
    return tuple(value)


def _rebuild_tensor(storage, storage_offset, size, stride):
    """A tensor viewing a loaded storage. The view is checked against the storage first (Python
    ints do not overflow), so a corrupt or hostile size/stride/offset can only raise."""
    if not isinstance(storage, _LoadedStorage):
        raise _CheckpointError(f"corrupt checkpoint: a tensor refers to {type(storage).__name__} instead of a storage")
    size, stride = _int_tuple(size, "size", storage), _int_tuple(stride, "stride", storage)
    geometry = f"size {size}, stride {stride} and offset {storage_offset!r}"
    if (type(storage_offset) is not int or storage_offset < 0 or len(size) != len(stride)
            or any(s < 0 for s in size + stride)):
        raise _CheckpointError(f"corrupt checkpoint: a tensor of {storage.record} has the invalid {geometry}")
    if math.prod(size) * storage.tensor.element_size() > _MAX_TENSOR_BYTES:
        raise _CheckpointError(f"corrupt checkpoint: a tensor of {storage.record} with {geometry} has "
                               f"{math.prod(size)} elements, more than any tensor can hold")
    if all(size) and storage_offset + 1 + sum((n - 1) * s for n, s in zip(size, stride)) > storage.size():
        raise _CheckpointError(f"corrupt checkpoint: a tensor with {geometry} does not fit {storage.record} "
                               f"of {storage.size()} elements")
    if not all(size):  # no elements: any offset is valid, as in PyTorch
        storage_offset = min(storage_offset, storage.size())
    return _C.as_strided(storage.tensor, size, stride, storage_offset)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    t = _rebuild_tensor(storage, storage_offset, size, stride)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    """torch.nn.Parameter: a plugflow.nn.Parameter when that exists, else a plain tensor that
    requires grad as the parameter did."""
    if not isinstance(data, Tensor):
        raise _CheckpointError(f"corrupt checkpoint: a parameter holds {type(data).__name__}")
    parameter = _parameter_class()
    if parameter is not None:
        return parameter(data, requires_grad)
    return data.detach().requires_grad_(bool(requires_grad))


def _numpy_globals():
    """numpy arrays and scalars, which checkpoints often hold (metrics, RNG states)."""
    import numpy as np

    try:
        from numpy._core import multiarray  # numpy 2
    except ImportError:
        from numpy.core import multiarray

    names = {}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1.x, 2.x
        names[(module, "_reconstruct")] = multiarray._reconstruct
        names[(module, "scalar")] = multiarray.scalar
    names[("numpy", "ndarray")] = np.ndarray
    names[("numpy", "dtype")] = np.dtype
    return names


def _allowed_globals():
    allowed = {("collections", "OrderedDict"): collections.OrderedDict,
               ("_codecs", "encode"): codecs.encode,  # how protocol 2 writes bytes
               ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
               ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
               ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
               ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
               ("plugflow._tensor", "_rebuild_tensor"): _tensor._rebuild_tensor}
    for name in ("set", "frozenset", "slice", "complex"):
        allowed[("builtins", name)] = allowed[("__builtin__", name)] = getattr(builtins, name)
    for module in ("torch", "plugflow"):
        for name in _DTYPE_NAMES:
            allowed[(module, name)] = getattr(_C, name)
        for alias, name in _DTYPE_ALIASES.items():
            allowed[(module, alias)] = getattr(_C, name)
        allowed[(module, "device")] = _C.device
        allowed[(module, "Size")] = Size
    for name, storage_class in _STORAGE_CLASS.items():
        allowed[("torch", storage_class)] = _StorageClass(name)
    allowed.update(_numpy_globals())
    return allowed


_ALLOWED_GLOBALS = None  # built on the first load


def _may_set_state(obj, state):
    """Whether the BUILD opcode may set obj's state: numpy arrays and dtypes (their __setstate__
    checks it), and the attributes of OrderedDicts (a state dict's _metadata) and tensors. Not the
    allow-listed functions and classes themselves, which a hostile file could otherwise alter for
    every later load."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, (np.ndarray, np.dtype)):
        return True
    return isinstance(obj, (collections.OrderedDict, Tensor)) and isinstance(state, dict)


class _BoundedReader:
    """The `length` bytes of a binary stream that a pickle may read. A read past them fails before
    anything is allocated for it: a pickle's few bytes can claim terabytes (BINBYTES8, FRAME)."""

    def __init__(self, stream, length):
        self._stream = stream
        self._left = length

    def read(self, n):
        if n > self._left:
            raise pickle.UnpicklingError(f"pickle data was truncated: {n} bytes wanted, {self._left} left")
        data = self._stream.read(n)
        self._left -= len(data)
        return data

    def readline(self):
        line = self._stream.readline(self._left)
        self._left -= len(line)
        return line


class _RestrictedUnpickler(pickle._Unpickler):
    """Resolves only allow-listed globals and sets state only where _may_set_state allows. The
    pure-Python unpickler, whose opcodes can be checked; checkpoints' pickles are small (the
    tensor data lives outside them). It reads at most `length` bytes of `file`."""

    class _Opcodes(dict):
        def __missing__(self, code):  # the C unpickler's message, not a KeyError
            raise pickle.UnpicklingError(f"invalid load key, {bytes([code])!r}.")

    dispatch = _Opcodes(pickle._Unpickler.dispatch)

    def __init__(self, file, length, persistent_load, encoding):
        super().__init__(_BoundedReader(file, length), encoding=encoding)
        self._persistent_load = persistent_load

    def _load_bytearray8(self):
        # pickle's own allocates the claimed length before reading; reading first bounds it.
        (length,) = struct.unpack("<Q", self.read(8))
        self.append(bytearray(self.read(length)))

    dispatch[pickle.BYTEARRAY8[0]] = _load_bytearray8

    def _load_build(self):
        state, obj = self.stack[-1], self.stack[-2]
        if not _may_set_state(obj, state):
            raise _ForbiddenGlobal(f"setting the state of {obj!r:.60} (a {type(obj).__name__}) is not allowed: "
                                   "the file may be corrupt or malicious")
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = _load_build

    def persistent_load(self, pid):
        if self._persistent_load is None:
            raise _CheckpointError("corrupt checkpoint: unexpected persistent id in a checkpoint header")
        return self._persistent_load(pid)

    def find_class(self, module, name):
        global _ALLOWED_GLOBALS
        if _ALLOWED_GLOBALS is None:
            _ALLOWED_GLOBALS = _allowed_globals()
        obj = _ALLOWED_GLOBALS.get((module, name))
        if obj is None:
            raise _ForbiddenGlobal(
                f"the global '{module}.{name}' is not allowed: checkpoints may only hold tensors, "
                "storages, dtypes, devices, sizes, numpy arrays and plain containers (anything else could run "
                "code while loading; the file may be corrupt or malicious)")
        return obj


def _text(value):
    return value.decode("ascii") if isinstance(value, bytes) else value  # Python 2 pickles


def _restore_location(flat, location, map_location):
    """Moves a storage's flat CPU tensor where it belongs, following torch.load's map_location."""
    if callable(map_location) and not isinstance(map_location, _C.device):
        moved = map_location(flat, location)
        if moved is not None:
            if not isinstance(moved, Tensor):
                raise _CheckpointError(f"map_location returned {type(moved).__name__}; expected the storage "
                                       "(a flat tensor) or None")
            return moved
    elif isinstance(map_location, dict):
        location = map_location.get(location, location)
    elif map_location is not None:
        location = map_location
    device = location if isinstance(location, _C.device) else _C.device(location)
    if device.type == "cuda":
        from . import cuda

        if not cuda.is_available():
            raise _CheckpointError("Attempting to deserialize object on a CUDA device but "
                                   "plugflow.cuda.is_available() is False. If you are running on a CPU-only "
                                   "machine, please use plugflow.load with map_location=plugflow.device('cpu') "
                                   "to map your storages to the CPU.")
    return flat if device.type == "cpu" else flat.to(device)


class _StorageReader:
    """Turns a checkpoint's storage persistent ids into loaded storages, reading each record once."""

    def __init__(self, map_location, read_record, record_name, legacy, swap_bytes):
        self._map_location = map_location
        self._read_record = read_record  # (key, nbytes) -> a numpy uint8 buffer of nbytes (filled or not)
        self._record_name = record_name  # key -> how error messages name its bytes
        self._legacy = legacy
        self._swap_bytes = swap_bytes
        self.storages = {}  # key -> (_LoadedStorage, buffer or None)

    def __call__(self, pid):
        if not isinstance(pid, tuple) or not pid or _text(pid[0]) != "storage":
            raise _CheckpointError(f"unsupported persistent id {pid!r:.80} in the checkpoint")
        if len(pid) != (6 if self._legacy else 5):
            raise _CheckpointError(f"corrupt checkpoint: malformed storage id {pid!r:.80}")
        storage_class, key, location, numel = (_text(v) for v in pid[1:5])
        if self._legacy and pid[5] is not None:
            raise _CheckpointError("storage views in the legacy format are not supported")
        if (not isinstance(storage_class, _StorageClass) or type(key) is not str or type(numel) is not int
                or numel < 0):
            raise _CheckpointError(f"corrupt checkpoint: malformed storage id {pid!r:.80}")
        loaded = self.storages.get(key)
        if loaded is None:
            loaded = self.storages[key] = self._load(storage_class.dtype, key, location, numel)
        elif loaded[0].dtype != storage_class.dtype:
            raise _CheckpointError(f"{self._record_name(key)} is viewed as both {loaded[0].dtype} and "
                                   f"{storage_class.dtype}, which plugflow does not support")
        return loaded[0]

    def _load(self, dtype, key, location, numel):
        """The storage and, in the legacy format, the buffer its bytes are read into later."""
        import numpy as np

        numpy_dtype = _NUMPY_DTYPE[dtype]
        array = self._read_record(key, numel * np.dtype(numpy_dtype).itemsize).view(numpy_dtype)
        if self._swap_bytes and not self._legacy:
            array.byteswap(inplace=True)
        flat = _restore_location(_host_tensor(dtype, array), location, self._map_location)
        return _LoadedStorage(dtype, flat, self._record_name(key)), (array if self._legacy else None)


def _host_tensor(dtype, array):
    """A flat CPU tensor of the storage's values; it shares the array's memory unless bfloat16."""
    if dtype == "bfloat16":
        import numpy as np

        return _C.from_numpy((array.astype(np.uint32) << 16).view(np.float32)).to(_C.bfloat16)
    return _C.from_numpy(array)


def _readinto(stream, buffer, what):
    view = memoryview(buffer).cast("B")
    done = 0
    while done < view.nbytes:
        n = stream.readinto(view[done:])
        if not n:
            raise _CheckpointError(f"the file is truncated: {what} has {done} of its {view.nbytes} bytes")
        done += n


# Deflate cannot expand data more than 1032-fold (a 258-byte match in about 2 bits): a zip record
# that claims more than that from its compressed bytes is lying.
_MAX_DEFLATE_RATIO = 1032


class _ZipRecords:
    """The records of a checkpoint archive, opened only after checking that what each claims is
    possible: a supported compression, compressed bytes inside the file and not shared with
    another record read (overlapping records would multiply a small file), and no more inflated
    bytes than those compressed bytes can hold. With the callers' exact sizes, nothing reads more
    than the sizes the pickle declares, and at most 1032 times the file's size in all."""

    def __init__(self, zf, file_end):
        self._zf = zf
        self._file_end = file_end
        self._compressed_left = file_end
        self.infos = {info.filename: info for info in zf.infolist()}

    def info(self, name):
        info = self.infos.get(name)
        if info is None:
            raise _CheckpointError(f"corrupt checkpoint: record '{name}' is missing")
        return info

    def open(self, info):
        name = info.filename
        if info.flag_bits & 0x1:
            raise _CheckpointError(f"record '{name}' is encrypted; checkpoints are not")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _CheckpointError(f"record '{name}' uses zip compression method {info.compress_type}; checkpoints' "
                                   "records are stored or deflated")
        ratio = 1 if info.compress_type == zipfile.ZIP_STORED else _MAX_DEFLATE_RATIO
        if (info.header_offset + info.compress_size > self._file_end or info.compress_size > self._compressed_left
                or info.file_size > ratio * info.compress_size):
            raise _CheckpointError(f"corrupt or malicious checkpoint: record '{name}' claims {info.file_size} bytes "
                                   f"from {info.compress_size} compressed bytes at offset {info.header_offset}, which "
                                   "the file cannot hold")
        self._compressed_left -= info.compress_size
        return self._zf.open(info)

    def read_small(self, name, limit):
        info = self.info(name)
        if info.file_size > limit:
            raise _CheckpointError(f"corrupt checkpoint: record '{name}' holds {info.file_size} bytes, "
                                   f"more than the {limit} it may")
        with self.open(info) as record:
            return record.read(limit)


def _load_zip(zf, file_end, map_location, encoding):
    import numpy as np

    records = _ZipRecords(zf, file_end)
    pickles = [n for n in records.infos if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        if any(n.endswith("/constants.pkl") for n in records.infos):
            raise _CheckpointError("this is a TorchScript archive (torch.jit.save), not a checkpoint")
        raise _CheckpointError("not a checkpoint: the archive has no data.pkl record")
    prefix = pickles[0][:-len("data.pkl")]
    byteorder = "little"
    if prefix + "byteorder" in records.infos:
        byteorder = records.read_small(prefix + "byteorder", 16).decode("ascii", "replace")
    if byteorder not in ("little", "big"):
        raise _CheckpointError(f"corrupt checkpoint: unknown byte order {byteorder!r}")

    def record_name(key):
        return f"record '{prefix}data/{key}'"

    def read_record(key, nbytes):
        info = records.info(f"{prefix}data/{key}")
        if info.file_size != nbytes:
            raise _CheckpointError(f"corrupt checkpoint: {record_name(key)} holds {info.file_size} bytes, its storage "
                                   f"needs {nbytes}")
        with records.open(info) as record:
            buffer = np.empty(nbytes, np.uint8)
            _readinto(record, buffer, record_name(key))
            record.read(1)  # reaching the end checks the CRC
        return buffer

    reader = _StorageReader(map_location, read_record, record_name, legacy=False,
                            swap_bytes=byteorder != sys.byteorder)
    # The pickle is unpickled as it inflates: a record of garbage fails at its first bytes.
    pickle_info = records.info(prefix + "data.pkl")
    with records.open(pickle_info) as record:
        stream = io.BufferedReader(record)
        result = _RestrictedUnpickler(stream, pickle_info.file_size, reader, encoding).load()
        if stream.read(1):
            raise _CheckpointError(f"corrupt checkpoint: record '{prefix}data.pkl' goes on after its pickle")
    return result


def _load_legacy(f, file_end, map_location, encoding):
    import numpy as np

    def header():
        return _RestrictedUnpickler(f, file_end - f.tell(), None, encoding).load()

    try:
        magic = header()
    except _ForbiddenGlobal:  # a plain pickle of something else (say, os.system)
        raise
    except Exception:
        magic = None
    if magic != _LEGACY_MAGIC:
        raise _CheckpointError("invalid magic number; not a checkpoint, or a corrupt file")
    protocol = header()
    if protocol != _LEGACY_PROTOCOL:
        raise _CheckpointError(f"invalid protocol version: {protocol!r:.80}")
    sys_info = header()
    little_endian = sys_info.get("little_endian", True) if isinstance(sys_info, dict) else True
    claimed = 0  # bytes of the storages met so far, which all follow the pickle in the file

    def record_name(key):
        return f"storage '{key}'"

    def read_record(key, nbytes):
        nonlocal claimed
        claimed += 8 + nbytes  # its element count, then its bytes
        if claimed > file_end - f.tell():
            raise _CheckpointError(f"the file is truncated: {record_name(key)} needs {nbytes} bytes")
        return np.empty(nbytes, np.uint8)  # filled after the object, below

    swap_bytes = little_endian != (sys.byteorder == "little")
    reader = _StorageReader(map_location, read_record, record_name, legacy=True, swap_bytes=swap_bytes)
    result = _RestrictedUnpickler(f, file_end - f.tell(), reader, encoding).load()
    keys = header()
    if not isinstance(keys, list):
        raise _CheckpointError("corrupt checkpoint: malformed storage list")
    for key in keys:
        key = _text(key)
        if key not in reader.storages:
            raise _CheckpointError(f"corrupt checkpoint: unknown {record_name(key)!r:.80}")
        storage, array = reader.storages[key]
        count = f.read(8)
        if len(count) != 8 or struct.unpack("<q", count)[0] != array.size:
            raise _CheckpointError(f"corrupt or truncated checkpoint at {record_name(key)}")
        _readinto(f, array, record_name(key))
        if swap_bytes:
            array.byteswap(inplace=True)
        if array.size and storage.tensor.data_ptr() != array.ctypes.data:
            # The storage was placed (moved to a device, converted from bfloat16 bits) before its
            # bytes were read: copy them over now.
            storage.tensor.copy_(_host_tensor(storage.dtype, array))
    return result


def _load_file(f, map_location, encoding):
    """Loads from a seekable binary file, from its current position."""
    start = f.tell()
    f.seek(0, io.SEEK_END)
    file_end = f.tell()
    f.seek(start)
    if file_end == start:
        raise _CheckpointError("the file is empty (0 bytes)")
    is_zip = f.read(4) == b"PK\x03\x04"
    f.seek(start)
    if is_zip:
        with zipfile.ZipFile(f) as zf:
            return _load_zip(zf, file_end, map_location, encoding)
    return _load_legacy(f, file_end, map_location, encoding)


def _check_map_location(map_location):
    if map_location is None or callable(map_location) or isinstance(map_location, (str, _C.device)):
        return
    if isinstance(map_location, dict):
        if all(isinstance(k, str) and isinstance(v, (str, _C.device)) for k, v in map_location.items()):
            return
        raise TypeError("map_location as a dict must map location strings to location strings or devices")
    raise TypeError(f"map_location should be None, a string, a plugflow.device, a dict or a callable, "
                    f"got {type(map_location).__name__}")


def load(f, map_location=None, pickle_module=None, *, weights_only=False, encoding="utf-8", **pickle_load_args):
    """Loads an object saved by plugflow.save or torch.save from f, a path or a readable binary
    file object. Tensors come back as plugflow tensors, torch.nn.Parameter as plugflow.nn.Parameter
    when it exists (else as a tensor that requires grad), views still share memory.

    map_location: None (each storage where it was saved), a device or string ("cpu"), a dict
    mapping saved locations to new ones ({"cuda:0": "cpu"}), or a callable(storage, location)
    returning the storage (a flat plugflow tensor) moved, or None for the default.

    Loading never executes code from the file: only an allow-list of globals resolves
    (see the module docstring), anything else raises pickle.UnpicklingError. This is PyTorch's
    weights_only=True; weights_only=False is accepted and behaves the same. Every error names
    the file (a path as given, an open file by its name, else "<file-like object>")."""
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("plugflow.load supports only the standard pickle module")
    if pickle_load_args:
        raise TypeError(f"load() got an unexpected keyword argument '{next(iter(pickle_load_args))}'")
    _check_map_location(map_location)
    with contextlib.ExitStack() as stack:
        if isinstance(f, (str, bytes, os.PathLike)):
            name = repr(os.fsdecode(f))
            f = stack.enter_context(open(f, "rb"))
        elif callable(getattr(f, "read", None)):
            name = getattr(f, "name", None)
            name = repr(os.fsdecode(name)) if isinstance(name, (str, bytes)) else "<file-like object>"
            if not (callable(getattr(f, "seekable", None)) and f.seekable()):
                f = io.BytesIO(f.read())  # zip archives need seeking
        else:
            raise TypeError(f"plugflow.load: f must be a path or a readable binary file object, got {type(f).__name__}")
        try:
            return _load_file(f, map_location, encoding)
        except _ForbiddenGlobal as e:
            raise _ForbiddenGlobal(f"plugflow.load: {name}: {e}") from None
        except _CheckpointError as e:
            raise RuntimeError(f"plugflow.load: {name}: {e}") from None
        except MemoryError as e:
            raise MemoryError(f"plugflow.load: {name}: out of memory while loading: {e}") from e
        except Exception as e:
            raise RuntimeError(f"plugflow.load: {name} is not a valid checkpoint (truncated or corrupt): "
                               f"{type(e).__name__}: {e}") from e
