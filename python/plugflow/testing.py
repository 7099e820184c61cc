"""plugflow.testing (torch.testing, PyTorch 1.13): assert_close, make_tensor and the deprecated
assert_allclose.

assert_close compares tensors, numbers, booleans and None, also nested in sequences and mappings,
with PyTorch's default tolerances per dtype, its attribute checks and its messages (an
AssertionError naming the mismatched elements, the greatest differences and their indices; for
an item of a container, which item). Inputs that are not tensors but convert to one (numpy
arrays) are compared as tensors when both are of the same kind, as in PyTorch.
"""

import cmath
import collections.abc
import math
import warnings

__all__ = ["assert_close", "make_tensor", "assert_allclose"]


def _pf():
    import plugflow
    return plugflow


def _precisions():
    pf = _pf()
    return {pf.float16: (0.001, 1e-5), pf.bfloat16: (0.016, 1e-5), pf.float32: (1.3e-6, 1e-5),
            pf.float64: (1e-7, 1e-7)}


class _Mismatch(Exception):
    """A failed comparison: the exception class to raise, its message and the item's path."""

    def __init__(self, type_, msg, path=(), replaceable=True):
        super().__init__(msg)
        self.type = type_
        self.msg = msg
        self.path = path
        self.replaceable = replaceable  # False where PyTorch ignores assert_close's msg (bad arguments, shapes
        # of containers: errors of its pairing phase)

    def to_error(self, msg=None):
        if not self.replaceable:
            msg = None
        if not isinstance(msg, str):
            generated = self.msg
            if self.path:
                generated += f"\n\nThe failure occurred for item {''.join(str([item]) for item in self.path)}"
            msg = msg(generated) if callable(msg) else generated
        return self.type(msg)


class _Unsupported(Exception):
    """The inputs are not of the kind a comparison handles: the next one is tried."""


def _tolerances(dtypes, rtol, atol, path):
    if (rtol is None) ^ (atol is None):
        raise _Mismatch(ValueError, "Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                        f"{'rtol' if rtol is None else 'atol'}.", path, replaceable=False)
    if rtol is not None:
        return rtol, atol
    rtols, atols = zip(*[_precisions().get(dtype, (0.0, 0.0)) for dtype in dtypes])
    return max(rtols), max(atols)


def _mismatch_msg(kind, rtol, atol, abs_diff, rel_diff, abs_idx=None, rel_idx=None, extra=None):
    equality = rtol == 0 and atol == 0

    def diff_msg(name, diff, idx, tol):
        if idx is None:
            msg = f"{name.title()} difference: {diff}"
        else:
            msg = f"Greatest {name} difference: {diff} at index {idx}"
        return msg + ("" if equality else f" (up to {tol} allowed)") + "\n"

    msg = f"{kind} are not {'equal' if equality else 'close'}!\n\n"
    if extra:
        msg += extra.strip() + "\n"
    msg += diff_msg("absolute", abs_diff, abs_idx, atol) + diff_msg("relative", rel_diff, rel_idx, rtol)
    return msg.strip()


def _scalar_mismatch_msg(actual, expected, rtol, atol):
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_msg("Scalars", rtol, atol, abs_diff, rel_diff)


def _compare_none(actual, expected, path, **options):
    if not (actual is None or expected is None):
        raise _Unsupported()
    if not (actual is None and expected is None):
        raise _Mismatch(AssertionError, f"None mismatch: {actual} is not {expected}", path)


def _compare_bools(actual, expected, path, **options):
    import numpy as np
    if not all(isinstance(x, (bool, np.bool_)) for x in (actual, expected)):
        raise _Unsupported()
    actual, expected = bool(actual), bool(expected)
    if actual is not expected:
        raise _Mismatch(AssertionError, f"Booleans mismatch: {actual} is not {expected}", path)


def _compare_numbers(actual, expected, path, rtol, atol, equal_nan, check_dtype, **options):
    import numpy as np
    pf = _pf()
    if not all(isinstance(x, (int, float, complex, np.number)) for x in (actual, expected)):
        raise _Unsupported()
    actual, expected = [x.item() if isinstance(x, np.number) else x for x in (actual, expected)]
    number_dtypes = {int: pf.int64, float: pf.float64, complex: pf.float64}
    rtol, atol = _tolerances([number_dtypes[type(x)] for x in (actual, expected)], rtol, atol, path)
    if check_dtype and type(actual) is not type(expected):
        raise _Mismatch(AssertionError, f"The (d)types do not match: {type(actual)} != {type(expected)}.", path)
    if actual == expected or (equal_nan and cmath.isnan(actual) and cmath.isnan(expected)):
        return
    abs_diff = abs(actual - expected)
    if cmath.isfinite(abs_diff) and abs_diff <= atol + rtol * abs(expected):
        return
    raise _Mismatch(AssertionError, _scalar_mismatch_msg(actual, expected, rtol, atol), path)


def _unravel(flat_index, shape):
    index = []
    for size in reversed(shape):
        flat_index, mod = divmod(flat_index, size)
        index.append(mod)
    return tuple(reversed(index))


def _compare_tensors(actual, expected, path, allow_subclasses, rtol, atol, equal_nan, check_device, check_dtype,
                     check_layout, check_stride):
    pf = _pf()
    if not (isinstance(actual, type(expected)) or isinstance(expected, type(actual))):
        raise _Unsupported()
    if not allow_subclasses and type(actual) is not type(expected):
        raise _Unsupported()
    try:
        actual, expected = [x if isinstance(x, pf.Tensor) else pf.as_tensor(x) for x in (actual, expected)]
    except Exception:  # noqa: BLE001 - anything that does not convert is not a tensor-like
        raise _Unsupported() from None
    rtol, atol = _tolerances([actual.dtype, expected.dtype], rtol, atol, path)

    def attribute_mismatch(name, actual_value, expected_value):
        return _Mismatch(AssertionError,
                         f"The values for attribute '{name}' do not match: {actual_value} != {expected_value}.", path)

    if actual.shape != expected.shape:
        raise attribute_mismatch("shape", actual.shape, expected.shape)
    if check_stride and actual.stride() != expected.stride():
        raise attribute_mismatch("stride()", actual.stride(), expected.stride())
    if check_device and actual.device != expected.device:
        raise attribute_mismatch("device", actual.device, expected.device)
    if check_dtype and actual.dtype != expected.dtype:
        raise attribute_mismatch("dtype", actual.dtype, expected.dtype)
    actual, expected = actual.detach(), expected.detach()
    if actual.device != expected.device:
        actual, expected = actual.cpu(), expected.cpu()
    if actual.dtype != expected.dtype:
        dtype = pf.promote_types(actual.dtype, expected.dtype)
        actual, expected = actual.to(dtype), expected.to(dtype)
    # Compared in the widest type of the kind, as PyTorch does.
    wide = pf.float64 if actual.dtype.is_floating_point else pf.int64
    actual, expected = actual.to(wide), expected.to(wide)
    matches = pf.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if bool(matches.all()):
        return
    if actual.dim() == 0:
        raise _Mismatch(AssertionError, _scalar_mismatch_msg(actual.item(), expected.item(), rtol, atol), path)
    mismatches = ~matches
    total = int(mismatches.sum())
    numel = mismatches.numel()
    extra = f"Mismatched elements: {total} / {numel} ({total / numel:.1%})"
    a_flat, b_flat, matched = actual.flatten(), expected.flatten(), matches.flatten()
    abs_diff = (a_flat - b_flat).abs()
    abs_diff[matched] = 0
    max_abs, max_abs_idx = pf.max(abs_diff, 0)
    rel_diff = abs_diff / b_flat.abs()
    rel_diff[matched] = 0
    max_rel, max_rel_idx = pf.max(rel_diff, 0)
    shape = tuple(actual.shape)
    raise _Mismatch(AssertionError, _mismatch_msg("Tensor-likes", rtol, atol, max_abs.item(), max_rel.item(),
                                                  _unravel(int(max_abs_idx), shape),
                                                  _unravel(int(max_rel_idx), shape), extra), path)


_COMPARISONS = (_compare_none, _compare_bools, _compare_numbers, _compare_tensors)


def _compare(actual, expected, path, options):
    """Compares two inputs, recursing into sequences and mappings; raises _Mismatch."""
    is_sequence = lambda x: isinstance(x, collections.abc.Sequence) and not isinstance(x, str)  # noqa: E731
    if is_sequence(actual) and is_sequence(expected):
        if len(actual) != len(expected):
            raise _Mismatch(AssertionError,
                            f"The length of the sequences mismatch: {len(actual)} != {len(expected)}", path,
                            replaceable=False)
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, path + (i,), options)
        return
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        actual_keys, expected_keys = set(actual.keys()), set(expected.keys())
        if actual_keys != expected_keys:
            raise _Mismatch(AssertionError, "The keys of the mappings do not match:\n"
                            f"Missing keys in the actual mapping: {sorted(expected_keys - actual_keys)}\n"
                            f"Additional keys in the actual mapping: {sorted(actual_keys - expected_keys)}", path,
                            replaceable=False)
        try:
            keys = sorted(actual_keys)
        except TypeError:
            keys = actual_keys
        for key in keys:
            _compare(actual[key], expected[key], path + (key,), options)
        return
    for comparison in _COMPARISONS:
        try:
            return comparison(actual, expected, path, **options)
        except _Unsupported:
            continue
    raise _Mismatch(TypeError, f"No comparison pair was able to handle inputs of type {type(actual)} and "
                    f"{type(expected)}.", path, replaceable=False)


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Asserts that actual and expected are close: |actual - expected| <= atol + rtol * |expected|
    elementwise, with both tolerances given or both defaulted by dtype (float16 1e-3/1e-5, bfloat16
    1.6e-2/1e-5, float32 1.3e-6/1e-5, float64 1e-7/1e-7, exact otherwise), after checking shape,
    device and dtype. msg replaces the message (a callable receives the generated one)."""
    __tracebackhide__ = True
    options = dict(allow_subclasses=allow_subclasses, rtol=rtol, atol=atol, equal_nan=equal_nan,
                   check_device=check_device, check_dtype=check_dtype, check_layout=check_layout,
                   check_stride=check_stride)
    try:
        _compare(actual, expected, (), options)
    except _Mismatch as mismatch:
        raise mismatch.to_error(msg) from None


def make_tensor(*shape, dtype, device, low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False):
    """A tensor of a shape filled with uniform random values in [low, high) (defaults: [-9, 9) for
    floating and signed integer dtypes, [0, 10) for uint8, {False, True} for bool), optionally
    non-contiguous and without zeros."""
    pf = _pf()
    integral = (pf.uint8, pf.int8, pf.int16, pf.int32, pf.int64)
    floating = (pf.float16, pf.bfloat16, pf.float32, pf.float64)

    def low_high(lowest, highest, default_low, default_high):
        lo = default_low if low is None else low
        hi = default_high if high is None else high
        if lo != lo or hi != hi:
            raise ValueError("make_tensor: one of low or high was NaN!")
        if lo > hi:
            raise ValueError("make_tensor: low must be weakly less than high!")
        lo, hi = min(max(lo, lowest), highest), min(max(hi, lowest), highest)
        return (math.floor(lo), math.ceil(hi)) if dtype in integral else (lo, hi)

    if len(shape) == 1 and isinstance(shape[0], collections.abc.Sequence):
        shape = shape[0]
    shape = tuple(shape)
    if requires_grad and dtype not in floating:
        raise ValueError("make_tensor: requires_grad must be False for integral dtype")
    if dtype is pf.bool:
        result = pf.randint(0, 2, shape, device=device, dtype=dtype)
    elif dtype in integral:
        info = pf.iinfo(dtype)
        lo, hi = low_high(info.min, info.max, 0 if dtype is pf.uint8 else -9, 10)
        result = pf.randint(lo, hi, shape, device=device, dtype=dtype)
    elif dtype in floating:
        info = pf.finfo(dtype)
        lo, hi = low_high(info.min, info.max, -9, 9)
        rand_val = pf.rand(shape, device=device, dtype=dtype)
        result = hi * rand_val + lo * (1 - rand_val)
    else:
        raise TypeError(f"The requested dtype '{dtype}' is not supported by torch.testing.make_tensor(). To request "
                        "support, file an issue at: https://github.com/pytorch/pytorch/issues")
    if noncontiguous and result.numel() > 1:
        result = pf.repeat_interleave(result, 2, dim=-1)[..., ::2]
    if exclude_zero:
        replacement = 1 if dtype in integral or dtype is pf.bool else pf.finfo(dtype).tiny
        result[result == 0] = replacement
    if dtype in floating:
        result.requires_grad = requires_grad
    return result


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """The deprecated form (a FutureWarning, as in PyTorch 1.13): assert_close with the older
    default tolerances (float16 1e-3/1e-3, float32 1e-4/1e-5, float64 1e-5/1e-8), NaNs equal and
    dtypes not checked; non-tensors are converted (expected to actual's dtype)."""
    pf = _pf()
    if not isinstance(actual, pf.Tensor):
        actual = pf.tensor(actual)
    if not isinstance(expected, pf.Tensor):
        expected = pf.tensor(expected, dtype=actual.dtype)
    if rtol is None and atol is None:
        legacy = {pf.float16: (1e-3, 1e-3), pf.float32: (1e-4, 1e-5), pf.float64: (1e-5, 1e-8)}
        rtols, atols = zip(*(legacy.get(t.dtype, (0.0, 0.0)) for t in (actual, expected)))
        rtol, atol = max(rtols), max(atols)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=True, check_dtype=False,
                 check_stride=False, msg=msg or None)
    warnings.warn("torch.testing.assert_allclose() is deprecated since 1.12 and will be removed in 1.14. Use "
                  "torch.testing.assert_close() instead. For detailed upgrade instructions see "
                  "https://github.com/pytorch/pytorch/issues/61844.", FutureWarning)
