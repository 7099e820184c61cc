"""DistributedDataParallel: PyTorch 1.13's data-parallel wrapper over plugflow.distributed.

At construction every rank checks that all ranks hold the same parameters (count and shapes)
and takes rank 0's parameters and buffers. During backward, each gradient is copied (divided by
the world size) into its slot of a flat bucket as soon as autograd has it; a bucket whose
gradients are all in is summed over the ranks asynchronously (buckets launch in a fixed order,
the same on every rank), so communication overlaps the rest of the backward. When the last
gradient arrives, every bucket is waited for and the averaged values become the parameters'
``.grad``.

How gradients are caught: a tensor hook on each parameter runs inside AccumulateGrad, before
the gradient is added to ``.grad``. The hook writes ``(.grad + gradient) / world_size`` into the
bucket, sets ``.grad`` to None and lets AccumulateGrad store the gradient; the final step then
replaces ``.grad`` with the averaged value (with ``gradient_as_bucket_view``, the bucket view
itself). The last parameter's hook, which finalizes the step, hands AccumulateGrad a zero
gradient instead.
"""

import contextlib
import itertools
import weakref
import zlib

from ... import _C
from ... import distributed as dist
from ..._creation import empty, tensor as _tensor, zeros, zeros_like
from ...autograd import grad_mode
from ...distributed.algorithms.join import Join, Joinable, JoinHook
from ...futures import Future
from ..modules.module import Module
from . import _device_index, _to_device

__all__ = ["DistributedDataParallel"]

_DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES
_BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024

_UNFINISHED_REDUCTION = (
    "Expected to have finished reduction in the prior iteration before starting a new one. This error indicates "
    "that your module has parameters that were not used in producing loss. You can enable unused parameter "
    "detection by passing the keyword argument `find_unused_parameters=True` to "
    "`torch.nn.parallel.DistributedDataParallel`, and by \nmaking sure all `forward` function outputs participate in "
    "calculating loss. \nIf you already have done the above, then the distributed data parallel module wasn't able "
    "to locate the output tensors in the return value of your module's `forward` function. Please include the loss "
    "function and the structure of the return value of `forward` of your module when reporting this issue (e.g. "
    "list, dict, iterable).\nParameter indices which did not receive grad for rank {rank}: {indices}")

_MARKED_TWICE = (
    "Expected to mark a variable ready only once. This error is caused by one of the following reasons: 1) Use of a "
    "module parameter outside the `forward` function. Please make sure model parameters are not shared across "
    "multiple concurrent forward-backward passes. or try to use _set_static_graph() as a workaround if this module "
    "graph does not change during training loop.2) Reused parameters in multiple reentrant backward passes. For "
    "example, if you use multiple `checkpoint` functions to wrap the same part of your model, it would result in "
    "the same set of parameters been used by different reentrant backward passes multiple times, and hence marking "
    "a variable ready multiple times. DDP does not support such use cases in default. You can try to use "
    "_set_static_graph() as a workaround if your module graph does not change over iterations.\nParameter at index "
    "{index} has been marked as ready twice. This means that multiple autograd engine  hooks have fired for this "
    "particular parameter during this iteration.")


def _find_tensors(obj):
    """Every tensor inside obj (tuples, lists, dict values)."""
    if isinstance(obj, _C.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return list(itertools.chain.from_iterable(map(_find_tensors, obj)))
    if isinstance(obj, dict):
        return list(itertools.chain.from_iterable(map(_find_tensors, obj.values())))
    return []


def _remove_hooks(handles):
    for handle in handles:
        handle.remove()


class _Bucket:
    """A flat buffer holding some parameters' gradients (one dtype and device)."""

    def __init__(self, indices, params):
        self.indices = indices
        self.params = [params[i] for i in indices]
        first = params[indices[0]]
        total = sum(params[i].numel() for i in indices)
        self.buffer = zeros(total, dtype=first.dtype, device=first.device)
        self.views = dict(zip(indices, self.views_of(self.buffer)))
        self.pending = len(indices)
        self.work = None  # the bucket's collective (a Work) or communication hook (a Future)

    def views_of(self, buffer):
        """Each parameter's slot of a flat buffer laid out like this bucket's."""
        views, offset = [], 0
        for p in self.params:
            views.append(buffer.narrow(0, offset, p.numel()).view(p.shape))
            offset += p.numel()
        return views


def _assign_buckets(params, first_cap, cap):
    """Indices of params grouped into buckets, PyTorch's way: in reverse order (the order
    backward produces gradients in), one dtype and device per bucket, a bucket closed once it
    holds `first_cap` bytes (the first) or `cap` bytes (the others)."""
    buckets, open_ = [], {}
    limit = first_cap
    for i in reversed(range(len(params))):
        p = params[i]
        key = (p.dtype, str(p.device))
        indices, size = open_.get(key, ([], 0))
        indices.append(i)
        size += p.numel() * p.element_size()
        if size >= limit:
            buckets.append(indices)
            open_.pop(key, None)
            limit = cap
        else:
            open_[key] = (indices, size)
    buckets.extend(indices for indices, _ in open_.values())
    return buckets


class DistributedDataParallel(Module, Joinable):
    """PyTorch's DistributedDataParallel (see the module docstring for how it works).

    module: the model (the same on every rank; rank 0's parameters and buffers are copied to the
    others). device_ids: None for CPU modules, or [i] for a module on cuda:i. broadcast_buffers:
    copy rank 0's buffers to every rank before each forward. bucket_cap_mb: the size of a
    gradient bucket (the first one is 1 MB, as in PyTorch). find_unused_parameters: find the
    parameters the forward's outputs do not depend on and count them as done (their gradient is
    zero on this rank; a parameter no rank used keeps its .grad). gradient_as_bucket_view: the
    parameters' .grad are views into the buckets (no copy back, less memory). static_graph:
    accepted for PyTorch compatibility; unused parameters are then found as with
    find_unused_parameters. join() trains on uneven inputs; register_comm_hook() replaces the
    buckets' all-reduce. Inside an nn.Graph's build(), the buckets' all-reduces become nodes of
    the graph (docs/distributed.md).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False):
        super().__init__()
        Joinable.__init__(self)
        params = []
        seen = set()
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        if not params:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter that "
                               "requires a gradient.")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element.")
        devices = {str(p.device) for p in module.parameters()}
        if len(devices) > 1:
            raise ValueError(f"DistributedDataParallel's input module must be on the same type of devices, but input "
                             f"module parameters locate in {devices}.")
        self.device_type = next(iter(devices)).split(":")[0]
        if device_ids is None or self.device_type == "cpu":
            if device_ids or output_device is not None:
                raise ValueError(f"DistributedDataParallel device_ids and output_device arguments only work with "
                                 f"single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                                 f"{device_ids}, output_device {output_device}, and module parameters {devices}.")
            self.device_ids = None
            self.output_device = None
        else:
            self.device_ids = [_device_index(d) for d in device_ids]
            self.output_device = _device_index(output_device if output_device is not None else self.device_ids[0])
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")

        self.module = module
        self.dim = dim
        self.process_group = dist._resolve_group(process_group)
        if self.process_group is None:
            raise ValueError("DistributedDataParallel: this rank is not a member of process_group")
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self._params = params
        self._world_size = self.process_group.size()
        self._rank = self.process_group.rank()
        self._comm_hook = None
        self._comm_hook_state = None
        self._divide_by_initial_world_size = True  # join(): the gradients' divisor
        self._divisor = self._world_size

        self._verify_params_across_processes()
        self._broadcast_coalesced(list(module.parameters()) + list(module.buffers()))

        self._buckets = [_Bucket(indices, params)
                         for indices in _assign_buckets(params, _DEFAULT_FIRST_BUCKET_BYTES, self.bucket_bytes_cap)]
        self._bucket_of = {i: b for b in self._buckets for i in b.indices}
        if gradient_as_bucket_view:
            for i, p in enumerate(params):
                view = self._bucket_of[i].views[i]
                if p.grad is not None:
                    view.copy_(p.grad)
                    p.grad = view
        # One backward's state; _prepare_for_backward resets it.
        self._expect_sync = False
        self._ready = [False] * len(params)
        self._remaining = 0
        self._next_bucket = 0
        self._used = None
        self._used_work = None
        self._accumulators = None  # find_unused_parameters: each parameter's AccumulateGrad node
        # The hooks hold the wrapper weakly, and go when it does: parameters outlive it.
        self_ref = weakref.ref(self)
        handles = [p.register_hook(self._make_hook(self_ref, i)) for i, p in enumerate(params)]
        weakref.finalize(self, _remove_hooks, handles)

    # ---- construction ----------------------------------------------------------------------

    def _verify_params_across_processes(self):
        """Every rank must hold the same parameters: RuntimeError (on every rank) otherwise."""
        shapes = [(tuple(p.shape), str(p.dtype)) for p in self._params]
        summary = _tensor([len(shapes), zlib.crc32(repr(shapes).encode())], dtype=_C.int64)
        gathered = [empty(2, dtype=_C.int64) for _ in range(self._world_size)]
        dist.all_gather(gathered, summary, group=self.process_group)
        rows = [g.tolist() for g in gathered]
        for r, (count, digest) in enumerate(rows):
            if count != len(shapes):
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank {self._rank} has "
                                   f"{len(shapes)} params, while rank {r} has inconsistent {count} params.")
        if all(digest == rows[0][1] for _, digest in rows):
            return
        # Same count, different shapes: find the first parameter that differs from rank 0's.
        per_param = _tensor([zlib.crc32(repr(s).encode()) for s in shapes], dtype=_C.int64)
        everyone = [empty(len(shapes), dtype=_C.int64) for _ in range(self._world_size)]
        dist.all_gather(everyone, per_param, group=self.process_group)
        reference = everyone[0].tolist()
        for r in range(1, self._world_size):
            mine = everyone[r].tolist()
            for i, (a, b) in enumerate(zip(reference, mine)):
                if a != b:
                    where = f"params[{i}] in this process with sizes {list(shapes[i][0])} ({shapes[i][1]})"
                    raise RuntimeError(f"DDP expects same model across all ranks: {where} appears not to match "
                                       f"the same param in process {r if self._rank == 0 else 0} (rank {r}'s "
                                       f"params[{i}] differs from rank 0's).")

    def _broadcast_coalesced(self, tensors, src=0):
        """Copies the values of `tensors` on the group's rank `src` to every rank: one broadcast
        per dtype and device, of up to 250 MB each."""
        groups = {}
        for t in tensors:
            groups.setdefault((t.dtype, str(t.device)), []).append(t)
        for group in groups.values():
            chunk, size = [], 0
            for t in group:
                nbytes = t.numel() * t.element_size()
                if chunk and size + nbytes > _BROADCAST_BUCKET_BYTES:
                    self._broadcast_flat(chunk, src)
                    chunk, size = [], 0
                chunk.append(t)
                size += nbytes
            self._broadcast_flat(chunk, src)

    def _broadcast_flat(self, tensors, src):
        with grad_mode.no_grad():
            flat = _C.cat([t.detach().reshape(-1) for t in tensors])
            if flat.numel() == 0:
                return
            self.process_group._comm.broadcast(flat, src, False)
            offset = 0
            for t in tensors:
                t.copy_(flat.narrow(0, offset, t.numel()).view(t.shape))
                offset += t.numel()

    # ---- forward ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self):
        """Inside this context, backward accumulates gradients locally without communicating;
        the first synchronized backward after it averages the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def forward(self, *inputs, **kwargs):
        if _C._graph_capturing():
            self._check_graph_capture()
        sync = grad_mode.is_grad_enabled() and self.require_backward_grad_sync
        if sync:
            self._check_previous_reduction()
        self._expect_sync = False
        # Under join(): tell joined ranks this one still trains (the count of such ranks divides
        # the gradients unless divide_by_initial_world_size).
        join_work = Join.notify_join_context(self)
        self._divisor = self._world_size
        if join_work is not None and not self._divide_by_initial_world_size:
            join_work.wait()
            self._divisor = int(join_work.result()[0].item())
        if self.require_forward_param_sync and self.broadcast_buffers:
            buffers = list(self.module.buffers())
            if buffers:
                # Under join() rank 0 may have joined, with stale buffers: the highest rank
                # still training is the source.
                src = self._find_common_rank(True) if self._join_config.enable else 0
                self._broadcast_coalesced(buffers, src)
        if self._join_config.enable:
            # Tells joined ranks whether this step's backward synchronizes (they shadow it).
            flag = _tensor([1.0 if sync else 0.0])
            self.process_group._comm.all_reduce(flag, dist.ReduceOp.SUM, True)
        if self.device_ids:
            device = _C.device("cuda", self.device_ids[0])
            inputs, kwargs = _to_device(inputs, device), _to_device(kwargs, device)
        output = self.module(*inputs, **kwargs)
        if sync:
            self.require_forward_param_sync = True
            self._prepare_for_backward(output)
        else:
            self.require_forward_param_sync = False
        return output

    def _check_previous_reduction(self):
        """PyTorch's error when the last synchronized backward left parameters without a
        gradient (so their buckets never went out)."""
        if self._expect_sync and any(self._ready):
            missing = [i for i, r in enumerate(self._ready) if not r]
            self._expect_sync = False
            raise RuntimeError(_UNFINISHED_REDUCTION.format(rank=self._rank, indices=" ".join(map(str, missing))))

    def _prepare_for_backward(self, output):
        for b in self._buckets:
            b.pending = len(b.indices)
            b.work = None
        self._ready = [False] * len(self._params)
        self._next_bucket = 0
        self._remaining = len(self._params)
        self._expect_sync = True
        if not (self.find_unused_parameters or self.static_graph):
            return
        reached = self._reached_nodes(_find_tensors(output))
        if self._accumulators is None:
            self._accumulators = [self._accumulator(p) for p in self._params]
        used = [acc in reached for acc in self._accumulators]
        # Which parameters some rank used: summed while this rank computes.
        self._used = _tensor([int(u) for u in used], dtype=_C.int32)
        self._used_work = self.process_group._comm.all_reduce(self._used, dist.ReduceOp.SUM, True)
        self._remaining = sum(used)
        for i, u in enumerate(used):
            if not u:
                self._mark_ready(i, None)
        if self._remaining == 0:
            self._finalize()

    @staticmethod
    def _accumulator(p):
        with grad_mode.enable_grad():
            return p.expand_as(p).grad_fn.next_functions[0][0]

    @staticmethod
    def _reached_nodes(outputs):
        seen = set()
        stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
        seen.update(stack)
        while stack:
            node = stack.pop()
            for nxt, _ in node.next_functions:
                if nxt is not None and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    # ---- backward --------------------------------------------------------------------------

    @staticmethod
    def _make_hook(self_ref, index):
        def hook(grad):
            ddp = self_ref()
            return None if ddp is None else ddp._on_grad(index, grad)
        return hook

    def _on_grad(self, index, grad):
        """A parameter's gradient is complete (the hook runs in AccumulateGrad)."""
        if not self._expect_sync:
            return None
        if self._ready[index]:
            raise RuntimeError(_MARKED_TWICE.format(index=index))
        p = self._params[index]
        accumulated = grad if p.grad is None else p.grad + grad
        p.grad = None  # AccumulateGrad stores `grad`; _finalize puts the average there
        self._remaining -= 1
        self._mark_ready(index, accumulated)
        if self._remaining > 0:
            return None
        self._finalize(last=index)
        # This parameter's .grad already holds the average: AccumulateGrad adds zero to it.
        return zeros((), dtype=grad.dtype, device=grad.device).expand(grad.shape)

    def _mark_ready(self, index, grad):
        """Writes grad / world_size into the parameter's bucket slot (grad itself with a
        communication hook, which averages; a parameter unused on this rank contributes what
        its .grad holds, or zero) and launches every bucket that is complete, in bucket order."""
        view = self._bucket_of[index].views[index]
        with grad_mode.no_grad():
            if grad is None:
                grad = self._params[index].grad
            if grad is None:
                view.zero_()
            elif self._comm_hook is not None:
                view.copy_(grad)
            else:
                _C.mul(grad, 1.0 / self._divisor, out=view)
        self._ready[index] = True
        bucket = self._bucket_of[index]
        bucket.pending -= 1
        while self._next_bucket < len(self._buckets) and self._buckets[self._next_bucket].pending == 0:
            b = self._buckets[self._next_bucket]
            b.work = self._reduce_bucket(self._next_bucket, b.buffer)
            self._next_bucket += 1

    def _reduce_bucket(self, index, buffer):
        """Starts averaging bucket `index` (its values in `buffer`): its Work, or the Future of
        the communication hook."""
        if self._comm_hook is None:
            return self.process_group._comm.all_reduce(buffer, dist.ReduceOp.SUM, True)
        b = self._buckets[index]
        grad_bucket = dist.GradBucket(index, buffer, b.views_of(buffer), b.params, index == len(self._buckets) - 1)
        fut = self._comm_hook(self._comm_hook_state, grad_bucket)
        if not isinstance(fut, Future):
            raise RuntimeError(f"the communication hook must return a plugflow.futures.Future, got "
                               f"{type(fut).__name__}")
        return fut

    def _finalize(self, last=None):
        """Waits for every bucket and puts the averaged gradients in .grad (`last`: the
        parameter whose hook runs this; the caller lets AccumulateGrad finish it)."""
        self._expect_sync = False
        for b in self._buckets:
            result = b.work.wait()
            if self._comm_hook is not None:
                self._take_hook_result(b, result)
        used_anywhere = None
        if self._used_work is not None:
            self._used_work.wait()
            used_anywhere = self._used.tolist()
            self._used_work = None
        for i, p in enumerate(self._params):
            if used_anywhere is not None and not used_anywhere[i]:
                continue  # no rank used it: its .grad stays as it was
            view = self._bucket_of[i].views[i]
            if self.gradient_as_bucket_view:
                p.grad = view
            elif p.grad is None or i == last:
                p.grad = view.clone()
            else:
                p.grad.copy_(view)

    def _take_hook_result(self, bucket, result):
        if not isinstance(result, _C.Tensor) or result.numel() != bucket.buffer.numel():
            what = f"a tensor of {result.numel()} elements" if isinstance(result, _C.Tensor) else type(result).__name__
            raise RuntimeError(f"the communication hook's Future must hold the bucket's averaged values (a tensor of "
                               f"{bucket.buffer.numel()} elements, like bucket.buffer()), got {what}")
        if result is not bucket.buffer:
            with grad_mode.no_grad():
                bucket.buffer.copy_(result.reshape(-1))

    # ---- communication hooks ---------------------------------------------------------------

    def register_comm_hook(self, state, hook):
        """Averages each gradient bucket with `hook(state, bucket)` instead of the built-in
        all-reduce: `bucket` is a plugflow.distributed.GradBucket whose buffer() holds this
        rank's gradients (not divided by the world size), and the hook returns a
        plugflow.futures.Future whose value is the averaged bucket (e.g.
        distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook). Once, before
        training."""
        if not callable(hook):
            raise TypeError("Communication hook must be callable.")
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        if self._expect_sync:
            raise RuntimeError("register_comm_hook must be called before a synchronized forward, not between it and "
                               "its backward")
        self._comm_hook, self._comm_hook_state = hook, state

    # ---- join (uneven inputs) --------------------------------------------------------------

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """A context manager for inputs of different lengths per rank (PyTorch's semantics): a
        rank that runs out shadows the others' collectives (zero gradients) until all ran out,
        then every rank takes the parameters of a rank that finished last. Gradients are divided
        by the initial world size, or by the number of ranks still training with
        divide_by_initial_world_size=False. throw_on_early_termination: every rank raises
        RuntimeError at the step after one ran out."""
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, **kwargs):
        return _DDPJoinHook(self, divide_by_initial_world_size=kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self):
        return self._params[0].device

    @property
    def join_process_group(self):
        return self.process_group

    def _find_common_rank(self, rank_cond):
        """The highest group rank among those passing rank_cond=True (one all-reduce)."""
        rank = _tensor([self._rank if rank_cond else -1], dtype=_C.int64)
        self.process_group._comm.all_reduce(rank, dist.ReduceOp.MAX, False)
        return int(rank.item())

    def _check_graph_capture(self):
        if self.find_unused_parameters or self.static_graph:
            raise NotImplementedError("DistributedDataParallel inside an nn.Graph: find_unused_parameters and "
                                      "static_graph are not supported (a graph's parameters are all used by "
                                      "construction, or the graph has to be rebuilt)")
        if self._join_config.enable:
            raise NotImplementedError("DistributedDataParallel.join() inside an nn.Graph is not supported: the "
                                      "graph's steps are replayed without Python, so a joined rank cannot shadow "
                                      "them")


class _DDPJoinHook(JoinHook):
    """What a rank that ran out of inputs does for DDP while others train (main_hook, per step),
    matching their collectives one for one, and once all have joined (post_hook)."""

    def __init__(self, ddp, divide_by_initial_world_size):
        self.ddp = ddp
        ddp._divide_by_initial_world_size = divide_by_initial_world_size

    def main_hook(self):
        ddp = self.ddp
        comm = ddp.process_group._comm
        if ddp.require_forward_param_sync and ddp.broadcast_buffers:
            buffers = list(ddp.module.buffers())
            if buffers:
                ddp._broadcast_coalesced(buffers, ddp._find_common_rank(False))
        flag = zeros(1)
        comm.all_reduce(flag, dist.ReduceOp.SUM, False)
        should_sync = flag.item() != 0
        ddp.require_forward_param_sync = should_sync
        if not should_sync:
            return
        if ddp.find_unused_parameters or ddp.static_graph:
            comm.all_reduce(zeros(len(ddp._params), dtype=_C.int32), dist.ReduceOp.SUM, False)
        # Zero gradients, bucket by bucket, through the same all-reduce or hook as the others.
        works = [ddp._reduce_bucket(i, zeros_like(b.buffer)) for i, b in enumerate(ddp._buckets)]
        for work in works:
            work.wait()

    def post_hook(self, is_last_joiner):
        ddp = self.ddp
        src = ddp._find_common_rank(is_last_joiner)
        ddp._broadcast_coalesced(list(ddp.module.parameters()) + list(ddp.module.buffers()), src)
