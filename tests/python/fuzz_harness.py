"""Randomized differential testing of plugflow against PyTorch 1.13.

Each call is one random expression (fuzz_ops.py: elementwise math, reductions, shape and
indexing ops, creation, nn.functional, matmul) over random inputs (fuzz_inputs.py: every dtype,
empty / 0-d / huge-view shapes, non-contiguous layouts, values and Python scalars at dtype
limits). It runs on both libraries with identical inputs and ends as one of:

  match       same dtype, shape and values (floats within a per-dtype tolerance, NaNs equal;
              everything else exact); the inputs are equal afterwards too (in-place writes), and
              so are the input gradients where the call asked for a backward pass;
  both-raise  both raised, plugflow with a sensible exception class (never SystemError, a
              pybind11 cast error or an AttributeError PyTorch did not raise);
  allowed     a documented intentional difference (ALLOWED below);
  mismatch    anything else: one side raised, or the values differ;
  crash       the worker process died (segfault, abort) during the call;
  hang        the call ran past the per-call timeout.

Calls run in a worker subprocess (torch and plugflow imported once, an address-space limit so
a runaway allocation fails instead of exhausting the machine); the parent restarts it after a
crash or hang and records the call. Every call is generated from (seed, index) alone:

  python fuzz_harness.py --seed S --calls N [--seconds T]    # a run: summary, replay commands
  python fuzz_harness.py --seed S --index I                  # replay one call in-process
"""

import argparse
import json
import math
import re
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_ADDRESS_SPACE = 8 << 30  # bytes: RLIMIT_AS of a worker
DEFAULT_TIMEOUT_S = 20.0
BATCH = 100
# Exception classes plugflow may raise for bad input (PyTorch raises these; NotImplementedError
# is a RuntimeError). Any other class must be the one PyTorch raised for the same call.
SENSIBLE_ERRORS = ("RuntimeError", "ValueError", "IndexError", "TypeError", "NotImplementedError")
# pybind11 internals leaking through a binding: never acceptable.
LEAKED_ERROR_TEXT = ("Unable to cast", "pybind11::", "returned a result with an error set",
                     "returned NULL without setting")


# ---- one call on one library ----------------------------------------------------------------

class Raised:
    def __init__(self, exc):
        self.kind = type(exc).__name__
        self.message = str(exc).strip().split("\n")[0][:300]

    def __repr__(self):
        return f"{self.kind}: {self.message}"


class Done:
    def __init__(self, result, inputs, grads, backward_error=None):
        self.result = result
        self.inputs = inputs
        self.grads = grads
        self.backward_error = backward_error


def _upstream_gradient(lib, result, index):
    """The same pseudo-random upstream gradient for both libraries (values from the call index)."""
    import numpy as np
    rng = np.random.default_rng(index)
    data = rng.uniform(-1, 1, size=tuple(result.shape)).astype("float64")
    return lib.from_numpy(data).to(result.dtype)


class Float64Torch:
    """torch, except that its reduced floating dtypes (and with every_dtype, all dtypes but
    int64) are float64: the reference run's lib."""

    def __init__(self, every_dtype):
        import torch
        self.torch = torch
        self.widened = {"float16", "bfloat16", "float32", "half"}
        if every_dtype:
            self.widened |= {"bool", "uint8", "int8", "int16", "int32"}

    def __getattr__(self, name):
        if name in self.widened:
            return self.torch.float64
        return getattr(self.torch, name)


def execute(call, lib, reference=None, contiguous=False, extra_env=None, strided=False):
    """Runs call with lib (torch or plugflow): Done or Raised. A reference run (torch only)
    builds floating inputs and dtype arguments as float64 ('floats': the higher-precision
    reference of order-sensitive ops) or every input ('all': the reference for dtypes PyTorch
    has no kernel for). contiguous passes contiguous copies of the inputs, strided copies with
    a stride of 2 in the last dim (same values, differentiable back to the leaves)."""
    import torch
    if reference:
        lib = Float64Torch(reference == "all")
    env = {"lib": lib, "F": lib.nn.functional, "math": math, **(extra_env or {})}
    leaves = {}
    try:
        for name, spec in call.specs.items():
            widen = spec.dtype in ("float16", "bfloat16", "float32") or (reference == "all" and spec.dtype != "float64")
            env[name], leaves[name] = spec.build(torch if reference else lib, "float64" if reference and widen else None)
            if contiguous:
                env[name] = env[name].contiguous()
            if strided:
                env[name] = lib.stack([env[name], env[name]], -1)[..., 0]
    except Exception as e:  # noqa: BLE001 - an input the library cannot build is an outcome
        return Raised(e)
    try:
        if call.stmt:
            exec(call.compiled, env)  # noqa: S102 - generated fuzz code
            result = None
        else:
            result = eval(call.compiled, env)  # noqa: S307
    except Exception as e:  # noqa: BLE001
        return Raised(e)
    grads, backward_error = {}, None
    wants_grad = [n for n, s in call.specs.items() if s.requires_grad]
    if wants_grad and isinstance(result, (torch.Tensor, _pf().Tensor)) and result.requires_grad:
        try:
            result.backward(_upstream_gradient(lib, result, call.index))
            grads = {n: leaves[n].grad for n in wants_grad}
        except Exception as e:  # noqa: BLE001
            backward_error = Raised(e)
    inputs = {n: env[n] for n in call.specs}
    return Done(result, inputs, grads, backward_error)


def _pf():
    import plugflow
    return plugflow


# ---- comparing results ------------------------------------------------------------------------

MAX_COMPARED_NUMEL = 1 << 20
TOLERANCE = {"float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2), "float32": (1.3e-5, 1e-5),
             "float64": (1e-10, 1e-10)}


def canon(x):
    """A library-neutral form of a result: tensors as (dtype, shape, numpy values or samples)."""
    import numpy as np
    import torch
    pf = _pf()
    if isinstance(x, (torch.Tensor, pf.Tensor)):
        x = x.detach()
        dtype = repr(x.dtype).split(".")[-1]
        shape = tuple(int(s) for s in x.shape)
        numel = int(np.prod(shape, dtype=object))
        if numel == 0:
            values = np.zeros(0)
        elif numel > MAX_COMPARED_NUMEL:
            # A huge view: compare a few elements picked by position.
            rng = np.random.default_rng(numel % 2**32)
            picks = [tuple(0 for _ in shape), tuple(s - 1 for s in shape)]
            picks += [tuple(int(rng.integers(s)) for s in shape) for _ in range(6)]
            values = np.array([float(x[p].float().item()) if dtype == "bfloat16" else x[p].item()
                               for p in picks])
        else:
            values = (x.float() if dtype == "bfloat16" else x).cpu().numpy()
        return ("tensor", dtype, shape, values)
    if isinstance(x, (tuple, list)):
        return ("seq", [canon(v) for v in x])
    if isinstance(x, (torch.dtype, pf.dtype)):
        return ("dtype", repr(x).split(".")[-1])
    if isinstance(x, (bool, int, float)):
        return ("number", type(x).__name__, x)
    if x is None or isinstance(x, str):
        return ("other", x)
    if isinstance(x, (torch.Size, pf.Size)):
        return ("seq", [canon(int(v)) for v in x])
    return ("other", type(x).__name__)


def _float_close(a, e, rtol, atol):
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if not np.array_equal(nan_a, nan_e):
        return "NaN positions differ"
    inf_a, inf_e = np.isinf(a), np.isinf(e)
    if not np.array_equal(np.where(inf_a, a, 0), np.where(inf_e, e, 0)):
        return "infinities differ"
    finite = ~(nan_a | inf_a | nan_e | inf_e)
    with np.errstate(over="ignore", invalid="ignore"):
        bad = finite & (np.abs(a - e) > atol + rtol * np.abs(e))
    if bad.any():
        i = np.flatnonzero(bad)[0]
        return f"values differ at flat index {i}: {a.reshape(-1)[i]!r} vs {e.reshape(-1)[i]!r} " \
               f"({int(bad.sum())} of {bad.size})"
    return None


def compare(actual, expected, tol_scale=1.0, where="result"):
    """None when the canonical plugflow result equals PyTorch's, else a reason."""
    import numpy as np
    if actual[0] != expected[0]:
        return f"{where}: plugflow gives a {actual[0]}, PyTorch a {expected[0]}"
    kind = actual[0]
    if kind == "tensor":
        _, dtype_a, shape_a, va = actual
        _, dtype_e, shape_e, ve = expected
        if dtype_a != dtype_e:
            return f"{where}: dtype {dtype_a} vs {dtype_e}"
        if shape_a != shape_e:
            return f"{where}: shape {shape_a} vs {shape_e}"
        if dtype_a in TOLERANCE:
            rtol, atol = TOLERANCE[dtype_a]
            why = _float_close(va, ve, rtol * tol_scale, atol * tol_scale)
            return f"{where}: {why}" if why else None
        if not np.array_equal(va, ve):
            diff = np.flatnonzero(np.asarray(va != ve).reshape(-1))
            i = diff[0] if diff.size else 0
            return f"{where}: values differ at flat index {i}: " \
                   f"{np.asarray(va).reshape(-1)[i]!r} vs {np.asarray(ve).reshape(-1)[i]!r} ({diff.size} of {va.size})"
        return None
    if kind == "seq":
        if len(actual[1]) != len(expected[1]):
            return f"{where}: {len(actual[1])} items vs {len(expected[1])}"
        for i, (a, e) in enumerate(zip(actual[1], expected[1])):
            why = compare(a, e, tol_scale, f"{where}[{i}]")
            if why:
                return why
        return None
    if kind == "number":
        if actual[1] != expected[1]:
            return f"{where}: {actual[1]} {actual[2]!r} vs {expected[1]} {expected[2]!r}"
        a, e = actual[2], expected[2]
        if isinstance(e, float):
            why = _float_close(a, e, 1.3e-5 * tol_scale, 1e-6 * tol_scale)
            return f"{where}: {why}" if why else None
        return None if a == e else f"{where}: {a!r} vs {e!r}"
    return None if actual == expected else f"{where}: {actual[1]!r} vs {expected[1]!r}"


# ---- documented intentional differences ----------------------------------------------------
#
# Each entry: (name, why, predicate(call, torch_outcome, plugflow_outcome) -> bool). Only
# differences where plugflow's behaviour is deliberate and documented belong here; a
# predicate is as narrow as the difference. Three more are decided elsewhere: judge() accepts
# floating values equal to PyTorch's own on float64 inputs ("float64-reference") or on
# contiguous copies of the inputs ("torch-layout-bug"); run() reruns a call that crashes or
# hangs PyTorch itself (torch.remainder(INT_MIN, -1) is SIGFPE in 1.13) on plugflow alone and
# counts it as allowed ("torch-crash") when plugflow answers it.

def _torch_lacks_kernel(call, t, p):
    # (tensordot of int16/int32 too: "expected scalar type Long but found Int")
    # PyTorch 1.13 has no CPU kernel for some (op, dtype) pairs (e.g. float16 matmul, 'Half'
    # cumprod) and raises "... not implemented for 'Half'"; plugflow computes them. Accepted
    # only when plugflow's values equal PyTorch's own result on float64 inputs (checked by
    # the caller via the reference run), so this excuses the error, never wrong numbers.
    return isinstance(t, Raised) and isinstance(p, Done) and (
        "not implemented for '" in t.message or
        (call.code.startswith("lib.tensordot(") and re.match(r"expected scalar type Long but found", t.message)))


def _torch_refuses_partial_overlap(call, t, p):
    # PyTorch refuses an in-place op whose input partially overlaps its output; plugflow reads a
    # private copy of such an input first (docs/design.md, "Overlapping memory"), so
    # `a[1:].add_(a[:-1])` computes what it says.
    return isinstance(t, Raised) and "refer to a single memory location" in t.message and \
        "some elements of the input tensor" in t.message and isinstance(p, Done)


def _several_ellipses(call, t, p):
    # PyTorch 1.13 reads every Ellipsis after the first in an index as empty (x[..., 0, ...] is
    # x[..., 0]); plugflow refuses the ambiguous index with IndexError, as numpy does.
    return isinstance(p, Raised) and p.kind == "IndexError" and "single ellipsis" in p.message and \
        call.code.count("...") > 1


def _write_through_shared_elements(call, t, p):
    # PyTorch 1.13 lets index_put_ / masked_fill_ / index_fill_ (deprecated, with a warning) and
    # fill_ write into a tensor whose elements share memory (an expand()ed one), setitem
    # included; plugflow refuses them as PyTorch refuses every other in-place op there.
    # threshold_ (F.threshold(inplace=True)) writes too: its result is the same whatever the
    # order; tril_/triu_ too, where it is not.
    return isinstance(t, Done) and isinstance(p, Raised) and "more than one element of the written-to tensor" in \
        p.message and (call.family in ("setitem", "index_op", "ternary") or
                       re.search(r"F\.threshold\(|\.tril_\(|\.triu_\(", call.code) is not None) and \
        any(s.layout[0] == "expanded" for s in call.specs.values())


# What PyTorch 1.13 skips for an input without elements (it returns before checking when there
# is nothing to compute) and plugflow checks whatever the element count, so that a call fails the
# way it fails for non-empty inputs. Each pattern is a check plugflow makes for non-empty inputs
# too; any other error on an empty input is a mismatch.
EMPTY_INPUT_CHECKS = re.compile("|".join([
    # a kernel for the dtype: PyTorch dispatches to none (softmax of int8, avg_pool2d of int64)
    r"\"\w+\" not implemented for '\w+'",
    # operands whose dtypes must agree (mm of float16 and int64, masked_fill with an int mask)
    r"must have the same dtype|to have the same dtype|expected scalar type \w+ but found \w+",
    r"only supports boolean masks",
    # index values and dims (an index into an empty dim, a dim the tensor lacks, a mask of 2s)
    r"out of bounds for dimension|Dimension out of range|Mask tensor can take 0 and 1 values only",
    # convolution and pooling parameters checked against the batch-independent sizes
    r"output padding must be smaller|Output size is too small|Calculated output size",
    # a number that does not fit the tensor's dtype (index_add's alpha), or whose type the
    # result cannot take (a bool baddbmm's alpha = 2)
    r"cannot be converted to type \w+ without overflow|can't be cast to the desired output type",
]))


def _empty_input_checks(call, t, p):
    # For an empty input or result, PyTorch returns before checking its other arguments; plugflow
    # raises the check's usual error (EMPTY_INPUT_CHECKS lists the checks).
    if not (isinstance(t, Done) and isinstance(p, Raised) and p.kind in SENSIBLE_ERRORS) or \
            not EMPTY_INPUT_CHECKS.search(p.message):
        return False
    result = canon(t.result)
    return any(0 in s.shape for s in call.specs.values()) or (result[0] == "tensor" and 0 in result[2])


def _plugflow_lacks_kernel(call, t, p):
    # plugflow's CPU plugin has no kernel for some (op, dtype) pairs PyTorch computes (bfloat16
    # convolution, normalization and pooling, int64 average pooling, float16 3-d reflection
    # padding, ...): the dispatcher says so with NotImplementedError naming the op and dtype,
    # the others with PyTorch's '"avg_pool2d" not implemented for 'int64''. Counted per pair.
    return isinstance(t, Done) and isinstance(p, Raised) and (
        (p.kind == "NotImplementedError" and p.message.startswith("no kernel for op ")) or
        (p.kind == "RuntimeError" and re.match(r'"\w+" not implemented for \'\w+\'', p.message) is not None))


def _torch_bug(call, t, p):
    # Errors PyTorch 1.13 raises by mistake, where plugflow answers (an empty result for empty
    # inputs): an internal assert (addcmul_ with mixed dtypes on empty tensors); convolution of
    # an empty batch with a non-contiguous weight ("view size is not compatible"); diag of an
    # empty or too-narrow matrix with an offset (a negative size: "numel: integer
    # multiplication overflow").
    # isclose/allclose with equal_nan=True and an `other` that broadcasts self to a larger shape,
    # and logsumexp(dim=()) without keepdim, write a result of the wrong shape in place ("output
    # with shape [...] doesn't match the broadcast shape").
    if not (isinstance(t, Raised) and isinstance(p, Done)):
        return False
    return "INTERNAL ASSERT FAILED" in t.message or \
        (call.family == "conv" and "view size is not compatible" in t.message) or \
        (call.code.startswith("lib.diag(") and "numel: integer multiplication overflow" in t.message) or \
        (re.match(r"lib\.(isclose|allclose|logsumexp)\(", call.code) is not None and
         "doesn't match the broadcast shape" in t.message)


def _torch_aminmax_0d_keepdim(call, t, p):
    # PyTorch 1.13's aminmax of a 0-d tensor with keepdim=True resizes its own 0-d outputs to
    # [1] (warning "An output with one or more elements was resized"); amin, amax and plugflow
    # keep the 0-d shape.
    return "aminmax" in call.code and "keepdim=True" in call.code and isinstance(p, Done) and \
        all(s.shape == () for s in call.specs.values())


def _softshrink_nan(call, t, p):
    # PyTorch 1.13's softshrink turns NaN into 0 (both its comparisons are false); plugflow
    # keeps NaN, as hardshrink, threshold and later PyTorch releases do. Only NaN positions may
    # differ, and only where the input is NaN.
    import numpy as np
    import torch
    if "F.softshrink(" not in call.code or not isinstance(p, Done):
        return False
    if isinstance(t, Raised):  # no kernel for the dtype: PyTorch's float64 result
        t = execute(call, torch, reference="all")
        if isinstance(t, Raised):
            return False
    x, a, e = canon(t.inputs["t0"])[3], canon(p.result)[3], _cast_like(canon(t.result), canon(p.result))[3]
    with np.errstate(invalid="ignore"):
        differ = ~((a == e) | (np.isnan(a) & np.isnan(e)) | (np.abs(a - e) <= 1e-2 * np.abs(e) + 1e-2))
    return bool(differ.any()) and bool(np.all(np.isnan(x[differ]) & np.isnan(a[differ]) & (e[differ] == 0)))


def _histc_nan(call, t, p):
    # PyTorch 1.13's histc counts NaN into the first bin (a NaN cast to a bin index); its
    # documentation says NaN is ignored, as plugflow does. Accepted when plugflow's counts are
    # PyTorch's on the input without its NaN (in float64 where PyTorch has no kernel).
    import torch
    if not call.code.startswith("lib.histc(t0") or not isinstance(p, Done):
        return False
    x = call.specs["t0"].build(torch, "float64" if isinstance(t, Raised) else None)[0].reshape(-1)
    if not bool(x.isnan().any()):
        return False
    expected = eval(call.compiled, {"lib": torch, "t0": x[~x.isnan()]})  # noqa: S307
    return compare(canon(p.result), _cast_like(canon(expected), canon(p.result)), call.tol) is None


def _torch_var_backward_over_no_dims(call, t, p):
    # PyTorch 1.13's var/std with dim=() reduce every dim, but their backward then divides by 1
    # instead of the element count (N times too large). Accepted when plugflow's gradients are
    # PyTorch's for dim=None, which is the same reduction.
    import torch
    if not re.match(r"lib\.(var|std)(_mean)?\(t0, \(\)", call.code) or not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    fixed = execute(call.with_code(call.code.replace("(t0, ()", "(t0, None", 1)), torch)
    return isinstance(fixed, Done) and not _compare_done(call, fixed, p)


def _hardsigmoid_float64_grad(call, t, p):
    # PyTorch 1.13's hardsigmoid backward multiplies by 1/6 rounded to float32 even for float64
    # (a relative 3e-8); plugflow uses 1/6 in double. Only float64 gradients may differ, by that.
    if "F.hardsigmoid(" not in call.code or not (isinstance(t, Done) and isinstance(p, Done)) or not t.grads:
        return False
    if compare(canon(p.result), canon(t.result), call.tol):
        return False
    return all(compare(canon(p.grads[n]), canon(g), 1e3) is None for n, g in t.grads.items() if g is not None)


def _torch_lacks_derivative(call, t, p):
    # PyTorch 1.13 has no derivative for floor_divide, nor for remainder's divisor when the
    # dividend is a number (5 % t): backward raises. plugflow differentiates them (floor_divide
    # as floor, zero; remainder as a - floor(a / b) * b). The forward values must match.
    return isinstance(t, Done) and isinstance(p, Done) and t.backward_error is not None and \
        re.search(r"derivative for aten::(floor_divide|remainder) is not implemented", t.backward_error.message) and \
        p.backward_error is None and not compare(canon(p.result), canon(t.result), call.tol)


def _torch_setitem_0d_slice(call, t, p):
    # PyTorch 1.13's t[slice] = v on a 0-d tensor ignores the slice and writes v (t[:0] = 1
    # too); its t[slice] raises "slice() cannot be applied to a 0-dim tensor", as plugflow does
    # for both.
    return call.stmt and isinstance(t, Done) and isinstance(p, Raised) and p.kind == "IndexError" and \
        call.specs["t0"].shape == () and re.match(r"t0\[[^\]]*:", call.code) is not None


def _torch_negated_int64_min_alpha(call, t, p):
    # PyTorch 1.13's sub(a, b, alpha) is add(a, b, -alpha): alpha = -2**63 negates to itself
    # in int64, so it adds where it should subtract; plugflow computes a - alpha * b.
    return re.search(r"\b(sub|subtract)\(.*alpha=-9223372036854775808", call.code) is not None and \
        isinstance(t, Done) and isinstance(p, Done)


def _torch_integer_linspace(call, t, p):
    # PyTorch 1.13's integral linspace steps inside each SIMD vector by the step truncated to an
    # integer (often 0), so runs of equal values replace the progression. Accepted when
    # plugflow's values are PyTorch's scalar formula: start + step * i (first half), end - step *
    # (steps - 1 - i) (second half), step = (end - start) / (steps - 1) in double, truncated.
    import numpy as np
    m = re.match(r"lib\.linspace\(([^,]+), ([^,]+), (\d+), dtype=lib\.(u?int\d+)\)$", call.code)
    if not m or not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    dtype = m.group(4)
    start, end = (float(np.array(float(eval(v))).astype(dtype)) for v in m.group(1, 2))  # noqa: S307
    steps = int(m.group(3))
    step = (end - start) / (steps - 1)
    i = np.arange(steps)
    values = np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))
    expected = ("tensor", dtype, (steps,), np.trunc(values).astype(dtype))
    return compare(canon(p.result), expected) is None


def _empty_shape_overflow(call, t, p):
    # plugflow refuses an empty shape whose other sizes multiply past int64 (kernels multiply
    # sub-shapes; docs/design.md, checked sizes); PyTorch makes the empty tensor.
    return isinstance(t, Done) and isinstance(p, Raised) and "multiplication overflow with sizes=" in p.message


def _torch_index_select_0d(call, t, p):
    # PyTorch 1.13's index_select of a 0-d tensor with several indices writes past its 0-d
    # result (heap corruption; sometimes a crash later) instead of raising; plugflow raises
    # IndexError "Index to scalar can have only 1 value".
    return isinstance(p, Raised) and "Index to scalar can have only 1 value" in p.message and isinstance(t, Done)


NUMPY_UNARY = {"exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p", "log2": "log2", "log10": "log10",
               "sin": "sin", "cos": "cos", "tan": "tan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
               "asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh",
               "atanh": "arctanh", "sqrt": "sqrt"}


# t0 to the power of a number: function, method, operator, in place.
POW_BY_NUMBER = re.compile(r"lib\.pow\(t0, (?P<e1>[^,()]+)\)|t0\.pow_?\((?P<e2>[^,()]+)\)|t0 \*\*=? (?P<e3>[^,()]+)")


def _torch_vectorized_math(call, t, p):
    # PyTorch 1.13's vectorized (Sleef) math is wrong near a dtype's limits: log1p of x above
    # ~1e307 (float64) or ~1e38 (float32) is inf, and so is pow(float64 max, 1) (`t **= True`).
    # Accepted when plugflow's values (t0 afterwards for `**=`) are numpy's float64 function of
    # the same input, rounded to the result dtype.
    import numpy as np
    import torch
    if not isinstance(p, Done):
        return False
    m = re.match(r"(?:lib\.(\w+)\(t0\b|t0\.(\w+?)_?\()", call.code)
    name = m and (m.group(1) or m.group(2))
    power = POW_BY_NUMBER.fullmatch(call.code)
    exponent = power and (power.group("e1") or power.group("e2") or power.group("e3"))
    if power and exponent == "t1":
        y = call.specs["t1"].build(torch, "float64")[0].detach().numpy()

        def fn(x):
            return np.power(x, y)
    elif power:
        def fn(x):
            return np.power(x, float(eval(exponent)))  # noqa: S307
    elif name in NUMPY_UNARY and not ("t1" in call.code and "out=t1" not in call.code):
        fn = getattr(np, NUMPY_UNARY[name])
    else:
        return False
    x = call.specs["t0"].build(torch, "float64")[0].detach().numpy()
    with np.errstate(all="ignore"):
        expected = ("tensor", "float64", tuple(x.shape), fn(x))
    actual = canon(p.inputs["t0"] if call.stmt else p.result)
    if actual[0] != "tensor" or actual[1] not in TOLERANCE:
        return False
    return compare(actual, _cast_like(expected, actual), call.tol) is None


def _torch_pow_exponent_in_double(call, t, p):
    # PyTorch 1.13's pow of a float32 tensor by a number takes the number as a double in its
    # scalar loop (the elements after the last full vector) and as a float in its vector loop:
    # an exponent such as 1e-310 is 0 in one and not in the other (0 ** 1e-310 is 0, 0 ** 0 is
    # 1). plugflow takes the exponent in the tensor's dtype everywhere, as the vector loop does.
    # Accepted when plugflow's values are numpy's power with the exponent rounded to the dtype.
    import numpy as np
    import torch
    power = POW_BY_NUMBER.fullmatch(call.code)
    exponent = power and (power.group("e1") or power.group("e2") or power.group("e3"))
    if not power or exponent == "t1" or not isinstance(p, Done):
        return False
    actual = canon(p.inputs["t0"] if call.stmt or "pow_(" in call.code else p.result)
    if actual[0] != "tensor" or actual[1] not in ("float32", "float16", "bfloat16"):
        return False
    dtype = np.float32
    x = call.specs["t0"].build(torch, "float64")[0].detach().numpy().astype(dtype)
    with np.errstate(all="ignore"):
        expected = np.power(x, dtype(float(eval(exponent))))  # noqa: S307
    return compare(actual, _cast_like(("tensor", "float32", tuple(x.shape), expected), actual), call.tol) is None


def _torch_float32_loss_accumulator(call, t, p):
    # A loss reduced over elements whose float32 terms are huge: PyTorch's float32 accumulator
    # overflows (+inf + -inf = NaN), plugflow's double one does not (-inf). Accepted when
    # plugflow's result is PyTorch's own elementwise loss (reduction='none') summed in float64,
    # then averaged for 'mean', in the result dtype.
    import numpy as np
    import torch
    m = re.fullmatch(r"(F\.\w+\(.*?)(?:, reduction='(mean|sum)')?\)", call.code)
    if call.family != "loss" or not m or not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    if not isinstance(t.result, torch.Tensor) or t.result.dim() != 0 or t.result.dtype not in (torch.float16,
                                                                                             torch.bfloat16,
                                                                                             torch.float32):
        return False
    elementwise = execute(type(call)(call.family, m.group(1) + ", reduction='none')", call.specs, call.index), torch)
    if not isinstance(elementwise, Done):
        return False
    terms = elementwise.result.detach().double()
    total = terms.sum() if m.group(2) == "sum" else terms.mean()
    expected = total.to(t.result.dtype).numpy()
    actual = canon(p.result)
    return actual[0] == "tensor" and compare(actual, ("tensor", actual[1], (), np.asarray(expected, np.float64)),
                                             call.tol) is None


def _index_add_alpha_overflow(call, t, p):
    # index_add with alpha where alpha * source overflows the dtype: PyTorch's n-d kernel adds each
    # slice with a fused multiply-add (an exact alpha * source beside an infinite self gives that
    # infinity), plugflow multiplies first (inf - inf = NaN). Accepted when the NaNs that differ
    # are where the rounded products overflow.
    import numpy as np
    if not (re.search(r"\bindex_add_?\(", call.code) and "alpha=" in call.code and isinstance(t, Done) and
            isinstance(p, Done)):
        return False
    m = re.search(r"alpha=([-0-9.e+]+)", call.code)
    source = call.specs.get("t2")
    if m is None or source is None or source.dtype not in ("float16", "bfloat16", "float32"):
        return False
    limit = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}[source.dtype]
    return bool(np.any(np.abs(np.asarray(source.data, np.float64) * float(m.group(1))) > limit))


def _torch_addmv_empty_matrix(call, t, p):
    # PyTorch 1.13's addmv with a matrix of no elements computes beta * self with mul_out into
    # its result, which resizes the result to self's shape: addmv(tensor(2.), zeros(5, 0),
    # zeros(0)) is 0-d instead of 5 elements (an empty matrix with 5 rows gives a 0-d result
    # too). plugflow's result has the matrix's row count. Accepted when it is PyTorch's value
    # broadcast to that shape.
    import numpy as np
    if not call.code.startswith("lib.addmv(t0, t1, t2") or 0 not in call.specs["t1"].shape or \
            not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    a, e = canon(p.result), canon(t.result)
    if a[0] != "tensor" or e[0] != "tensor" or a[1] != e[1] or e[2] != tuple(call.specs["t0"].shape) or \
            a[2] != (call.specs["t1"].shape[0],):
        return False
    try:
        expected = np.broadcast_to(e[3], a[2])
    except ValueError:
        return False
    return compare(a, ("tensor", e[1], a[2], expected), call.tol) is None


def _torch_baddbmm_beta_zero(call, t, p):
    # PyTorch 1.13's baddbmm kernel for small products (contraction x rows x columns < 400)
    # multiplies the result's previous contents by beta even when beta is 0: NaN in self, or in
    # the uninitialized memory it starts from, leaks into the result (which varies from run to
    # run). With beta = 0 the result is alpha * (batch1 @ batch2) (PyTorch's documentation:
    # "nan and inf in input will be ignored"). Accepted when plugflow's values are that product,
    # computed by PyTorch's bmm on float64 inputs; this covers the dtypes PyTorch has no
    # baddbmm kernel for, whose float64 reference has the same bug.
    import torch
    m = re.fullmatch(r"lib\.baddbmm\(t0, t1, t2, beta=0(?:\.0)?(?:, alpha=([^,()]+))?\)", call.code)
    if not m or not isinstance(p, Done) or not (
            isinstance(t, Done) or "not implemented for '" in t.message):
        return False
    alpha = float(eval(m.group(1))) if m.group(1) else 1.0  # noqa: S307
    a, b = (call.specs[n].build(torch, "float64")[0].detach() for n in ("t1", "t2"))
    expected = (alpha * torch.bmm(a, b)).numpy()
    actual = canon(p.result)
    return compare(actual, _cast_like(("tensor", "float64", expected.shape, expected), actual),
                   4 * call.tol * _input_precision(call, p.result)) is None


def _torch_bfloat16_histc(call, t, p):
    # PyTorch 1.13's bfloat16 histc accumulates its counts in bfloat16, where 256 + 1 is 256: a
    # bin stops counting (several threads' partial counts add up to 512 and the like). plugflow
    # counts exactly and rounds once. Accepted when plugflow's counts are PyTorch's histc of the
    # same values as float32 (NaN left out), rounded to bfloat16.
    import torch
    if not call.code.startswith("lib.histc(t0, ") or call.specs["t0"].dtype != "bfloat16" or \
            not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    as_float = execute(call.with_code(call.code.replace(  # (without NaN, which PyTorch counts: histc-nan)
        "lib.histc(t0, ", "lib.histc(t0.float()[~t0.isnan()], ", 1)), torch)
    return isinstance(as_float, Done) and \
        compare(canon(p.result), _cast_like(canon(as_float.result), canon(p.result))) is None


def _torch_clamp_broadcast_backward(call, t, p):
    # PyTorch 1.13's clamp with tensor bounds that broadcast a requires-grad input to a larger
    # shape fails in backward ("output with shape [] doesn't match the broadcast shape [2]": its
    # formula writes the input's gradient in place). plugflow differentiates it. Accepted when
    # the forward values match and plugflow's gradients are PyTorch's for the input expanded
    # to the broadcast shape first.
    import numpy as np
    import torch
    if not re.match(r"(lib\.(clamp|clip)\(t0, |t0\.(clamp|clip)\()", call.code) or \
            not (isinstance(t, Done) and isinstance(p, Done)) or t.backward_error is None or \
            "doesn't match the broadcast shape" not in t.backward_error.message or \
            compare(canon(p.result), canon(t.result), call.tol):
        return False
    shape = tuple(np.broadcast_shapes(*(tuple(s.shape) for s in call.specs.values())))
    code = re.sub(r"\bt0\b", f"t0.expand({shape})", call.code, count=1)
    expanded = execute(call.with_code(code), torch)
    # (only the gradients: an expanded 0-d input no longer loses type promotion to the bounds)
    return isinstance(expanded, Done) and expanded.backward_error is None and set(expanded.grads) == set(p.grads) and \
        not any(compare(canon(p.grads[n]), canon(g), 4 * call.tol * _gradient_precision(call, p.result, p.grads[n]))
                for n, g in expanded.grads.items() if g is not None)


def _torch_bool_prod(call, t, p):
    # PyTorch 1.13's prod(dtype=torch.bool) of a few hundred elements or more is True although
    # an element is 0 (its bool reduction combines partial results wrongly); for fewer it is
    # right. Accepted when plugflow's result is "every element nonzero", PyTorch's all(t0 != 0)
    # over the same dims.
    import torch
    if not call.code.startswith("lib.prod(t0") or ", dtype=lib.bool)" not in call.code or \
            not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    code = call.code.replace(", dtype=lib.bool)", ")").replace("lib.prod(t0", "lib.all(t0 != 0", 1)
    every = execute(call.with_code(code), torch)
    return isinstance(every, Done) and not _compare_done(call, every, p)


def _torch_invalid_gradient_shape(call, t, p):
    # PyTorch 1.13's std / var backward over all elements of a one-element tensor (unbiased: 0 /
    # 0) fails ("StdBackward0 returned an invalid gradient at index 0 - got [] but expected shape
    # compatible with [1]"). Accepted when plugflow's results and gradients are PyTorch's for the
    # same reduction over dim 0 of t0.reshape(-1).
    import torch
    m = re.match(r"lib\.(std|var)(_mean)?\(t0(?=[,)])", call.code)
    if not m or not (isinstance(t, Done) and isinstance(p, Done)) or t.backward_error is None or \
            "returned an invalid gradient at index" not in t.backward_error.message:
        return False
    over_dim = execute(call.with_code(call.code.replace(m.group(0), m.group(0) + ".reshape(-1), 0", 1)), torch)
    return isinstance(over_dim, Done) and not _compare_done(call, over_dim, p)


def _torch_empty_product_integer_beta(call, t, p):
    # PyTorch 1.13's addmm / addmv / addbmm / baddbmm of integer tensors whose product is empty
    # (k = 0 or no batches) multiply self by beta as a float number (or in self's floating dtype),
    # so a fractional beta raises "result type Float can't be cast to the desired output type
    # Int"; with a non-empty product the
    # same call truncates beta to the integer dtype. plugflow truncates either way. Accepted
    # when plugflow's result is PyTorch's for the integer beta.
    import torch
    m = re.match(r"lib\.(addmm|addmv|addbmm|baddbmm)\(t0, t1, t2.*\bbeta=([-\d.e+]+)", call.code)
    if not m or not (isinstance(t, Raised) and isinstance(p, Done)) or "can't be cast to the desired output type" \
            not in t.message or not any(0 in s.shape for s in call.specs.values()):
        return False
    beta = float(m.group(2))
    truncated = execute(call.with_code(call.code.replace(f"beta={m.group(2)}", f"beta={int(beta)}", 1)), torch)
    return isinstance(truncated, Done) and not _compare_done(call, truncated, p)


def _torch_gemv_zero_alpha(call, t, p):
    # With alpha=0, PyTorch 1.13's addmm/baddbmm/addbmm multiply the product by 0 (a NaN or
    # infinity in it gives NaN), except where the product has a single column or row and goes
    # to BLAS gemv, which ignores it; plugflow's addmm family always multiplies. addmv is the
    # reverse: plugflow ignores the product as BLAS gemv does for float32 and float64, while
    # PyTorch's own float16 / bfloat16 gemv multiplies. Only such NaN may differ.
    import numpy as np
    if not re.search(r"alpha=0[,)]", call.code) or call.family != "matmul" or \
            not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    a, e = canon(p.result), canon(t.result)
    if a[0] != "tensor" or a[1:3] != e[1:3] or a[1] not in TOLERANCE:
        return False
    one_nan = np.isnan(a[3]) != np.isnan(e[3])
    if "addmv" not in call.code and (np.isnan(e[3]) & ~np.isnan(a[3])).any():
        return False
    same = ("tensor", a[1], a[2], np.where(one_nan, 0, a[3]))
    return bool(one_nan.any()) and compare(same, ("tensor", e[1], e[2], np.where(one_nan, 0, e[3])), call.tol) is None


def _torch_integer_backward(call, t, p):
    # PyTorch 1.13 computes some backward formulas in an integer operand's dtype: atan2's
    # a / (a * a + b * b) squares an int16 or int64 b in its dtype (it wraps). Accepted when
    # only gradients differ and plugflow's equal PyTorch's with the integer inputs given as
    # float64 (only the gradients: an int64 input is not exact as float64).
    import torch
    if not (isinstance(t, Done) and isinstance(p, Done)) or not t.grads:
        return False
    if compare(canon(p.result), canon(t.result), call.tol) or not any(
            s.dtype not in TOLERANCE for s in call.specs.values()):
        return False
    ref = execute(call, torch, reference="all")
    if not isinstance(ref, Done) or ref.backward_error is not None or p.backward_error is not None:
        return False
    for name, g in ref.grads.items():
        pg = p.grads.get(name)
        if (g is None) != (pg is None) or g is not None and compare(
                canon(pg), _cast_like(canon(g), canon(pg)), 4 * call.tol, f"grad of {name}"):
            return False
    return True


def _unique_dim_lexicographic(x, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """torch.unique along dim through the 2-d (slices, elements) view, where PyTorch orders the
    slices lexicographically."""
    import torch
    moved = x.movedim(dim, 0).contiguous()
    values, inverse, counts = torch.unique(moved.reshape(moved.shape[0], -1), sorted=sorted, return_inverse=True,
                                           return_counts=True, dim=0)
    values = values.reshape((values.shape[0],) + tuple(moved.shape[1:])).movedim(0, dim)
    out = (values,) + ((inverse,) if return_inverse else ()) + ((counts,) if return_counts else ())
    return out if len(out) > 1 else values


def _torch_unique_dim_order(call, t, p):
    # PyTorch 1.13's unique(dim=d) of a tensor of more than 2 dims orders its slices by a
    # comparison that is not lexicographic over the slices (unique of the same data moved to
    # dim 0 and flattened to 2-d is). Accepted when plugflow's result is that lexicographic one.
    import torch
    if not call.code.startswith("lib.unique(t0") or "dim=" not in call.code or not isinstance(p, Done):
        return False
    lex = execute(call.with_code(call.code.replace("lib.unique(", "_unique_dim_lexicographic(", 1)), torch,
                  extra_env={"_unique_dim_lexicographic": _unique_dim_lexicographic})
    return isinstance(lex, Done) and not compare(canon(p.result), canon(lex.result))


def _torch_unchecked_bfloat16_conv_transpose(call, t, p):
    # PyTorch 1.13's bfloat16 transposed convolution does not check the output size it computes
    # (an output length of 0 still gives a result) nor its output padding against the stride;
    # its float32 one raises, as plugflow does.
    import torch
    checks = ("Output size is too small", "output padding must be smaller than either stride or dilation")
    if call.family != "conv" or not isinstance(t, Done) or not isinstance(p, Raised) or \
            not any(c in p.message for c in checks):
        return False
    as_float = execute(call, torch, reference="floats")
    return isinstance(as_float, Raised) and as_float.message == p.message


def _torch_bfloat16_conv_transpose_channels(call, t, p):
    # PyTorch 1.13's bfloat16 transposed convolution (its mkldnn path) refuses some valid
    # problems with a channel-count or kernel-size error about the *input* of the forward
    # convolution it reuses, or returns a result of another shape (4 x 4 for 18 x 15); its
    # float32 call computes them. plugflow's bfloat16 result must then equal that float32
    # result within bfloat16 rounding.
    import numpy as np
    import torch
    forward_checks = ("channels, but got", "Kernel size can't be greater than actual input size")
    if call.family != "conv" or "conv_transpose" not in call.code or not isinstance(p, Done):
        return False
    refused = isinstance(t, Raised) and any(c in t.message for c in forward_checks)
    if not refused and not isinstance(t, Done):
        return False
    ref = execute(call, torch, reference="floats")
    if isinstance(ref, Raised) or not refused and canon(t.result)[2] == canon(ref.result)[2]:
        return False
    a, e = canon(p.result)[3].astype(np.float64), canon(ref.result)[3].astype(np.float64)
    if a.shape != e.shape:
        return False
    scale = max(1.0, float(np.nanmax(np.abs(e)))) if e.size and not np.all(np.isnan(e)) else 1.0
    # A NaN in the operands may reach more outputs in oneDNN's bfloat16 kernel than in the
    # float32 reference (it computes on zero-padded channel blocks, 0 * NaN = NaN): a known
    # difference (docs/testing.md), accepted only when an operand holds NaN.
    nan_operands = any(np.isnan(canon(v)[3].astype(np.float64)).any() for v in ref.inputs.values()
                       if canon(v)[3].dtype.kind == "f")
    with np.errstate(invalid="ignore"):
        ok = (a == e) | (np.isnan(a) & np.isnan(e)) | (np.abs(a - e) <= 2e-2 * scale) | (np.isnan(a) & nan_operands)
    return bool(np.all(ok))


def _empty_strides(call, t, p):
    # The strides of a tensor without elements address nothing; PyTorch's depend on how the
    # tensor was made (a clone of an empty one may get all zeros), plugflow's are contiguous. So
    # does the storage offset of a view into one (a slice's offset is start * stride).
    return re.fullmatch(r"t0\.(stride|storage_offset)\(\)", call.code) is not None and \
        0 in call.specs["t0"].shape and isinstance(t, Done) and isinstance(p, Done) and \
        (call.code.endswith("storage_offset()") or len(t.result) == len(p.result))


def _torch_bool_exponent_backward(call, t, p):
    # PyTorch 1.13's pow backward computes exponent - 1 in the exponent's dtype, and logaddexp's
    # other - self in a bool operand's, which fails for a bool ("Subtraction ... with a bool
    # tensor is not supported"); plugflow differentiates it (as the operand converted to the
    # result's dtype). The forward values must match.
    return isinstance(t, Done) and isinstance(p, Done) and t.backward_error is not None and \
        "with a bool tensor is not supported" in t.backward_error.message and p.backward_error is None and \
        any(s.dtype == "bool" for s in call.specs.values()) and \
        re.search(r"\*\*|pow\(|logaddexp\(", call.code) is not None and \
        not compare(canon(p.result), canon(t.result), call.tol)


# Activations whose PyTorch 1.13 vectorized backward picks another branch than its scalar loop
# for NaN or a boundary value (hardswish at 3: slope 1 vectorized, 1.5 scalar; hardtanh / relu6
# / hardshrink at NaN: 0 vectorized, the gradient scalar; elu / selu / celu at NaN).
SCALAR_LOOP_BACKWARD = re.compile(r"F\.(hardswish|hardtanh|relu6|elu|selu|celu|hardshrink|softshrink)\(")


def _torch_vectorized_backward(call, t, p):
    # plugflow follows PyTorch's scalar loop (its documented formula). Accepted when the forward
    # values match and plugflow's gradients equal PyTorch's computed on strided inputs (which
    # TensorIterator runs through the scalar loop).
    import torch
    if not SCALAR_LOOP_BACKWARD.match(call.code) or not (isinstance(t, Done) and isinstance(p, Done)) or \
            not t.grads or compare(canon(p.result), canon(t.result), call.tol):
        return False
    scalar = execute(call, torch, strided=True)
    return isinstance(scalar, Done) and not _compare_done(call, scalar, p)


def _torch_var_0d_grad(call, t, p):
    # PyTorch 1.13's var / std of a 0-d tensor over dim 0 (one element, unbiased: 0 / 0) has the
    # gradient inf, where the same element as a 1-element 1-d tensor gets NaN, as plugflow's
    # does for both. Accepted when plugflow's results and gradients are PyTorch's for t0.reshape(1).
    import torch
    if not re.match(r"lib\.(var|std)(_mean)?\(t0, ", call.code) or call.specs["t0"].shape != () or \
            not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    as_1d = execute(call.with_code(call.code.replace("(t0, ", "(t0.reshape(1), ", 1)), torch)
    return isinstance(as_1d, Done) and not _compare_done(call, as_1d, p)


def _torch_circular_pad_past_crop(call, t, p):
    # PyTorch 1.13's circular F.pad with a negative pad crops first, then wraps the cropped
    # input; it checks the other pad against the uncropped size, so a pad larger than what the
    # crop leaves reads past it (uninitialized values). plugflow wraps the cropped input again,
    # as numpy's 'wrap' does. Accepted when plugflow's values are numpy's; where the crop
    # leaves nothing to wrap, plugflow raises PyTorch's "wrapping around more than once".
    import numpy as np
    import torch
    m = re.fullmatch(r"F\.pad\(t0, (\([-\d, ]+\)), mode='circular'\)", call.code)
    if not m or not isinstance(t, Done) or not (isinstance(p, Done) or "wrapping around more than once" in p.message):
        return False
    pads = eval(m.group(1))  # noqa: S307
    x = call.specs["t0"].build(torch, "float64")[0].detach().numpy()
    widths = [(0, 0)] * x.ndim
    for i in range(len(pads) // 2):
        dim = x.ndim - 1 - i
        before, after = pads[2 * i], pads[2 * i + 1]
        x = x[(slice(None),) * dim + (slice(max(-before, 0), x.shape[dim] - max(-after, 0)),)]
        widths[dim] = (max(before, 0), max(after, 0))
    if not any(w[0] > x.shape[d] or w[1] > x.shape[d] for d, w in enumerate(widths)):
        return False
    if 0 in x.shape or isinstance(p, Raised):
        return isinstance(p, Raised) and 0 in x.shape
    expected = np.pad(x, widths, mode="wrap")
    return compare(canon(p.result), _cast_like(("tensor", "float64", expected.shape, expected), canon(p.result))) is None


def _atan2_by_division(a, b):
    """torch.atan2 whose backward divides by a^2 + b^2 (PyTorch 1.13 multiplies by its
    reciprocal)."""
    import torch

    class Atan2(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return torch.atan2(a, b)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            wide = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
            a2, b2 = a.to(wide), b.to(wide)
            denominator = a2 * a2 + b2 * b2
            return (g * b2 / denominator).sum_to_size(a.shape).to(a.dtype) if ctx.needs_input_grad[0] else None, \
                (-g * a2 / denominator).sum_to_size(b.shape).to(b.dtype) if ctx.needs_input_grad[1] else None

    return Atan2.apply(a, b)


def _torch_atan2_reciprocal(call, t, p):
    # PyTorch 1.13's atan2 backward multiplies by 1 / (a^2 + b^2): for a subnormal a^2 + b^2
    # that reciprocal is inf, and 0 * inf gives NaN where the gradient b / (a^2 + b^2) is 0;
    # plugflow divides. Accepted when only gradients differ and plugflow's are the division's.
    import torch
    if not call.code.startswith("lib.atan2(") or not (isinstance(t, Done) and isinstance(p, Done)) or \
            not t.grads or compare(canon(p.result), canon(t.result), call.tol):
        return False
    by_division = execute(call.with_code(call.code.replace("lib.atan2(", "_atan2_by_division(", 1)), torch,
                          extra_env={"_atan2_by_division": _atan2_by_division})
    return isinstance(by_division, Done) and not _compare_done(call, by_division, p)


# fmod / remainder / floor_divide as functions, methods (in place too) and operators (div with
# rounding_mode='floor' too), by a number or by t1.
VECTORIZED_DIVISION = re.compile(r"lib\.(?P<f1>fmod|remainder|floor_divide)\(t0, (?P<d1>[^,()]+)\)"
                                 r"|t0\.(?P<f2>fmod|remainder|floor_divide)_?\((?P<d2>[^,()]+)\)"
                                 r"|t0 (?P<op>%|//) (?P<d3>[^,()]+)"
                                 r"|(?P<n5>[-\d.e+]+) (?P<op5>%|//) t0"
                                 r"|(?:lib\.(?P<f3>div|divide)\(t0, |t0\.(?P<f4>div|divide)\()(?P<d4>[^,()]+), "
                                 r"rounding_mode='floor'\)")
NUMPY_DIVISION = {"fmod": "fmod", "remainder": "remainder", "floor_divide": "floor_divide", "%": "remainder",
                  "//": "floor_divide", "div": "floor_divide", "divide": "floor_divide"}


def _torch_vectorized_remainder(call, t, p):
    # PyTorch 1.13's vectorized fmod / remainder / floor_divide compute through x - trunc(x / y)
    # * y: with a tiny divisor (1e-40) or a dividend near the dtype's limit the quotient
    # overflows and the result is NaN; its scalar loop and plugflow give the exact remainder
    # (and floor division's inf). Accepted when plugflow's values are numpy's fmod / remainder /
    # floor_divide of the inputs in the result dtype.
    import numpy as np
    import torch
    m = VECTORIZED_DIVISION.fullmatch(call.code)
    if not m or not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    result = canon(p.result)
    if result[0] != "tensor" or result[1] not in ("bfloat16", "float16", "float32", "float64"):
        return False
    fn = getattr(np, NUMPY_DIVISION[m.group("f1") or m.group("f2") or m.group("op") or m.group("f3") or m.group("f4")
                                    or m.group("op5")])
    divisor = m.group("d1") or m.group("d2") or m.group("d3") or m.group("d4")
    # 16-bit results: the operands rounded to the dtype, the division in float32 (PyTorch's and
    # plugflow's opmath), the result rounded once by _cast_like.
    compute = "float64" if result[1] == "float64" else "float32"

    def rounded(values):
        t = torch.as_tensor(np.asarray(values, np.float64)).to(getattr(torch, result[1]))
        return t.to(getattr(torch, compute)).numpy()

    def operand(name):
        return rounded(call.specs[name].build(torch, "float64")[0].detach().numpy())
    if m.group("n5"):  # a number divided by t0
        x, y = rounded(float(m.group("n5"))), operand("t0")
    else:
        x = operand("t0")
        y = operand("t1") if divisor == "t1" else rounded(float(eval(divisor)))  # noqa: S307
    with np.errstate(all="ignore"):
        expected = fn(x, y)
    return compare(result, _cast_like(("tensor", compute, tuple(expected.shape), expected), result)) is None


def _shared_leaf_map(spec):
    """For an 'overlap' or 'expanded' input: (the view's values as a contiguous array, a function
    summing an array over the view's elements into the leaf's elements)."""
    import numpy as np
    import torch
    if spec.layout[0] == "overlap":
        _, size, stride, offset = spec.layout
        index = offset + sum(i * s for i, s in zip(np.indices(size), stride)) if len(size) else np.full((), offset)
        return spec.data[index], lambda a: np.bincount(index.ravel(), a.ravel(), spec.data.shape[0])
    return np.broadcast_to(spec.data, spec.layout[1]).copy(), \
        lambda a: torch.from_numpy(np.ascontiguousarray(a)).sum_to_size(spec.data.shape).numpy()


def _accumulated_gradient_order(call, t, p):
    # The gradient of an input whose elements share memory ('overlap', 'expanded') sums the view's
    # gradient over those elements; with terms near the dtype's limit the order of that sum decides
    # the rounding (4.5e304 - 4.5e304 + 2e-3). Accepted when everything else matches and each
    # differing element of such a gradient is within a few epsilons of the sum of the magnitudes
    # it adds up (PyTorch's gradient of the same values as a contiguous input).
    import numpy as np
    from fuzz_inputs import TensorSpec
    import torch
    if not (isinstance(t, Done) and isinstance(p, Done)) or not t.grads:
        return False
    if compare(canon(p.result), canon(t.result), call.tol * _input_precision(call, p.result)):
        # (or the result is the float64 reference's where PyTorch's is rounding noise: a layer
        # norm of rows that an expanded input makes constant)
        ref = execute(call, torch, reference="floats")
        if not isinstance(ref, Done) or compare(canon(p.result), _cast_like(canon(ref.result), canon(p.result)),
                                                call.tol * _input_precision(call, p.result)):
            return False
    shared = {n for n, s in call.specs.items() if s.requires_grad and s.layout[0] in ("overlap", "expanded")}
    specs, sums = dict(call.specs), {}
    for n in shared:
        values, sums[n] = _shared_leaf_map(specs[n])
        specs[n] = TensorSpec(values, specs[n].dtype, ("contiguous",), True)
    terms = execute(type(call)(call.family, call.code, specs, call.index, call.stmt, call.tol, call.accumulates), torch)
    if not shared or not isinstance(terms, Done):
        return False
    for n, g in t.grads.items():
        pg = p.grads.get(n)
        if g is None or pg is None or n not in shared:
            if (g is None) != (pg is None) or (g is not None and compare(canon(pg), canon(g), 4 * call.tol)):
                return False
            continue
        a, e = as_float64(pg), as_float64(g)
        scale = sums[n](np.abs(as_float64(terms.grads[n])))
        eps = float(torch.finfo(g.dtype).eps)
        with np.errstate(all="ignore"):
            fine = (a == e) | (np.isnan(a) & np.isnan(e)) | (np.abs(a - e) <= 8 * eps * scale) | ~np.isfinite(scale)
        if not fine.all():
            return False
    return True


def as_float64(x):
    import numpy as np
    return np.asarray(x.detach().double().numpy(), dtype=np.float64)


def _torch_fused_multiply_add(call, t, p):
    # PyTorch's addcmul and add / sub with alpha fuse their multiply-add (FMA): value * t1 * t2
    # (alpha * other) past the dtype's range added to an infinite self gives that infinity, where
    # plugflow's separate multiply and add give inf + (-inf) = NaN. Accepted when only such
    # positions differ.
    import numpy as np
    if not re.match(r"(lib\.(addcmul|add|sub)\(t0|t0\.(addcmul|add|sub)_?\()", call.code) or \
            not (isinstance(t, Done) and isinstance(p, Done)):
        return False
    a, e = canon(p.result), canon(t.result)
    if a[0] != "tensor" or a[1:3] != e[1:3] or a[1] not in TOLERANCE:
        return False
    self_values = np.broadcast_to(call.specs["t0"].build(__import__("torch"), "float64")[0].detach().numpy(), a[2])
    fused = np.isnan(a[3]) & np.isinf(e[3]) & (e[3] == self_values)
    same = ("tensor", a[1], a[2], np.where(fused, 0, a[3]))
    return bool(fused.any()) and compare(same, ("tensor", e[1], e[2], np.where(fused, 0, e[3])), call.tol) is None


def _torch_reads_a_mask_of_another_dtype(call, t, p):
    # PyTorch 1.13's CPU masked_fill / masked_scatter lost their mask dtype check: a mask of
    # another dtype is read as bytes (int16 ones fill everything, float 1.0 fills nothing, an
    # int64 2 raises "Mask tensor can take 0 and 1 values only"). plugflow refuses any mask that
    # is not bool (or the deprecated uint8), as PyTorch documents and later releases do.
    m = call.specs.get("t1")
    return re.search(r"masked_(fill|scatter)", call.code) is not None and isinstance(p, Raised) and \
        m is not None and m.dtype not in ("bool", "uint8") and "only supports boolean masks" in p.message


def _torch_skips_empty_index_checks(call, t, p):
    # An assignment through an index that selects nothing: PyTorch returns before checking the
    # index (a uint8 mask with values other than 0 and 1); plugflow checks it.
    import torch
    if call.family != "setitem" or not (isinstance(t, Done) and isinstance(p, Raised)) or \
            not EMPTY_INPUT_CHECKS.search(p.message):
        return False
    selected = execute(type(call)(call.family, call.code.split(" = ")[0], call.specs, call.index), torch)
    return isinstance(selected, Done) and isinstance(selected.result, torch.Tensor) and selected.result.numel() == 0


def _torch_derivative_of_uncast_operand(call, t, p):
    # PyTorch computes a binary op in the result dtype but its derivative formula sees the operand
    # as given: xlogy(t0, t1) with a float64 t0 = -1.9e-210 and a float16 result computes with t0
    # = 0 (forward 0), while the backward's "self == 0" mask reads -1.9e-210 (NaN gradient).
    # plugflow's backward sees the operand it computed with. Accepted when only gradients differ
    # and plugflow's equal PyTorch's with each differing operand cast to the result dtype first.
    import torch
    if call.family != "binary" or not (isinstance(t, Done) and isinstance(p, Done)) or not t.grads or \
            not isinstance(t.result, torch.Tensor) or compare(canon(p.result), canon(t.result), call.tol):
        return False
    result_dtype = str(t.result.dtype).replace("torch.", "")
    code = call.code
    for name, spec in call.specs.items():
        if spec.dtype != result_dtype:
            code = re.sub(rf"\b{name}\b", f"{name}.to(lib.{result_dtype})", code)
    if code == call.code:
        return False
    cast = execute(call.with_code(code), torch)
    return isinstance(cast, Done) and not _compare_done(call, cast, p)


def _int64_limit(call, t, p):
    # A number 2**63 stored into int64 (F.pad's value, fill): PyTorch's overflow check compares
    # in double, where int64's max rounds up to 2**63, so it passes and the store is undefined
    # (x86 writes -2**63); plugflow's exact check refuses it. F.pad takes its value as a float
    # (PyTorch's signature too), so 2**63 - 1 arrives there as 2**63: PyTorch pads with -2**63.
    return isinstance(t, Done) and isinstance(p, Raised) and "without overflow" in p.message and \
        ("9223372036854775808" in call.code or
         (call.code.startswith("F.pad(") and "value=9223372036854775807" in call.code))


ALLOWED = [
    ("torch-bug", "PyTorch raises by mistake (internal assert, empty-batch conv, diag size)", _torch_bug),
    ("torch-aminmax-0d-keepdim", "PyTorch resizes aminmax's 0-d keepdim output", _torch_aminmax_0d_keepdim),
    ("softshrink-nan", "PyTorch 1.13's softshrink maps NaN to 0", _softshrink_nan),
    ("histc-nan", "PyTorch 1.13's histc counts NaN", _histc_nan),
    ("torch-var-backward-over-no-dims", "PyTorch 1.13's var(dim=()) backward divides by 1",
     _torch_var_backward_over_no_dims),
    ("hardsigmoid-float64-grad", "PyTorch 1.13's float64 hardsigmoid backward uses a float32 1/6",
     _hardsigmoid_float64_grad),
    ("int64-limit", "PyTorch's inexact int64 overflow check passes 2**63", _int64_limit),
    ("torch-unique-dim-order", "PyTorch's unique(dim=) slice order", _torch_unique_dim_order),
    ("torch-bfloat16-conv-transpose-channels", "PyTorch's bfloat16 conv_transpose refuses valid channel counts",
     _torch_bfloat16_conv_transpose_channels),
    ("torch-unchecked-bfloat16-conv-transpose", "PyTorch's bfloat16 conv_transpose skips its size checks",
     _torch_unchecked_bfloat16_conv_transpose),
    ("empty-strides", "the strides (and a view's offset) of a tensor without elements", _empty_strides),
    ("torch-bool-exponent-backward", "PyTorch 1.13's pow / logaddexp backward fails for a bool operand",
     _torch_bool_exponent_backward),
    ("torch-vectorized-backward", "PyTorch's vectorized activation backward disagrees with its scalar one",
     _torch_vectorized_backward),
    ("torch-var-0d-grad", "PyTorch 1.13's var of a 0-d tensor has the gradient inf, its 1-d one NaN",
     _torch_var_0d_grad),
    ("torch-circular-pad-past-crop", "PyTorch 1.13's circular pad reads past its cropped input",
     _torch_circular_pad_past_crop),
    ("torch-atan2-reciprocal", "PyTorch 1.13's atan2 backward multiplies by an overflowing reciprocal",
     _torch_atan2_reciprocal),
    ("torch-vectorized-remainder", "PyTorch's vectorized fmod / remainder by a tiny divisor", _torch_vectorized_remainder),
    ("torch-integer-backward", "PyTorch's backward wraps an integer operand", _torch_integer_backward),
    ("torch-gemv-zero-alpha", "PyTorch's gemv path ignores a zero-alpha product", _torch_gemv_zero_alpha),
    ("torch-vectorized-math", "PyTorch's vectorized log1p, pow & co. near the dtype's limits", _torch_vectorized_math),
    ("torch-float32-loss-accumulator", "PyTorch sums a float32 loss in float32 (an overflow gives inf - inf)",
     _torch_float32_loss_accumulator),
    ("torch-pow-exponent-in-double", "PyTorch's scalar pow loop takes a number exponent as a double",
     _torch_pow_exponent_in_double),
    ("torch-lacks-derivative", "PyTorch 1.13 has no floor_divide or number % tensor derivative",
     _torch_lacks_derivative),
    ("torch-setitem-0d-slice", "PyTorch 1.13 writes a 0-d tensor through any slice", _torch_setitem_0d_slice),
    ("torch-negated-int64-min-alpha", "PyTorch negates sub's alpha in int64", _torch_negated_int64_min_alpha),
    ("torch-integer-linspace", "PyTorch's vectorized integral linspace", _torch_integer_linspace),
    ("empty-shape-overflow", "plugflow refuses empty shapes whose other sizes overflow", _empty_shape_overflow),
    ("torch-index-select-0d", "PyTorch 1.13 overruns a 0-d index_select", _torch_index_select_0d),
    ("torch-baddbmm-beta-zero", "PyTorch 1.13's small baddbmm multiplies old contents by beta = 0",
     _torch_baddbmm_beta_zero),
    ("torch-bfloat16-histc", "PyTorch 1.13 counts a bfloat16 histc in bfloat16", _torch_bfloat16_histc),
    ("torch-clamp-broadcast-backward", "PyTorch 1.13's clamp backward fails for a broadcast input",
     _torch_clamp_broadcast_backward),
    ("torch-bool-prod", "PyTorch 1.13's prod(dtype=bool) of many elements ignores a zero", _torch_bool_prod),
    ("torch-invalid-gradient-shape", "PyTorch 1.13's std / var backward of one element fails",
     _torch_invalid_gradient_shape),
    ("torch-addmv-empty-matrix", "PyTorch 1.13's addmv of an empty matrix has self's shape", _torch_addmv_empty_matrix),
    ("index-add-alpha-overflow", "PyTorch's n-d index_add fuses alpha * source into the add (no overflow to inf - inf)",
     _index_add_alpha_overflow),
    ("torch-empty-product-integer-beta", "PyTorch 1.13 refuses a fractional beta for integer empty products",
     _torch_empty_product_integer_beta),
    ("empty-input-checks", "plugflow checks arguments PyTorch skips for an empty input", _empty_input_checks),
    ("plugflow-lacks-kernel", "no CPU kernel for the (op, dtype) pair", _plugflow_lacks_kernel),
    ("several-ellipses", "PyTorch ignores every Ellipsis after the first", _several_ellipses),
    ("write-through-shared-elements", "PyTorch's deprecated writes into an expanded tensor",
     _write_through_shared_elements),
    ("torch-lacks-kernel", "PyTorch has no CPU kernel for the dtype; plugflow's values equal the float64 "
                           "reference", _torch_lacks_kernel),
    ("partial-overlap", "plugflow copies a partially overlapping input of an in-place op", _torch_refuses_partial_overlap),
    ("accumulated-gradient-order", "the order of a gradient's sum over shared elements near the dtype's limit",
     _accumulated_gradient_order),
    ("torch-derivative-of-uncast-operand", "PyTorch's derivative reads an operand before its cast to the result "
                                           "dtype", _torch_derivative_of_uncast_operand),
    ("torch-fused-multiply-add", "PyTorch's addcmul and alpha add fuse their multiply-add (FMA)", _torch_fused_multiply_add),
    ("torch-mask-of-another-dtype", "PyTorch 1.13 reads a masked_fill / masked_scatter mask of another dtype as bytes",
     _torch_reads_a_mask_of_another_dtype),
    ("empty-index-checks", "plugflow checks an index that selects nothing", _torch_skips_empty_index_checks),
]


# ---- one call, both libraries ---------------------------------------------------------------

def _sensible(t, p):
    if any(s in p.message for s in LEAKED_ERROR_TEXT):
        return False
    return p.kind in SENSIBLE_ERRORS or p.kind == t.kind


def judge(call, torch_done=None):
    """(outcome, detail) of one call: match, both_raise, allowed, mismatch. torch_done() is
    called between the two libraries (the worker reports it, so that a crash is attributed)."""
    import torch
    pf = _pf()
    t = execute(call, torch)
    if torch_done:
        torch_done()
    p = execute(call, pf)
    if isinstance(t, Raised) and isinstance(p, Raised):
        if not _sensible(t, p):
            return "mismatch", f"both raise, plugflow with {p!r} (PyTorch {t!r})"
        return "both_raise", f"torch {t.kind} / plugflow {p.kind}"
    if isinstance(t, Raised):
        why = f"PyTorch raises {t!r}; plugflow returns {_short(p.result)}"
    elif isinstance(p, Raised):
        why = f"plugflow raises {p!r}; PyTorch returns {_short(t.result)}"
    else:
        why = _compare_done(call, t, p)
        if not why:
            return "match", ""
        # Floating results may differ from PyTorch's by the order or precision of float operations
        # (a sum's order, FMA in a GEMM, 1 ulp of a float16 op, fmod of a huge quotient, which
        # PyTorch's vectorized kernel makes NaN). plugflow's answer stands when it equals PyTorch's
        # own result on float64 inputs (rounded to the result dtype): for sums and products that is
        # a match, for anything else a difference where plugflow is the more accurate one.
        ref = execute(call, torch, reference="floats")
        if isinstance(ref, Done) and not _compare_done(call, ref, p, against_reference=True):
            return ("match", "float64 reference") if call.accumulates else ("allowed", "float64-reference")
        if _torch_layout_bug(call, p, None):
            return "allowed", "torch-layout-bug"
    for name, _, predicate in ALLOWED:
        if not predicate(call, t, p):
            continue
        if name == "torch-lacks-kernel":  # plugflow's values must be PyTorch's in a wider dtype
            ref = execute(call, torch, reference="all")
            if isinstance(ref, Raised) and _torch_bug(call, ref, p):
                return "allowed", "torch-bug"
            if isinstance(ref, Raised):
                return "mismatch", f"PyTorch raises {t!r}; plugflow computes and the float64 reference raises {ref!r}"
            why_not = compare(canon(p.result), _cast_like(canon(ref.result), canon(p.result)),
                              4 * call.tol * _input_precision(call, p.result))
            if why_not and call.family in ("binary", "ternary"):  # integer operands are cast to the result dtype first
                rounded, env = _integers_rounded(call, canon(p.result))
                ref = rounded and execute(rounded, torch, reference="all", extra_env=env)
                if isinstance(ref, Done):
                    why_not = compare(canon(p.result), _cast_like(canon(ref.result), canon(p.result)),
                                      4 * call.tol * _input_precision(call, p.result))
            if why_not and not _torch_layout_bug(call, p, "all"):
                return "mismatch", f"PyTorch raises {t!r}; plugflow's values differ from the float64 reference: {why_not}"
        if name == "plugflow-lacks-kernel":  # counted per (op, dtype)
            pair = re.findall(r"op '(\w+)'.* dtype (\w+)|\"(\w+)\" not implemented for '(\w+)'", p.message)[0]
            return "allowed", name + " " + "/".join(x for x in pair if x)
        return "allowed", name
    return "mismatch", why


def _integers_rounded(call, result):
    """The call with the integer and wider float tensor operands of an elementwise op rounded to
    the result's 16-bit float dtype first, as PyTorch's TensorIterator casts them (an int32 of 1e9
    or a float32 of 3.4e38 is inf in float16), and the environment it runs in; None where the
    result is not float16 / bfloat16."""
    import torch
    if result[0] != "tensor" or result[1] not in ("float16", "bfloat16"):
        return None, None
    code = call.code
    for name, spec in call.specs.items():
        if spec.dtype in ("uint8", "int8", "int16", "int32", "int64", "float32", "float64"):
            code = re.sub(rf"\b{name}\b", f"_rounded({name})", code)
    # A number multiplier (addcmul's value, add's alpha) is a float in a 16-bit kernel (its opmath):
    # 1e-310 is 0 there.
    import numpy as np
    code = re.sub(r"\b(value|alpha)=([-+]?[\d.]+(?:e[-+]?\d+)?)",
                  lambda m: f"{m.group(1)}={float(np.float32(float(m.group(2))))!r}", code)
    to = getattr(torch, result[1])
    return call.with_code(code), {"_rounded": lambda x: x.to(to).double()}


def _input_precision(call, result):
    """How much looser than the result's dtype the least precise input is (a float16 input with
    out= float32 is computed in float16, an integer one with out= float64 in float32; the float64
    reference is not)."""
    c = canon(result)
    if c[0] != "tensor" or c[1] not in TOLERANCE:
        return 1.0
    rtols = [TOLERANCE[s.dtype][0] for s in call.specs.values() if s.dtype in TOLERANCE]
    if "out=" in call.code:
        rtols += [TOLERANCE["float32"][0] for s in call.specs.values() if s.dtype not in TOLERANCE]
    return max([1.0] + [r / TOLERANCE[c[1]][0] for r in rtols])


def _gradient_precision(call, result, grad):
    """How much looser than the gradient's dtype its computation is: a float64 leaf's gradient
    through a float32 result (a 0-d float64 operand of a float32 op) has float32's precision."""
    c, g = canon(result), canon(grad)
    if g[0] != "tensor" or g[1] not in TOLERANCE:
        return 1.0
    dtypes = [s.dtype for s in call.specs.values()] + ([c[1]] if c[0] == "tensor" else [])
    return max([1.0] + [TOLERANCE[d][0] / TOLERANCE[g[1]][0] for d in dtypes if d in TOLERANCE])


def _torch_layout_bug(call, p, reference):
    # PyTorch 1.13 reads some non-contiguous inputs wrong (median along a dim of an expanded
    # 1-d tensor returns uninitialized memory). plugflow's answer stands when it equals
    # PyTorch's own result on contiguous copies of the same inputs (for calls that write no
    # input: a copy would not see the write).
    import torch
    if call.stmt or "_(" in call.code:
        return False
    ref = execute(call, torch, reference=reference, contiguous=True)
    return isinstance(ref, Done) and not _compare_done(call, ref, p, against_reference=True)


def _compare_done(call, t, p, against_reference=False):
    """Why plugflow's Done differs from PyTorch's (or from the float64 reference run), or None."""
    def expected(x, like):
        return _cast_like(canon(x), canon(like)) if against_reference else canon(x)

    why = compare(canon(p.result), expected(t.result, p.result), call.tol * _input_precision(call, p.result))
    if why:
        return why
    for name in call.specs:
        why = compare(canon(p.inputs[name]), expected(t.inputs[name], p.inputs[name]),
                      call.tol * _input_precision(call, p.inputs[name]), f"input {name} afterwards")
        if why:
            return why
    if (t.backward_error is None) != (p.backward_error is None):
        return f"backward: PyTorch {t.backward_error!r}, plugflow {p.backward_error!r}"
    for name, g in t.grads.items():
        pg = p.grads.get(name)
        if (g is None) != (pg is None):
            return f"grad of {name}: PyTorch {'None' if g is None else 'a tensor'}, plugflow {pg!r}"
        if g is not None:
            why = compare(canon(pg), expected(g, pg), 4 * call.tol * _gradient_precision(call, p.result, pg),
                          f"grad of {name}")
            if why:
                return why
    return None


def _cast_like(reference, actual):
    """The float64 reference result in the dtypes of plugflow's result (rounded as that dtype)."""
    import numpy as np
    import torch
    if reference[0] == "tensor" and actual[0] == "tensor":
        values = reference[3]
        if actual[1] != reference[1] and reference[2] == actual[2]:
            with np.errstate(all="ignore"):
                if actual[1] == "bfloat16":
                    values = torch.from_numpy(np.asarray(values, dtype=np.float32)).bfloat16().float().numpy()
                elif actual[1] == "bool":
                    values = np.asarray(values) != 0
                else:
                    values = np.asarray(values).astype(actual[1])
        return ("tensor", actual[1], reference[2], values)
    if reference[0] == "seq" and actual[0] == "seq" and len(reference[1]) == len(actual[1]):
        return ("seq", [_cast_like(r, a) for r, a in zip(reference[1], actual[1])])
    if reference[0] == "number" and actual[0] == "number":
        return ("number", actual[1], reference[2])
    return reference


def _short(result):
    c = canon(result)
    if c[0] == "tensor":
        return f"a {c[1]} tensor of shape {list(c[2])}"
    return repr(result)[:120]


# ---- the worker process -----------------------------------------------------------------------

def worker_main(threads, selftest=None):
    """Reads 'seed start count' lines on stdin; writes one JSON line when each call starts and one
    when it ends, on the original stdout (fd 1 is redirected to stderr so that stray output
    cannot corrupt the protocol)."""
    import faulthandler
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_ADDRESS_SPACE, WORKER_ADDRESS_SPACE))
    faulthandler.enable()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.path.insert(0, HERE)
    warnings.simplefilter("ignore")
    import torch
    import plugflow
    import fuzz_ops
    torch.set_num_threads(1)
    plugflow.set_num_threads(threads)
    def send(**msg):
        protocol.write(json.dumps(msg) + "\n")

    for line in sys.stdin:
        mode, seed, start, count = line.split()
        seed, start, count = int(seed), int(start), int(count)
        for index in range(start, start + count):
            try:
                call = fuzz_ops.generate(seed, index)
            except Exception:  # noqa: BLE001 - a generator bug is a failure of this call, not of the worker
                send(start=index, desc="(generating the call)")
                send(done=index, outcome="mismatch", detail="harness error: " + traceback.format_exc()[-800:])
                continue
            send(start=index, desc=call.describe())

            def torch_done():
                send(torch_done=index)
                if selftest and selftest[1] == index:  # the harness's own test: plugflow "crashes" or hangs
                    if selftest[0] == "crash":
                        os.kill(os.getpid(), signal.SIGSEGV)
                    time.sleep(3600)

            try:
                if mode == "plugflow-only":
                    # PyTorch crashed on this call: plugflow must answer it without crashing.
                    torch_done()
                    execute(call, plugflow)
                    outcome, detail = "allowed", "torch-crash"
                else:
                    outcome, detail = judge(call, torch_done=torch_done)
            except Exception:  # noqa: BLE001 - a harness error is reported, not swallowed
                outcome, detail = "mismatch", "harness error: " + traceback.format_exc()[-800:]
            send(done=index, outcome=outcome, detail=detail)
        send(batch=start)


class Worker:
    def __init__(self, threads, selftest=None, env=None):
        self.stderr = tempfile.TemporaryFile(mode="w+")
        extra = ["--selftest", f"{selftest[0]}:{selftest[1]}"] if selftest else []
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(threads)]
                                     + extra, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     cwd=HERE, env={**os.environ, **(env or {})})
        self.pending = b""  # bytes read past the last complete line

    def send(self, seed, start, count, mode="both"):
        try:
            self.proc.stdin.write(f"{mode} {seed} {start} {count}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker died: read() reports it

    def read(self, timeout):
        """The next protocol message, 'dead' if the worker died, or None after timeout seconds."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.proc.wait()
                return "dead"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def stderr_tail(self):
        self.stderr.seek(0)
        return self.stderr.read()[-1500:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


class Summary:
    KINDS = ["match", "both_raise", "allowed", "mismatch", "crash", "hang"]

    def __init__(self, seed):
        self.seed = seed
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.calls = 0
        self.failures = []  # (kind, index, desc, detail)
        self.allowed = {}
        self.torch_crashes = []  # (index, desc, what happened first)
        self.interrupted = False

    def add(self, kind, index, desc, detail, note=None):
        self.calls += 1
        self.counts[kind] += 1
        if kind in ("mismatch", "crash", "hang"):
            self.failures.append((kind, index, desc, detail + (f"\n    (first run: {note})" if note else "")))
        if kind == "allowed":
            self.allowed[detail] = self.allowed.get(detail, 0) + 1
            if detail == "torch-crash":
                self.torch_crashes.append((index, desc, note))

    @property
    def ok(self):
        return not self.failures

    def table(self):
        rows = [("seed", self.seed), ("calls", self.calls)] + [(k.replace("_", "-"), v) for k, v in self.counts.items()]
        lines = [f"  {k:<11} {v}" for k, v in rows]
        lines += [f"    allowed {name}: {n}" for name, n in sorted(self.allowed.items())]
        return "\n".join(lines)

    def report(self, limit=50):
        out = [self.table()] + (["  (interrupted)"] if self.interrupted else [])
        for index, desc, note in self.torch_crashes:
            out.append(f"\nPyTorch crashed ({(note or '').splitlines()[0]}); plugflow alone passed. {index}: {desc}")
        for kind, index, desc, detail in self.failures[:limit]:
            out.append(f"\n{kind.upper()} {index}: {desc}\n    {detail}\n    replay: cd tests/python && "
                       f"../../.venv/bin/python fuzz_harness.py --seed {self.seed} --index {index}")
        if len(self.failures) > limit:
            out.append(f"\n... and {len(self.failures) - limit} more")
        return "\n".join(out)


def run(seed, calls, start=0, seconds=None, timeout=DEFAULT_TIMEOUT_S, threads=1, progress=False, selftest=None):
    """Runs calls [start, start + calls) of seed in a worker (restarted after a crash or hang);
    stops early after seconds. Returns the Summary. selftest=("crash" | "hang", index) makes the
    first worker die or hang at that call (the harness's own test).

    A worker that dies or hangs inside PyTorch is PyTorch's bug (torch.remainder(INT_MIN, -1)
    is SIGFPE in 1.13). So is one that dies inside plugflow right after PyTorch corrupted the
    heap (index_select of a 0-d tensor with 4 indices writes past its result in 1.13). Either
    way the call is run again on plugflow alone, in a fresh worker with glibc's heap checks on
    (MALLOC_CHECK_=3): it is a crash or hang only if plugflow fails there too, else it counts as
    allowed "torch-crash" and the report lists it."""
    summary = Summary(seed)
    deadline = None if seconds is None else time.monotonic() + seconds
    worker = Worker(threads, selftest)
    index, end = start, start + calls
    retry, first_failure = None, None  # the call to rerun on plugflow alone, and why
    last_print = time.monotonic()
    try:
        while index < end and (deadline is None or time.monotonic() < deadline):
            failures_before = len(summary.failures)
            mode, count = ("plugflow-only", 1) if retry == index else ("both", min(BATCH, end - index))
            worker.send(seed, index, count, mode)
            current, desc, in_torch = None, None, False
            while True:
                msg = worker.read(timeout if current is not None else timeout + 60)
                if isinstance(msg, dict) and "start" in msg:
                    current, desc, in_torch = msg["start"], msg["desc"], mode == "both"
                elif isinstance(msg, dict) and "torch_done" in msg:
                    in_torch = False
                elif isinstance(msg, dict) and "done" in msg:
                    summary.add(msg["outcome"], msg["done"], desc, msg["detail"],
                                note=first_failure if mode == "plugflow-only" else None)
                    current, index = None, msg["done"] + 1
                elif isinstance(msg, dict):
                    break  # the batch is done
                else:  # died or timed out
                    if current is None:
                        current, desc = index, "(worker startup)"
                    what = f"no result after {timeout} s" if msg is None else \
                        f"worker died (exit status {worker.proc.returncode}); stderr:\n{worker.stderr_tail()}"
                    if mode == "both" and (in_torch or msg == "dead"):
                        retry, index = current, current
                        first_failure = ("in PyTorch: " if in_torch else "after PyTorch returned: ") + what
                    else:
                        summary.add("hang" if msg is None else "crash", current, desc, what)
                        index = current + 1
                    worker.stop()
                    worker = Worker(threads, selftest, env={"MALLOC_CHECK_": "3"} if retry == index else None)
                    break
            if progress:
                for kind, failed, desc, _ in summary.failures[failures_before:]:
                    print(f"  {kind.upper()} {failed}: {desc}", flush=True)
                if time.monotonic() - last_print > 30:
                    last_print = time.monotonic()
                    print(f"  ... {summary.calls} calls, {len(summary.failures)} failures", flush=True)
    except KeyboardInterrupt:  # Ctrl-C: the report of the calls so far
        summary.interrupted = True
    finally:
        worker.stop()
    return summary


def replay(seed, index):
    """Runs one call in this process and prints everything about it."""
    import numpy as np
    import fuzz_ops
    warnings.simplefilter("ignore")
    call = fuzz_ops.generate(seed, index)
    np.set_printoptions(threshold=200, linewidth=120)
    print(call.describe())
    for name, spec in call.specs.items():
        print(f"{name}: {spec.describe()}\n{spec.data!r}")
    import torch
    for lib in (torch, _pf()):
        out = execute(call, lib)
        print(f"--- {lib.__name__}:")
        if isinstance(out, Raised):
            print(out)
        else:
            print(out.result)
            if out.backward_error is not None:
                print("backward:", out.backward_error)
            for n, g in out.grads.items():
                print(f"grad {n}:", g)
    print("--- verdict:", judge(call))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="default: a new random seed")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--start", type=int, default=0, help="first call index")
    parser.add_argument("--seconds", type=float, default=None, help="stop starting new calls after this")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per call, seconds")
    parser.add_argument("--threads", type=int, default=2, help="plugflow's threads in the worker")
    parser.add_argument("--index", type=int, default=None, help="replay this call in-process")
    parser.add_argument("--limit", type=int, default=50, help="failures printed in full")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--selftest", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        selftest = None
        if args.selftest:
            kind, index = args.selftest.split(":")
            selftest = (kind, int(index))
        worker_main(args.threads, selftest)
        return 0
    sys.path.insert(0, HERE)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    if args.index is not None:
        replay(seed, args.index)
        return 0
    print(f"fuzzing plugflow against PyTorch: seed {seed}, calls {args.start}..{args.start + args.calls - 1}"
          + (f", at most {args.seconds:.0f} s" if args.seconds else ""), flush=True)
    began = time.monotonic()
    summary = run(seed, args.calls, args.start, args.seconds, args.timeout, args.threads, progress=True)
    print(summary.report(args.limit))
    print(f"  ({time.monotonic() - began:.0f} s)")
    return 0 if summary.ok and not summary.interrupted else 1


if __name__ == "__main__":
    sys.exit(main())
