"""plugflow.nn.Graph: static graphs in the line of OneFlow's nn.Graph.

    class TrainGraph(plugflow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model                      # the eager module: parameters are shared
            self.add_optimizer(opt, lr_sch=sched)   # the update runs inside the graph
        def build(self, x, y):
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            return loss

    g = TrainGraph()
    loss = g(x, y)     # the first call with a new signature compiles; later calls replay

The first call of each input signature (shapes, dtypes, devices, requires_grad, constant
arguments, the modules' train/eval state) captures build() through the same functional API
as eager mode, with kernels recorded instead of run: forward, backward (the eager backward
formulas) and the optimizer update become one graph of catalog ops. Named passes then rewrite
it (docs/graph.md), kernels are bound once, temporaries get one arena planned by liveness, and
every call replays the plan with no Python per op. Eager and graph share parameters, buffers
and optimizer state; a graph with an optimizer owns the gradients (parameters' .grad stay None).
"""

import contextlib
import linecache
import os
import sys
import traceback

from .. import _C
from .._C import Tensor
from ..autograd import no_grad
from .modules.module import Module, register_module_forward_hook, register_module_forward_pre_hook

__all__ = ["Graph", "GraphConfig", "GraphCaptureError", "graph_mode"]

GraphCaptureError = _C.GraphCaptureError

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Pass order: algebraic rewrites first, then fusions that change kernels, then amp (which
# hoists what is computed from parameters, fused or not), then the update.
_PASS_ORDER = ("fuse_pad_conv", "fuse_conv_bn", "fuse_bias_act", "fuse_add_to_output", "amp", "blocked_layout",
               "fuse_model_update")
# Passes that always run around the switchable ones (they never change results).
_CLEANUP = ("fold_constants", "eliminate_dead", "conv_algo_search")


def graph_mode():
    """True when the active config sets `optimizations.graph`: programs that can run their step
    either eagerly or as an nn.Graph (plugflow's demo) then use a graph."""
    return bool(_C.current_config()["optimizations"]["graph"])


class GraphConfig:
    """Per-graph optimization switches (OneFlow's nn.Graph.config). Defaults come from the
    active config's `optimizations:` section, so switching a pass for every graph is a config
    edit; the methods here override it for one graph. Changing a switch recompiles on the next
    call."""

    def __init__(self):
        opt = _C.current_config()["optimizations"]
        self._passes = {
            "fuse_pad_conv": bool(opt["fuse_pad_conv"]),
            "fuse_add_to_output": bool(opt["fuse_add_to_output"]),
            "fuse_conv_bn": bool(opt["fuse_conv_bn"]),
            "fuse_bias_act": bool(opt["fuse_bias_act"]),
            "fuse_model_update": bool(opt["fuse_model_update"]),
            "blocked_layout": bool(opt["blocked_layout"]),
        }
        self._amp = opt["amp"]  # "off" | "bf16" | "fp16"
        self._conv_algo_search = opt["conv_algo_search"]
        self._memory_format = opt["graph_memory_format"]  # "contiguous" | "channels_last"
        self._grad_acc_steps = 1

    def _key(self):
        return (tuple(sorted(self._passes.items())), self._amp, self._conv_algo_search, self._memory_format,
                self._grad_acc_steps)

    def enable_amp(self, mode=True, *, dtype=None):
        """Mixed precision for this graph: build() is captured under autocast (bfloat16, the
        default, or float16 on CUDA), so the graph computes what eager autocast computes
        (PyTorch's op lists) with float32 master weights; in inference graphs the weight casts
        run once per weight version."""
        if not mode:
            self._amp = "off"
            return
        if dtype is None or dtype is _C.bfloat16:
            self._amp = "bf16"
        elif dtype is _C.float16:
            self._amp = "fp16"
        else:
            raise ValueError(f"enable_amp: dtype must be plugflow.bfloat16 or plugflow.float16, got {dtype}")

    def set_conv_algo_search(self, strategy):
        """How convolutions pick their algorithm at compile time: 'heuristic' (ask the library)
        or 'exhaustive' (time every candidate on the call's buffers; cached per problem)."""
        if strategy not in ("heuristic", "exhaustive"):
            raise ValueError(f"set_conv_algo_search: expected 'heuristic' or 'exhaustive', got {strategy!r}")
        self._conv_algo_search = strategy

    def set_memory_format(self, memory_format):
        """The layout of the graph's image activations: plugflow.channels_last converts every 4-d
        floating tensor argument to channels last inside the graph (the caller's tensor is left
        as it is), so convolutions, batch norms, pooling and elementwise ops run channels last;
        plugflow.contiguous_format (the default) leaves the arguments as they come. Channels
        last is faster for CNNs on the CPU (docs/graph.md) but is a choice, as in PyTorch: a
        model that calls .view() on a convolution's output needs row-major activations."""
        from .._memory_format import channels_last, contiguous_format
        names = {channels_last: "channels_last", contiguous_format: "contiguous"}
        if memory_format not in names:
            raise ValueError("set_memory_format: expected plugflow.channels_last or plugflow.contiguous_format, "
                             f"got {memory_format!r}")
        self._memory_format = names[memory_format]

    def enable_cudnn_conv_heuristic_search_algo(self, mode=True):
        """OneFlow's name: True = heuristic search, False = exhaustive (any device)."""
        self.set_conv_algo_search("heuristic" if mode else "exhaustive")

    def _allow(self, name, mode):
        self._passes[name] = bool(mode)

    def allow_fuse_pad_conv(self, mode=True):
        """Fold a zero F.pad that feeds a convolution into the convolution's padding."""
        self._allow("fuse_pad_conv", mode)

    def allow_fuse_add_to_output(self, mode=True):
        """Let a residual add accumulate into the output of the convolution / matmul producing it."""
        self._allow("fuse_add_to_output", mode)

    def allow_fuse_conv_bn(self, mode=True):
        """Inference: fold batch norm into the convolution; training: fused batch norm + ReLU."""
        self._allow("fuse_conv_bn", mode)

    def allow_fuse_bias_act(self, mode=True):
        """Fuse a bias and a ReLU/GELU/SiLU into the convolution / matmul producing their input."""
        self._allow("fuse_bias_act", mode)

    def allow_fuse_model_update_ops(self, mode=True):
        """Update all parameters of an optimizer group with one multi-tensor kernel."""
        self._allow("fuse_model_update", mode)

    def allow_blocked_layout(self, mode=True):
        """Keep float32 image activations that flow only between convolutions, batch norms and
        elementwise ops in oneDNN's channel-blocked layout (nChw16c) on the CPU, so convolutions
        do not reorder them on every call (docs/graph.md, "Channel-blocked activations")."""
        self._allow("blocked_layout", mode)

    def set_gradient_accumulation_steps(self, value):
        """Split each call's batch (dim 0 of every tensor argument) into `value` micro-batches,
        accumulate their gradients and update once: the same update as the whole batch with a
        mean-reduced loss. Tensor outputs are averaged (0-d) or concatenated along dim 0."""
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"set_gradient_accumulation_steps: expected a positive int, got {value!r}")
        self._grad_acc_steps = value

    def __repr__(self):
        on = [name for name, v in self._passes.items() if v]
        return (f"GraphConfig(amp={self._amp!r}, conv_algo_search={self._conv_algo_search!r}, "
                f"memory_format={self._memory_format!r}, gradient_accumulation_steps={self._grad_acc_steps}, "
                f"passes={on})")


def _in_channels_last(arg):
    """A 4-d floating tensor argument converted to channels last inside the capture (a copy the
    graph records; one already channels last, or with C == 1 or a 1x1 image, passes as it is)."""
    from .._memory_format import channels_last
    if isinstance(arg, Tensor) and arg.dim() == 4 and arg.dtype.is_floating_point:
        return arg.contiguous(memory_format=channels_last)
    return arg


def _flatten(obj, out):
    """Tensors of a nest of tuples/lists/dicts, in order; returns a spec to rebuild it."""
    if isinstance(obj, Tensor):
        out.append(obj)
        return ("t",)
    if isinstance(obj, (tuple, list)):
        return (type(obj), tuple(_flatten(o, out) for o in obj))
    if isinstance(obj, dict):
        return (dict, tuple((k, _flatten(v, out)) for k, v in obj.items()))
    return ("c", obj)


def _unflatten(spec, it):
    if spec[0] == "t":
        return next(it)
    if spec[0] == "c":
        return spec[1]
    if spec[0] is dict:
        return {k: _unflatten(s, it) for k, s in spec[1]}
    return spec[0](_unflatten(s, it) for s in spec[1])


def _user_frame(tb):
    """The innermost frame of user code (outside plugflow) in a traceback, as 'file:line: code'."""
    where = None
    for frame, lineno in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR):
            where = f"{filename}:{lineno}: {linecache.getline(filename, lineno).strip()}"
    return where


class _Compiled:
    """One input signature's plan, with what each call sets before replaying it."""

    def __init__(self, plan, spec, updates, fused_groups, ir_before, pass_reports):
        self.plan = plan
        self.spec = spec
        self.updates = updates  # [(tag, optimizer, group, param, kind)]
        # Updates that fuse_model_update made one node, by the node's tag:
        # {tag: (optimizer, group, kind, [params in the node's order])}
        self.fused_groups = fused_groups
        self.fused_params = {id(p) for _, _, _, params in fused_groups.values() for p in params}
        self.ir_before = ir_before
        self.pass_reports = pass_reports
        self.calls = 0
        self.first_steps_taken = set()  # ids of parameters whose first SGD step this call took
        self._attrs = {}  # (tag, name) -> the value last set
        self.group_values = {}  # tag -> an SGD update's hyperparameters as last set

    def set_attr(self, tag, name, value):
        """Sets a node's attribute for the next replays. A value equal to the last one set (the
        same learning rate every step) skips the call into the plan."""
        key = (tag, name)
        last = self._attrs.get(key)
        if last is None or type(last) is not type(value) or last != value:
            self.plan.set_attr(tag, name, value)
            self._attrs[key] = value


class Graph:
    """Subclass, assign modules as attributes, call add_optimizer for training, and write
    build(*args). Calling the graph compiles one plan per input signature and replays it."""

    def __init__(self):
        self.config = GraphConfig()
        self._modules = {}
        self._optimizers = []  # [(optimizer, lr_scheduler or None)]
        self._grad_scaler = None
        self._found_inf = None  # the grad scaler's flag, written by the graph every call
        self._compiled = {}
        self._debug = 0
        self._last = None
        self._sgd_first_step = set()  # ids of parameters whose momentum buffer the graph created

    # ---- user API --------------------------------------------------------------------------

    def build(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define build(self, ...)")

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self.__dict__.setdefault("_modules", {})[name] = value
        object.__setattr__(self, name, value)

    def add_optimizer(self, optim, *, lr_sch=None, is_sparse=False):
        """Run `optim`'s update (and `lr_sch.step()` after it) inside the graph at each call.
        SGD, Adam and AdamW are supported; their state is shared with eager mode."""
        from ..optim import SGD, Adam, AdamW
        if is_sparse:
            raise NotImplementedError("nn.Graph: sparse updates (is_sparse=True) are not supported")
        if not isinstance(optim, (SGD, Adam, AdamW)):
            raise NotImplementedError(f"nn.Graph updates SGD, Adam and AdamW inside the graph; "
                                      f"{type(optim).__name__} is not supported yet (step it eagerly after an "
                                      f"inference-style graph instead)")
        for group in optim.param_groups:
            if group.get("differentiable", False):
                raise NotImplementedError("nn.Graph: differentiable=True optimizers are not supported")
        self._optimizers.append((optim, lr_sch))
        self._compiled.clear()

    def set_grad_scaler(self, grad_scaler):
        """Dynamic loss scaling inside the graph (a plugflow.amp.GradScaler, e.g. for float16):
        backward() in build() backpropagates loss * scale, then kernels of the graph unscale the
        gradients and flag infs/NaNs, the optimizer update is skipped on the device when one is
        found, and the scale grows or backs off, as scaler.scale(loss).backward(),
        scaler.step(opt) and scaler.update() do eagerly. A disabled scaler changes nothing."""
        from ..amp import GradScaler
        if not isinstance(grad_scaler, GradScaler):
            raise TypeError(f"set_grad_scaler expects a plugflow.amp.GradScaler, got {type(grad_scaler).__name__}")
        self._grad_scaler = grad_scaler if grad_scaler.is_enabled() else None
        self._compiled.clear()

    def debug(self, v_level=0, *, ranks=None, max_py_stack_depth=2):
        """v_level >= 1 prints each compiled graph (after the passes, with the kernel provider of
        every op) and what each pass changed."""
        self._debug = v_level

    @property
    def training(self):
        return bool(self._optimizers)

    def __call__(self, *args):
        tensors = []
        spec = _flatten(args, tensors)
        key = self._signature(spec, tensors)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile(args, tensors)
        self._last = compiled
        self._prepare_updates(compiled)
        outputs = compiled.plan.run(tensors)
        compiled.calls += 1
        if self._grad_scaler is not None and self._found_inf.item() != 0:
            # A skipped step: momentum buffers the graph created are still "before the first step".
            self._sgd_first_step |= compiled.first_steps_taken
        for optim, sched in self._optimizers:
            if sched is not None:
                sched.step()
        return _unflatten(compiled.spec, iter(outputs))

    # ---- introspection -------------------------------------------------------------------

    def __repr__(self):
        lines = [f"({type(self).__name__}) nn.Graph: {self.config!r}"]
        for name, m in self._modules.items():
            lines.append(f"  ({name}): " + repr(m).replace("\n", "\n  "))
        if self._last is not None:
            lines.append("  compiled:")
            lines.extend("    " + line for line in self._last.plan.text().splitlines())
        return "\n".join(lines)

    def dump(self, dirname):
        """Writes the last compiled graph: the captured graph, the graph after each pass (text
        and Graphviz .dot) with what the pass changed, and the final plan with each op's kernel
        provider and the memory plan."""
        if self._last is None:
            raise RuntimeError("nn.Graph.dump: the graph has not been called (nothing compiled yet)")
        os.makedirs(dirname, exist_ok=True)
        c = self._last
        with open(os.path.join(dirname, "00_captured.txt"), "w") as f:
            f.write(c.ir_before.text())
        with open(os.path.join(dirname, "00_captured.dot"), "w") as f:
            f.write(c.ir_before.dot())
        for i, (name, report, ir) in enumerate(c.pass_reports, start=1):
            with open(os.path.join(dirname, f"{i:02d}_{name}.txt"), "w") as f:
                f.write(f"# pass {name}: " + ("\n# ".join(report.splitlines()) if report else "no change") + "\n")
                f.write(ir.text())
            with open(os.path.join(dirname, f"{i:02d}_{name}.dot"), "w") as f:
                f.write(ir.dot())
        with open(os.path.join(dirname, "plan.txt"), "w") as f:
            f.write(f"# arena {c.plan.arena_bytes} bytes (most live at once: {c.plan.peak_live_bytes}; without reuse: "
                    f"{c.plan.unplanned_bytes})\n")
            f.write(c.plan.text())

    # ---- compilation -----------------------------------------------------------------------

    def _signature(self, spec, tensors):
        from .parallel import DistributedDataParallel
        modules = _module_tree(self._modules.values())
        modes = tuple(m.training for m in modules)
        # A DDP model captured under no_sync() has no all-reduce in its plan.
        syncs = tuple(m.require_backward_grad_sync for m in modules if isinstance(m, DistributedDataParallel))
        params = tuple(p.data_ptr() for optim, _ in self._optimizers for g in optim.param_groups
                       for p in g["params"])
        inputs = tuple((tuple(t.shape), t.dtype, str(t.device), t.requires_grad) for t in tensors)
        # An eager autocast region around the call is captured too.
        autocast = (_C.is_autocast_cpu_enabled(), _C.get_autocast_cpu_dtype(), _C.is_autocast_enabled(),
                    _C.get_autocast_gpu_dtype())
        return (repr(spec), inputs, modes, syncs, params, autocast, self.config._key())

    def _compile(self, args, tensors):
        if self._grad_scaler is not None:
            if not self._optimizers:
                raise RuntimeError("nn.Graph.set_grad_scaler needs an optimizer (add_optimizer): loss scaling is for "
                                   "training graphs")
            device = next(p.device for optim, _ in self._optimizers for g in optim.param_groups for p in g["params"])
            if self._grad_scaler._scale is None:
                self._grad_scaler._lazy_init_scale_growth_tracker(device)
            if self._found_inf is None:
                from .._creation import zeros
                self._found_inf = zeros(1, device=device)
        for optim, _ in self._optimizers:
            self._sgd_first_step |= _materialize_state(optim)
            for group in optim.param_groups:
                for p in group["params"]:
                    p.grad = None  # the graph owns the gradients
        capture = _C._GraphCapture(tensors)
        scope_hooks = self._scope_hooks(capture)
        try:
            if self.config._memory_format == "channels_last":
                args = [_in_channels_last(a) for a in args]
            with self._amp_region(tensors):
                with self._scaled_backward():
                    outputs = self._run_build(args)
            updates = self._capture_updates(capture)
            flat = []
            out_spec = _flatten(outputs, flat)
            ir = capture.end(flat)
        except BaseException as e:
            if _C._graph_capturing():
                capture.end([])
            if isinstance(e, GraphCaptureError):
                where = _user_frame(e.__traceback__)
                raise GraphCaptureError(f"{e}\n  in build(): {where}" if where else str(e)) from None
            raise
        finally:
            for h in scope_hooks:
                h.remove()
        ir_before = ir.copy()
        reports = []
        enabled = dict(self.config._passes, amp=self.config._amp != "off")
        # A grad scaler's skipped steps are per-parameter updates guarded by found_inf, which the
        # multi-tensor kernels of fuse_model_update do not take: that pass stays off with one.
        names = [n for n in _PASS_ORDER if enabled.get(n) and n in _C._graph_pass_names()
                 and not (n == "fuse_model_update" and self._grad_scaler is not None)]
        for name in (*_CLEANUP, *names, "eliminate_dead", "schedule_updates"):
            report = ir.run_pass(name, training=self.training, amp=self.config._amp,
                                 conv_algo_search=self.config._conv_algo_search)
            reports.append((name, report, ir.copy()))
        plan = ir.compile()
        # fuse_model_update tags a multi-tensor update "opt0.group1.params=3,4": its parameters.
        by_tag = {tag: (optim, group, p, kind) for tag, optim, group, p, kind in updates}
        fused_groups = {}
        for tag in ir.node_tags():
            if ".params=" in tag:
                group_tag, indices = tag.split(".params=")
                members = [by_tag[f"{group_tag}.param{i}"] for i in indices.split(",")]
                optim, group, _, kind = members[0]
                fused_groups[tag] = (optim, group, kind, [m[2] for m in members])
        compiled = _Compiled(plan, out_spec, updates, fused_groups, ir_before, reports)
        if self._debug >= 1:
            print(f"nn.Graph {type(self).__name__}: compiled {ir.num_nodes} ops, arena {plan.arena_bytes} bytes",
                  file=sys.stderr)
            for name, report, _ in reports:
                print(f"  pass {name}: {report or 'no change'}", file=sys.stderr)
            print(plan.text(), file=sys.stderr)
        return compiled

    def _amp_region(self, tensors):
        """The autocast region build() is captured in when amp is on: the device type of the
        first tensor argument (else of the first parameter), the configured dtype."""
        if self.config._amp == "off":
            return contextlib.nullcontext()
        from ..amp import autocast
        device = next((t.device.type for t in tensors), None)
        if device is None:
            device = next((p.device.type for m in self._modules.values() for p in m.parameters()), "cpu")
        dtype = _C.bfloat16 if self.config._amp == "bf16" else _C.float16
        if device == "cpu" and dtype is _C.float16:
            raise RuntimeError("nn.Graph amp: CPU autocast computes in bfloat16 only (as PyTorch's); use "
                               "config.enable_amp(True, dtype=plugflow.bfloat16) or optimizations.amp: bf16")
        return autocast(device, dtype=dtype)

    def _run_build(self, args):
        n = self.config._grad_acc_steps
        if n == 1:
            outputs = self.build(*args)
            self._check_backward()
            return outputs
        if not self._optimizers:
            raise RuntimeError("set_gradient_accumulation_steps needs an optimizer (add_optimizer)")
        chunks = [_split_batch(a, n) for a in args]
        results = [self.build(*(c[i] for c in chunks)) for i in range(n)]
        self._check_backward()
        for optim, _ in self._optimizers:
            for group in optim.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(1.0 / n)
        return _merge_micro_batches(results)

    def _check_backward(self):
        params = [p for optim, _ in self._optimizers for g in optim.param_groups for p in g["params"]]
        if self._optimizers and not any(p.grad is not None for p in params):
            raise RuntimeError("nn.Graph with an optimizer: build() must call backward() on its loss")

    def _scope_hooks(self, capture):
        names = {}
        for top, module in self._modules.items():
            for name, m in module.named_modules():
                names[id(m)] = f"{top}.{name}" if name else top
        stack = []

        def pre(module, _input):
            stack.append(names.get(id(module), type(module).__name__))
            capture.set_scope(stack[-1])

        def post(module, _input, _output):
            if stack:
                stack.pop()
            capture.set_scope(stack[-1] if stack else "")
        return [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]

    @contextlib.contextmanager
    def _scaled_backward(self):
        """With a grad scaler, backward() (Tensor.backward and autograd.backward) inside build()
        backpropagates loss * scale while capturing."""
        if self._grad_scaler is None:
            yield
            return
        from .. import autograd
        scale = self._grad_scaler._scale

        def scaled(t):
            return t * scale.reshape((1,) * t.dim())

        tensor_backward, autograd_backward = Tensor.backward, autograd.backward

        def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
            return tensor_backward(scaled(self), gradient, retain_graph, create_graph, inputs)

        def backward_fn(tensors, grad_tensors=None, *args, **kwargs):
            tensors = [scaled(t) for t in (tensors if isinstance(tensors, (list, tuple)) else [tensors])]
            return autograd_backward(tensors, grad_tensors, *args, **kwargs)

        Tensor.backward, autograd.backward = backward, backward_fn
        try:
            yield
        finally:
            Tensor.backward, autograd.backward = tensor_backward, autograd_backward

    def _capture_updates(self, capture):
        """Records each optimizer's update of the parameters that got a gradient, one tag per
        (optimizer, group) so each call can set the group's hyperparameters. With a grad scaler,
        first the gradients' unscale and inf/NaN check, the updates skipped on the flag, and the
        scale's update last."""
        scaler, found_inf = self._grad_scaler, self._found_inf
        updates = []
        with no_grad():
            if scaler is not None:
                found_inf.zero_()
                inv_scale = scaler._scale.double().reciprocal().float()
                grads = {}
                for optim, _ in self._optimizers:
                    for group in optim.param_groups:
                        for p in group["params"]:
                            if p.grad is not None:
                                grads.setdefault(p.grad.dtype, []).append(p.grad)
                for same_dtype in grads.values():
                    _C._amp_foreach_non_finite_check_and_unscale_(same_dtype, found_inf, inv_scale)
            for oi, (optim, _) in enumerate(self._optimizers):
                for gi, group in enumerate(optim.param_groups):
                    for pi, p in enumerate(group["params"]):
                        if p.grad is None:
                            continue
                        tag = f"opt{oi}.group{gi}.param{pi}"
                        kind = _record_update(optim, group, p, lambda suffix="": capture.set_tag(tag + suffix), found_inf)
                        updates.append((tag, optim, group, p, kind))
                        p.grad = None
            if scaler is not None:
                capture.set_tag("grad_scaler")
                _C._amp_update_scale_(scaler._scale, scaler._growth_tracker, found_inf, scaler._growth_factor,
                                      scaler._backoff_factor, scaler._growth_interval)
        return updates

    def _prepare_updates(self, compiled):
        """Sets each update's hyperparameters for this call: the group's current values (a
        scheduler or the user may change them between calls) and Adam's step count, read from
        the optimizer state that the replays advance (so eager steps in between count too)."""
        from ..optim import AdamW
        compiled.first_steps_taken = set()
        for tag, (optim, group, kind, params) in compiled.fused_groups.items():
            # One multi-tensor node: the group's hyperparameters; Adam's step counts are inputs.
            if kind == "sgd":
                self._set_sgd_attrs(compiled, tag, group)
                compiled.set_attr(tag, "first_step", [int(self._sgd_first_step_taken(p, compiled)) for p in params]
                                  if self._sgd_first_step else [0] * len(params))
            else:
                beta1, beta2 = group["betas"]
                for name, value in (("lr", group["lr"]), ("beta1", beta1), ("beta2", beta2), ("eps", group["eps"]),
                                    ("weight_decay", group["weight_decay"]), ("maximize", group["maximize"]),
                                    ("decoupled_weight_decay", isinstance(optim, AdamW))):
                    compiled.set_attr(tag, name, value)
        for tag, optim, group, p, kind in compiled.updates:
            if id(p) in compiled.fused_params:
                continue
            if kind == "sgd":
                self._set_sgd_attrs(compiled, tag, group)
                compiled.set_attr(tag, "first_step", self._sgd_first_step_taken(p, compiled))
            else:
                step = optim.state[p]["step"]
                beta1, beta2 = group["betas"]
                attrs = _C._adam_step_attrs(step=float(step.item()) + 1, lr=group["lr"], beta1=beta1, beta2=beta2,
                                            eps=group["eps"], weight_decay=group["weight_decay"],
                                            amsgrad=group["amsgrad"], maximize=group["maximize"],
                                            decoupled_weight_decay=isinstance(optim, AdamW))
                for name, value in attrs.items():
                    compiled.set_attr(tag, name, value)
        scaler = self._grad_scaler
        if scaler is not None:  # its factors may change between calls (set_growth_factor & co.)
            compiled.set_attr("grad_scaler", "growth_factor", float(scaler._growth_factor))
            compiled.set_attr("grad_scaler", "backoff_factor", float(scaler._backoff_factor))
            compiled.set_attr("grad_scaler", "growth_interval", int(scaler._growth_interval))

    @staticmethod
    def _set_sgd_attrs(compiled, tag, group):
        values = (float(group["lr"]), float(group["momentum"]), float(group["dampening"]),
                  float(group["weight_decay"]), bool(group["nesterov"]), bool(group["maximize"]))
        if compiled.group_values.get(tag) == values:  # the common case: nothing changed since the last call
            return
        compiled.group_values[tag] = values
        for name, value in zip(("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"), values):
            compiled.set_attr(tag, name, value)

    def _sgd_first_step_taken(self, p, compiled):
        """True once for a parameter whose momentum buffer the graph created: its first update
        is PyTorch's first step (the buffer becomes the gradient). Noted in the compiled plan,
        so that a call the grad scaler skips gives the first step back."""
        first = id(p) in self._sgd_first_step
        if first:
            self._sgd_first_step.discard(id(p))
            compiled.first_steps_taken.add(id(p))
        return first


def _module_tree(tops):
    """The modules under `tops`, each once, depth first (Module.modules() without its
    per-module generators: this runs on every call of a graph)."""
    out, seen = [], set()
    stack = list(tops)[::-1]
    while stack:
        m = stack.pop()
        if m is None or id(m) in seen:
            continue
        seen.add(id(m))
        out.append(m)
        stack.extend(list(m._modules.values())[::-1])
    return out


def _materialize_state(optim):
    """Creates the optimizer state a first eager step would, outside capture, so it is real
    memory shared with eager mode (capture makes virtual tensors). Returns the ids of the
    parameters whose SGD momentum buffer it created: their first update is PyTorch's first step."""
    from .._creation import tensor, zeros_like
    from ..optim import SGD
    created = set()
    for group in optim.param_groups:
        for p in group["params"]:
            state = optim.state[p]
            if isinstance(optim, SGD):
                if group["momentum"] != 0 and state.get("momentum_buffer") is None:
                    state["momentum_buffer"] = zeros_like(p)
                    created.add(id(p))
            elif len(state) == 0:
                state["step"] = tensor(0.0)
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = zeros_like(p)
    return created


def _record_update(optim, group, p, tag_next_op, found_inf=None):
    """Records p's update; tag_next_op() tags the fused update op for the per-call attributes
    (and tag_next_op(".step") Adam's step increment, which fuse_model_update reads). With
    found_inf (a grad scaler's flag), the update and Adam's step count do nothing on a call
    whose gradients had an inf/NaN."""
    from .._creation import full_like
    from ..optim import SGD, AdamW
    state = optim.state[p]
    if not (p.is_contiguous() and p.grad.is_contiguous()):
        raise RuntimeError("nn.Graph: parameters and gradients must be dense (contiguous) for the graph's update")
    if isinstance(optim, SGD):
        tag_next_op()
        _C._sgd_step_(p, p.grad, state.get("momentum_buffer"), lr=group["lr"], momentum=group["momentum"],
                      dampening=group["dampening"], weight_decay=group["weight_decay"], nesterov=group["nesterov"],
                      maximize=group["maximize"], first_step=False, found_inf=found_inf)
        return "sgd"
    beta1, beta2 = group["betas"]
    one = full_like(state["step"], 1)  # made before the tag: the increment must be the tagged node
    tag_next_op(".step")
    state["step"].add_(one)  # the eager step counter advances with every replay
    if found_inf is not None:
        state["step"].sub_(found_inf.reshape(()))  # ... but not on a skipped step
    tag_next_op()
    _C._adam_step_(p, p.grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"), step=1.0,
                   lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                   amsgrad=group["amsgrad"], maximize=group["maximize"],
                   decoupled_weight_decay=isinstance(optim, AdamW), found_inf=found_inf)
    return "adam"


def _split_batch(arg, n):
    if not isinstance(arg, Tensor):
        return [arg] * n
    if arg.dim() == 0 or arg.shape[0] % n != 0:
        raise ValueError(f"gradient accumulation over {n} steps needs every tensor argument's dim 0 to be a "
                         f"multiple of {n}, got shape {list(arg.shape)}")
    return list(arg.chunk(n, 0))


def _merge_micro_batches(results):
    first = results[0]
    if isinstance(first, Tensor):
        from .. import cat, stack
        return stack(results).mean(0) if first.dim() == 0 else cat(results, 0)
    if isinstance(first, (tuple, list)):
        return type(first)(_merge_micro_batches([r[i] for r in results]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _merge_micro_batches([r[k] for r in results]) for k in first}
    return first
