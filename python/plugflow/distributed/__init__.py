"""plugflow.distributed: PyTorch's torch.distributed process-group API on plugflow's
communicator plugins (gloo for CPU tensors, nccl for CUDA tensors).

    import plugflow.distributed as dist
    dist.init_process_group("gloo")          # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    dist.all_reduce(t, op=dist.ReduceOp.SUM)

Collectives run in call order on the group's communicator thread. Each returns when it is
complete, or at once with ``async_op=True``, handing back a ``Work`` whose ``wait()`` blocks until
it is (and raises its error). A collective raises ``TimeoutError`` when a peer does not take
part within the group's timeout; after such a failure the group is unusable: destroy it and
create a new one. ``python -m plugflow.distributed.run`` starts a job's processes (torchrun).

A job is its world size and run id (``PLUGFLOW_RUN_ID``, else torchrun's
``TORCHELASTIC_RUN_ID``): the rendezvous refuses processes of another job.
``PLUGFLOW_DISTRIBUTED_DEBUG=1`` (or INFO/DETAIL, as TORCH_DISTRIBUTED_DEBUG) makes every
collective first check that all ranks called it alike, and name the ranks that did not.
"""

import datetime
import os
import pickle
import socket
import urllib.parse

from .. import _C
from .._C import PluginError, Tensor, device
from .._creation import empty, tensor as _tensor

__all__ = [
    "Backend", "GradBucket", "GroupMember", "ProcessGroup", "ReduceOp", "Work", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_reduce", "all_to_all", "all_to_all_single", "barrier", "broadcast",
    "broadcast_object_list", "default_pg_timeout", "destroy_process_group", "get_backend", "get_rank",
    "gather", "get_world_size", "group", "init_process_group", "is_available", "is_gloo_available", "is_initialized",
    "is_nccl_available", "new_group", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "send",
]

ReduceOp = _C._ReduceOp  # SUM, AVG, PRODUCT, MIN, MAX

default_pg_timeout = datetime.timedelta(minutes=30)

_NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to call "
                    "init_process_group.")


class Backend(str):
    """A backend name, lower-cased: ``Backend("GLOO") == Backend.GLOO == "gloo"``."""

    GLOO = "gloo"
    NCCL = "nccl"

    def __new__(cls, name):
        if not isinstance(name, str):
            raise ValueError(f"Backend name must be a string, but got: {name!r}")
        return super().__new__(cls, name.lower())


class ProcessGroup:
    """A group of ranks sharing a communicator. Made by init_process_group and new_group.
    `ranks` are its members' ranks in the default group (the group's rank i is ranks[i])."""

    def __init__(self, comm, debug=False, ranks=None):
        self._comm = comm
        self._ranks = list(range(comm.world_size)) if ranks is None else ranks
        # PLUGFLOW_DISTRIBUTED_DEBUG: collectives exchange their calls first (_check_same_call),
        # through tensors on the device the backend takes.
        self._debug = debug
        self._debug_device = device("cpu") if comm.backend == Backend.GLOO else device("cuda", 0)

    def rank(self):
        return self._comm.rank

    def size(self):
        return self._comm.world_size

    def name(self):
        return self._comm.backend

    def _group_rank(self, global_rank, fn, arg):
        """The rank in this group of the default group's rank `global_rank` (collectives take
        default-group ranks for src and dst, as in PyTorch)."""
        if self is _default_pg:
            return global_rank
        if global_rank not in self._ranks:
            raise ValueError(f"{fn}: {arg} {global_rank} is not a member of this group (ranks {self._ranks})")
        return self._ranks.index(global_rank)

    def __repr__(self):
        return f"<plugflow.distributed.ProcessGroup backend={self.name()!r} rank={self.rank()} size={self.size()}>"


class GroupMember:
    """``GroupMember.WORLD`` (alias ``group.WORLD``) is the default group once initialized;
    ``GroupMember.NON_GROUP_MEMBER`` is what new_group returns to ranks outside the group (a
    collective on it does nothing and returns None, as in PyTorch)."""

    WORLD = None
    NON_GROUP_MEMBER = object()


group = GroupMember


class Work:
    """What a collective returns with ``async_op=True``: ``wait()`` blocks until the operation
    is complete and raises its error, if any; ``result()`` is the list of output tensors."""

    def __init__(self, handle, result):
        self._handle = handle
        self._result = result

    def wait(self, timeout=None):
        """Blocks until the operation is complete (TimeoutError after `timeout`, a
        datetime.timedelta, when given); raises the operation's error."""
        self._handle.wait(None if timeout is None else timeout.total_seconds())
        return True

    def is_completed(self):
        return self._handle.is_completed()

    def is_success(self):
        return self._handle.is_success()

    def exception(self):
        """The operation's error once it is complete and failed, else None."""
        if not self._handle.is_completed() or self._handle.is_success():
            return None
        try:
            self._handle.wait()
        except Exception as e:  # noqa: BLE001 (the error is the value asked for)
            return e
        return None

    def result(self):
        return self._result

    def get_future(self):
        """A plugflow.futures.Future whose value is result() once the operation is complete."""
        from ..futures import Future
        return Future._of_work(self._handle, self._result)

    def __repr__(self):
        state = "completed" if self.is_completed() else "pending"
        return f"<plugflow.distributed.Work ({state})>"


class GradBucket:
    """One DistributedDataParallel gradient bucket, as a communication hook sees it (PyTorch's
    dist.GradBucket): buffer() is the flat tensor of the bucket's gradients, gradients() its
    views per parameter, parameters() the parameters they belong to, in the same order."""

    def __init__(self, index, buffer, gradients, parameters, is_last):
        self._index = index
        self._buffer = buffer
        self._gradients = gradients
        self._parameters = parameters
        self._is_last = is_last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def set_buffer(self, buffer):
        """Replaces the bucket's values with `buffer`'s (a tensor of the same size)."""
        self._buffer.copy_(buffer)

    def gradients(self):
        return list(self._gradients)

    def parameters(self):
        return list(self._parameters)

    def is_last(self):
        """True for the bucket whose hook runs last in the step (the first parameters)."""
        return self._is_last


_default_pg = None


# ---- availability and state ---------------------------------------------------------------

def _backend_available(name):
    if name in _C._communicator_backends():
        return True
    # Not loaded by the config: the plugin of that name may still be on the plugin path.
    try:
        _C.load_plugin(name)
    except PluginError:
        return False
    return name in _C._communicator_backends()


def is_available():
    """True when at least one communicator backend can be used."""
    return bool(_C._communicator_backends()) or is_gloo_available() or is_nccl_available()


def is_gloo_available():
    return _backend_available(Backend.GLOO)


def is_nccl_available():
    return _backend_available(Backend.NCCL)


def is_initialized():
    return _default_pg is not None


def _get_default_group():
    if _default_pg is None:
        raise RuntimeError(_NOT_INITIALIZED)
    return _default_pg


def _resolve_group(grp):
    """The ProcessGroup `grp` names (None: the default one); None for NON_GROUP_MEMBER."""
    pg = _get_default_group()
    if grp is None or grp is pg:
        return pg
    if grp is GroupMember.NON_GROUP_MEMBER:
        return None
    if isinstance(grp, ProcessGroup):
        return grp
    raise ValueError(f"group must be a ProcessGroup of plugflow.distributed (the default one or one from new_group); "
                     f"got {grp!r}")


def get_rank(group=None):
    """This process's rank in `group`; -1 when it is not a member."""
    pg = _resolve_group(group)
    return -1 if pg is None else pg.rank()


def get_world_size(group=None):
    """The size of `group`; -1 when this process is not a member."""
    pg = _resolve_group(group)
    return -1 if pg is None else pg.size()


def get_backend(group=None):
    return Backend(_resolve_group(group).name())


# ---- init ---------------------------------------------------------------------------------

def _collectives_config():
    """The config's `collectives` section: {"cpu": ..., "cuda": ..., "timeout_s": ...}."""
    try:
        section = _C.current_config().get("collectives")
    except AttributeError:
        section = None
    return section if isinstance(section, dict) else {}


def _env_int(name, method):
    value = os.environ.get(name)
    if value is None:
        raise ValueError(f"Error initializing plugflow.distributed using {method} rendezvous: environment variable "
                         f"{name} expected, but not set")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"Error initializing plugflow.distributed using {method} rendezvous: environment variable "
                         f"{name} must be an integer, got {value!r}") from None


def _query_int(query, key, given, method):
    """rank / world_size: the argument when given (>= 0), else the URL's query parameter."""
    if given is not None and given >= 0:
        return given
    if key in query:
        try:
            return int(query[key][-1])
        except ValueError:
            raise ValueError(f"{method} init_method: {key} must be an integer, got {query[key][-1]!r}") from None
    raise ValueError(f"Error initializing plugflow.distributed using {method} rendezvous: {key} parameter missing "
                     f"(pass {key}= to init_process_group or ?{key}= in the URL)")


def _run_id():
    """The launch's run id: PLUGFLOW_RUN_ID, else TORCHELASTIC_RUN_ID (torchrun's --rdzv-id);
    empty when neither is set."""
    return os.environ.get("PLUGFLOW_RUN_ID") or os.environ.get("TORCHELASTIC_RUN_ID") or ""


_DEBUG_LEVELS = {"0": False, "OFF": False, "1": True, "INFO": True, "DETAIL": True}


def _debug_from_env():
    """PLUGFLOW_DISTRIBUTED_DEBUG: 0/OFF (or unset) turns the collective checks off, 1/INFO/DETAIL on."""
    value = os.environ.get("PLUGFLOW_DISTRIBUTED_DEBUG", "")
    if not value:
        return False
    try:
        return _DEBUG_LEVELS[value.strip().upper()]
    except KeyError:
        raise ValueError(f"PLUGFLOW_DISTRIBUTED_DEBUG must be one of 0, 1, OFF, INFO or DETAIL, "
                         f"got {value!r}") from None


def _parse_init_method(init_method, rank, world_size):
    """(master_addr, master_port, store_path, rank, world_size) from an init_method URL."""
    url = urllib.parse.urlparse(init_method)
    query = urllib.parse.parse_qs(url.query)
    if url.scheme == "env":
        addr = os.environ.get("MASTER_ADDR")
        if not addr:
            raise ValueError("Error initializing plugflow.distributed using env:// rendezvous: environment variable "
                             "MASTER_ADDR expected, but not set")
        port = _env_int("MASTER_PORT", "env://")
        rank = rank if rank >= 0 else _env_int("RANK", "env://")
        world_size = world_size if world_size >= 0 else _env_int("WORLD_SIZE", "env://")
        return addr, port, "", rank, world_size
    if url.scheme == "tcp":
        try:
            port = url.port
        except ValueError:
            port = None
        if not url.hostname or port is None:
            raise ValueError(f"tcp:// init_method needs a host and a port, as tcp://10.1.1.20:23456; got "
                             f"{init_method!r}")
        return (url.hostname, port, "", _query_int(query, "rank", rank, "tcp://"),
                _query_int(query, "world_size", world_size, "tcp://"))
    if url.scheme == "file":
        path = urllib.parse.unquote(url.path)
        if not path:
            raise ValueError(f"file:// init_method needs a path, as file:///shared/rendezvous; got {init_method!r}")
        return ("127.0.0.1", 29500, path, _query_int(query, "rank", rank, "file://"),
                _query_int(query, "world_size", world_size, "file://"))
    raise ValueError(f"init_method {init_method!r} is not supported: use env://, tcp://host:port or "
                     f"file:///path (a directory shared by the ranks)")


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None):
    """Join the default process group. Blocks until all `world_size` ranks have joined, or
    raises TimeoutError after `timeout` (a datetime.timedelta; default: the config's
    collectives.timeout_s, 30 minutes unless changed).

    backend: "gloo" (CPU tensors) or "nccl" (CUDA tensors); default: the config's
    collectives.cpu. init_method: "env://" (default: MASTER_ADDR, MASTER_PORT, RANK,
    WORLD_SIZE; the rank and world_size arguments win over RANK and WORLD_SIZE),
    "tcp://host:port" or "file:///dir" (a directory the ranks share; created if missing).
    Rank 0 serves the TCP rendezvous on the master port until the group is destroyed; it
    admits only processes of this job (same world size and run id, see the module's doc)
    and one per rank.
    """
    global _default_pg
    if _default_pg is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    if store is not None:
        raise ValueError("plugflow.distributed does not take a Store object; give the rendezvous as init_method "
                         "('tcp://host:port' or 'file:///dir') or through MASTER_ADDR/MASTER_PORT")
    if pg_options is not None:
        raise ValueError("pg_options is not supported by plugflow.distributed")
    if not isinstance(world_size, int) or not isinstance(rank, int):
        raise TypeError(f"rank and world_size must be integers, got rank={rank!r}, world_size={world_size!r}")

    config = _collectives_config()
    if timeout is None:
        timeout_s = float(config.get("timeout_s", default_pg_timeout.total_seconds()))
    elif isinstance(timeout, datetime.timedelta):
        timeout_s = timeout.total_seconds()
    else:
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got {type(timeout).__name__}")
    if timeout_s <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")

    if backend is None:
        backend = config.get("cpu", Backend.GLOO)
    backend = Backend(backend)
    if ":" in backend or "," in backend:
        raise ValueError(f"device-specific backend strings like {backend!r} are not supported; pass one backend, "
                         f"'gloo' or 'nccl'")

    debug = _debug_from_env()
    if init_method is None:
        init_method = "env://"
    addr, port, store_path, rank, world_size = _parse_init_method(init_method, rank, world_size)
    comm = _C._Communicator(str(backend), addr, port, store_path, rank, world_size, timeout_s, _run_id())
    _default_pg = ProcessGroup(comm, debug)
    # What new_group needs: the timeout, and where the groups' leaders are reached from.
    _default_pg._timeout_s, _default_pg._master_addr, _default_pg._master_port = timeout_s, addr, port
    _default_pg._store_path = store_path
    GroupMember.WORLD = _default_pg


def destroy_process_group(group=None):
    """Leave `group` and release its communicator (and its leader's port); without a group,
    leave the default group and every group made by new_group."""
    global _default_pg
    pg = _resolve_group(group)
    if pg is None:
        return
    if pg is not _default_pg:
        pg._comm.close()
        _subgroups.remove(pg)
        return
    for sub in _subgroups:
        sub._comm.close()
    _subgroups.clear()
    pg._comm.close()
    _default_pg = None
    GroupMember.WORLD = None


_subgroups = []
_groups_made = 0  # new_group calls so far: the same count on every rank, part of a group's run id


def _address_towards(host, port):
    """This host's address on the route to host:port (what peers on other machines reach)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, port))  # UDP: picks the route, sends nothing
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def new_group(ranks=None, timeout=None, backend=None, pg_options=None):
    """A process group of the default group's `ranks` (default: all). Every rank of the default
    group must call it, in the same order as the other new_group calls; members get the group,
    the others GroupMember.NON_GROUP_MEMBER. The group's lowest rank serves its rendezvous on
    a free port of its own address, which the default group broadcasts (with a file:// default
    group: a subdirectory of its store); the group's run id is the job's plus the group's
    number, so its store admits only its members."""
    global _groups_made
    world = _get_default_group()
    if pg_options is not None:
        raise ValueError("pg_options is not supported by plugflow.distributed")
    members = list(range(world.size())) if ranks is None else sorted(set(int(r) for r in ranks))
    if not members or members[0] < 0 or members[-1] >= world.size():
        raise ValueError(f"new_group: ranks must be ranks of the default group (0 .. {world.size() - 1}), got {ranks!r}")
    if timeout is None:
        timeout_s = world._timeout_s
    elif isinstance(timeout, datetime.timedelta):
        timeout_s = timeout.total_seconds()
    else:
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got {type(timeout).__name__}")
    backend = Backend(backend or world.name())
    _groups_made += 1
    me = world.rank()
    leader = [None]
    if me == members[0]:
        leader = [(_address_towards(world._master_addr, world._master_port), _free_port())]
    broadcast_object_list(leader, src=members[0])
    if me not in members:
        return GroupMember.NON_GROUP_MEMBER
    addr, port = leader[0]
    # A file store's groups rendezvous in a directory of their own inside it.
    store_path = os.path.join(world._store_path, f"group{_groups_made}") if world._store_path else ""
    comm = _C._Communicator(str(backend), addr, port, store_path, members.index(me), len(members), timeout_s,
                            f"{_run_id()}/group{_groups_made}")
    pg = ProcessGroup(comm, world._debug, members)
    pg._timeout_s, pg._master_addr, pg._master_port, pg._store_path = timeout_s, addr, port, store_path
    _subgroups.append(pg)
    return pg


# ---- collectives --------------------------------------------------------------------------

def _check_tensor(t, fn, arg="tensor"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: {arg} must be a plugflow.Tensor, got {type(t).__name__}")


def _check_tensor_list(ts, fn, arg):
    if not isinstance(ts, (list, tuple)):
        raise TypeError(f"{fn}: {arg} must be a list of plugflow.Tensor, got {type(ts).__name__}")
    for i, t in enumerate(ts):
        _check_tensor(t, fn, f"{arg}[{i}]")


def _check_op(op, fn):
    if not isinstance(op, ReduceOp):
        raise TypeError(f"{fn}: op must be a plugflow.distributed.ReduceOp, got {op!r}")


def _done(handle, result=None):
    """A collective's return value: its Work when it ran asynchronously, else None."""
    return None if handle is None else Work(handle, [] if result is None else result)


# ---- PLUGFLOW_DISTRIBUTED_DEBUG -----------------------------------------------------------
# A call is described by int64s: operation, reduction, root, dtype, element count, number of
# dims, a hash of the whole shape (Python's hash of a tuple of ints is the same in every
# process), then the first dims for the message.

_DEBUG_OPS = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
              "reduce_scatter_tensor", "barrier")
_DEBUG_DTYPES = (_C.bool, _C.uint8, _C.int8, _C.int16, _C.int32, _C.int64, _C.float16, _C.bfloat16, _C.float32,
                 _C.float64)
_DEBUG_SHOWN_DIMS = 16
_REDUCE_OP_NAMES = {int(value): name for name, value in ReduceOp.__members__.items()}


def _describe_call(row):
    op, reduce_op, root, dtype, _numel, ndim, _shape_hash, *dims = row
    args = []
    if dtype >= 0:
        shown = [str(d) for d in dims[:min(ndim, _DEBUG_SHOWN_DIMS)]]
        if ndim > _DEBUG_SHOWN_DIMS:
            shown.append("...")
        args += [f"shape=[{', '.join(shown)}]", f"dtype={_DEBUG_DTYPES[dtype]}"]
    if reduce_op >= 0:
        args.append(f"op={_REDUCE_OP_NAMES[reduce_op]}")
    if root >= 0:
        args.append(f"src={root}")
    return f"{_DEBUG_OPS[op]}({', '.join(args)})"


def _check_same_call(pg, fn, t=None, op=None, src=None):
    """Every rank shares what it is about to run (`fn` on `t` with reduction `op`, root `src`)
    and all raise the same RuntimeError, naming the ranks and their calls, when they differ.
    The collective itself has not run then, so the group stays usable. Not while an nn.Graph
    captures build(): the exchange would be recorded into the graph, and its host-side compare
    cannot be."""
    if _C._graph_capturing():
        return
    shape = tuple(t.shape) if t is not None else ()
    dims = list(shape[:_DEBUG_SHOWN_DIMS]) + [0] * (_DEBUG_SHOWN_DIMS - min(len(shape), _DEBUG_SHOWN_DIMS))
    mine = [_DEBUG_OPS.index(fn), -1 if op is None else int(op), -1 if src is None else src,
            -1 if t is None else _DEBUG_DTYPES.index(t.dtype), 0 if t is None else t.numel(), len(shape),
            hash(shape), *dims]
    row = _tensor(mine, dtype=_C.int64, device=pg._debug_device)
    everyone = [empty(len(mine), dtype=_C.int64, device=pg._debug_device) for _ in range(pg.size())]
    pg._comm.all_gather(everyone, row)
    rows = [tuple(r.tolist()) for r in everyone]
    if all(r == rows[0] for r in rows):
        return
    ranks_by_call = {}
    for rank, r in enumerate(rows):
        ranks_by_call.setdefault(r, []).append(rank)
    calls = "; ".join(f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}: {_describe_call(r)}"
                      for r, ranks in ranks_by_call.items())
    raise RuntimeError(f"{fn}: detected mismatch between collectives on ranks (PLUGFLOW_DISTRIBUTED_DEBUG): {calls}. "
                       f"Nothing was exchanged; the group is still usable")


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over all ranks, in place on every rank."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(tensor, "all_reduce")
    _check_op(op, "all_reduce")
    if pg._debug:
        _check_same_call(pg, "all_reduce", tensor, op=op)
    return _done(pg._comm.all_reduce(tensor, op, async_op), [tensor])


def broadcast(tensor, src, group=None, async_op=False):
    """Copy rank `src`'s `tensor` into `tensor` on every rank."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(tensor, "broadcast")
    root = pg._group_rank(src, "broadcast", "src")
    if pg._debug:
        _check_same_call(pg, "broadcast", tensor, src=root)
    return _done(pg._comm.broadcast(tensor, root, async_op), [tensor])


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[i] receives rank i's `tensor` (one tensor of the same shape per rank)."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor_list(tensor_list, "all_gather", "tensor_list")
    _check_tensor(tensor, "all_gather")
    if pg._debug:
        _check_same_call(pg, "all_gather", tensor)
    return _done(pg._comm.all_gather(list(tensor_list), tensor, async_op), list(tensor_list))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """output_tensor (world_size times input_tensor's elements) receives every rank's input in
    rank order."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(output_tensor, "all_gather_into_tensor", "output_tensor")
    _check_tensor(input_tensor, "all_gather_into_tensor", "input_tensor")
    if pg._debug:
        _check_same_call(pg, "all_gather_into_tensor", input_tensor)
    return _done(pg._comm.all_gather_into_tensor(output_tensor, input_tensor, async_op), [output_tensor])


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """`output` receives the reduction over all ranks of input_list[rank]."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(output, "reduce_scatter", "output")
    _check_tensor_list(input_list, "reduce_scatter", "input_list")
    _check_op(op, "reduce_scatter")
    if pg._debug:
        _check_same_call(pg, "reduce_scatter", output, op=op)
    return _done(pg._comm.reduce_scatter(output, list(input_list), op, async_op), [output])


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002
    """`input` is split on dim 0 into world_size chunks; `output` receives the reduction of
    chunk `rank` over all ranks."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(output, "reduce_scatter_tensor", "output")
    _check_tensor(input, "reduce_scatter_tensor", "input")
    _check_op(op, "reduce_scatter_tensor")
    if pg._debug:
        _check_same_call(pg, "reduce_scatter_tensor", input, op=op)
    return _done(pg._comm.reduce_scatter_tensor(output, input, op, async_op), [output])


def barrier(group=None, async_op=False, device_ids=None):
    """Block until every rank has reached the barrier."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    if pg._debug:
        _check_same_call(pg, "barrier")
    return _done(pg._comm.barrier(async_op))


def send(tensor, dst, group=None, tag=0):
    """Send `tensor` to rank `dst`. Blocking: it pairs with a recv (same tag) on `dst`."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(tensor, "send")
    pg._comm.send(tensor, pg._group_rank(dst, "send", "dst"), tag)


def recv(tensor, src=None, group=None, tag=0):
    """Receive into `tensor` from rank `src`; returns `src`."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return -1
    _check_tensor(tensor, "recv")
    if src is None:
        raise ValueError("recv: receiving from any source (src=None) is not supported; pass the sender's rank")
    pg._comm.recv(tensor, pg._group_rank(src, "recv", "src"), tag)
    return src


# ---- composed collectives -----------------------------------------------------------------

def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,  # noqa: A002
                      async_op=False):
    """Rank i's `input` is split on dim 0 (into `input_split_sizes` rows, or world_size equal
    parts) and part j goes to rank j, which stacks the parts it receives in rank order into
    `output` (split into `output_split_sizes`)."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(output, "all_to_all_single", "output")
    _check_tensor(input, "all_to_all_single", "input")
    ws = pg.size()
    rows_in = input_split_sizes or _equal_split(input, ws, "input")
    rows_out = output_split_sizes or _equal_split(output, ws, "output")
    return all_to_all(list(output.split(list(rows_out))), list(input.split(list(rows_in))), group=pg,
                      async_op=async_op)


def _equal_split(t, ws, what):
    if t.shape[0] % ws:
        raise ValueError(f"all_to_all_single: {what} has {t.shape[0]} rows, which do not split into {ws} equal parts; "
                         f"pass {what}_split_sizes")
    return [t.shape[0] // ws] * ws


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """input_tensor_list[j] of rank i lands in output_tensor_list[i] of rank j (each pair's
    tensors must agree in size and dtype). Composed from all_gather: every rank receives every
    rank's whole input, world_size times the bytes of a direct exchange."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    ws, me = pg.size(), pg.rank()
    _check_tensor_list(output_tensor_list, "all_to_all", "output_tensor_list")
    _check_tensor_list(input_tensor_list, "all_to_all", "input_tensor_list")
    if len(output_tensor_list) != ws or len(input_tensor_list) != ws:
        raise ValueError(f"all_to_all: both lists need one tensor per rank ({ws}); got {len(output_tensor_list)} "
                         f"outputs and {len(input_tensor_list)} inputs")
    dtype = input_tensor_list[0].dtype
    for t in list(input_tensor_list) + list(output_tensor_list):
        if t.dtype != dtype:
            raise TypeError(f"all_to_all: every tensor must have dtype {dtype}, got {t.dtype}")
    # Every rank's element counts per destination, so that each can find its parts.
    counts = _tensor([t.numel() for t in input_tensor_list], dtype=_C.int64)
    all_counts = [empty(ws, dtype=_C.int64) for _ in range(ws)]
    all_gather(all_counts, counts, group=pg)
    all_counts = [c.tolist() for c in all_counts]
    longest = max(sum(c) for c in all_counts)
    flat = empty(longest, dtype=dtype)
    if input_tensor_list:
        mine = _C.cat([t.detach().reshape(-1).cpu() for t in input_tensor_list])
        flat.narrow(0, 0, mine.numel()).copy_(mine)
    gathered = [empty(longest, dtype=dtype) for _ in range(ws)]
    all_gather(gathered, flat, group=pg)
    for src in range(ws):
        start = sum(all_counts[src][:me])
        n = all_counts[src][me]
        out = output_tensor_list[src]
        if n != out.numel():
            raise ValueError(f"all_to_all: rank {src} sends {n} elements to rank {me}, whose output_tensor_list[{src}] "
                             f"holds {out.numel()}")
        out.copy_(gathered[src].narrow(0, start, n).view(out.shape))
    return _done(_CompletedWork() if async_op else None, list(output_tensor_list))


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce `tensor` over all ranks into rank `dst`'s tensor; the other ranks' tensors are
    left as they were (PyTorch leaves them unspecified). Composed from all_reduce (on a copy
    outside `dst`)."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(tensor, "reduce")
    _check_op(op, "reduce")
    root = _root(pg, dst, "reduce", "dst")
    all_reduce(tensor if pg.rank() == root else tensor.detach().clone(), op, group=pg)
    return _done(_CompletedWork() if async_op else None, [tensor])


def _root(pg, global_rank, fn, arg):
    """The group rank of a composed collective's root, checked (the backend checks its own)."""
    root = pg._group_rank(global_rank, fn, arg)
    if not 0 <= root < pg.size():
        raise ValueError(f"{fn}: {arg} {global_rank} is not a rank of the group (size {pg.size()})")
    return root


def _check_root_only_list(pg, root, ts, tensor, fn, arg, role):
    """gather's gather_list / scatter's scatter_list: world_size tensors like `tensor` on the
    root, nothing elsewhere (PyTorch's rule)."""
    if pg.rank() != root:
        if ts:
            raise ValueError(f"Argument ``{arg}`` must NOT be specified on non-{role} ranks.")
        return
    _check_tensor_list(ts, fn, arg)
    if len(ts) != pg.size():
        raise ValueError(f"{fn}: {arg} must hold one tensor per rank ({pg.size()}), got {len(ts)}")
    for i, t in enumerate(ts):
        if t.shape != tensor.shape or t.dtype != tensor.dtype:
            raise ValueError(f"{fn}: {arg}[{i}] has shape {list(t.shape)} and dtype {t.dtype}; every tensor must "
                             f"match `tensor` ({list(tensor.shape)}, {tensor.dtype})")


def _recv_into(pg, out, src):
    """Receives group rank `src`'s tensor into `out` (through a dense buffer: `out` may be any view)."""
    received = empty(out.shape, dtype=out.dtype, device=out.device)
    pg._comm.recv(received, src, 0)
    out.copy_(received)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """Rank `dst` receives every rank's `tensor` into gather_list (one tensor per rank, in rank
    order); the other ranks pass no list. Each rank sends to `dst` directly."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(tensor, "gather")
    root = _root(pg, dst, "gather", "dst")
    _check_root_only_list(pg, root, gather_list, tensor, "gather", "gather_list", "destination")
    if pg.rank() != root:
        pg._comm.send(tensor.contiguous(), root, 0)
    else:
        for r, out in enumerate(gather_list):
            if r == root:
                out.copy_(tensor)
            else:
                _recv_into(pg, out, r)
    return _done(_CompletedWork() if async_op else None, list(gather_list or []))


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """Rank r's `tensor` receives scatter_list[r] of rank `src`; the other ranks pass no list.
    `src` sends each rank its part directly."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    _check_tensor(tensor, "scatter")
    root = _root(pg, src, "scatter", "src")
    _check_root_only_list(pg, root, scatter_list, tensor, "scatter", "scatter_list", "source")
    if pg.rank() != root:
        _recv_into(pg, tensor, root)
    else:
        for r, part in enumerate(scatter_list):
            if r != root:
                pg._comm.send(part.contiguous(), r, 0)
        tensor.copy_(scatter_list[root])
    return _done(_CompletedWork() if async_op else None, [tensor])


class _CompletedWork:
    """The handle of a composed collective that ran to completion before returning."""

    def wait(self, timeout_s=None):
        return None

    def is_completed(self):
        return True

    def is_success(self):
        return True


def _object_to_tensor(obj):
    data = pickle.dumps(obj)
    return _tensor(list(data), dtype=_C.uint8) if data else empty(0, dtype=_C.uint8)


def _gather_sizes(n, pg):
    sizes = [empty(1, dtype=_C.int64) for _ in range(pg.size())]
    all_gather(sizes, _tensor([n], dtype=_C.int64), group=pg)
    return [int(s.item()) for s in sizes]


def all_gather_object(object_list, obj, group=None):
    """object_list[i] receives rank i's picklable `obj`. Unpickling runs the peers' data: use it
    only among processes you trust (as PyTorch warns)."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    if not isinstance(object_list, list) or len(object_list) != pg.size():
        raise ValueError(f"all_gather_object: object_list must be a list of world_size ({pg.size()}) elements")
    data = _object_to_tensor(obj)
    sizes = _gather_sizes(data.numel(), pg)
    longest = max(sizes)
    padded = _C.cat([data, empty(longest - data.numel(), dtype=_C.uint8)])
    gathered = [empty(longest, dtype=_C.uint8) for _ in range(pg.size())]
    all_gather(gathered, padded, group=pg)
    for i, (t, n) in enumerate(zip(gathered, sizes)):
        object_list[i] = pickle.loads(bytes(t[:n].tolist()))


def broadcast_object_list(object_list, src=0, group=None, device=None):
    """Every rank's object_list (of the same length) receives rank `src`'s picklable objects,
    in place. Unpickling runs src's data: use it only among processes you trust."""
    pg = _resolve_group(group)
    if pg is None:  # not a member of the group
        return None
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list: object_list must be a list, got {type(object_list).__name__}")
    is_src = pg.rank() == src
    datas = [_object_to_tensor(o) for o in object_list] if is_src else []
    sizes = _tensor([d.numel() for d in datas] if is_src else [0] * len(object_list), dtype=_C.int64)
    broadcast(sizes, src, group=pg)
    sizes = sizes.tolist()
    flat = _C.cat(datas) if is_src and datas else empty(sum(sizes), dtype=_C.uint8)
    broadcast(flat, src, group=pg)
    if not is_src:
        offset = 0
        for i, n in enumerate(sizes):
            object_list[i] = pickle.loads(bytes(flat[offset:offset + n].tolist()))
            offset += n
