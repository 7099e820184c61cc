"""repr/str of tensors, following PyTorch's torch/_tensor_str.py rule for rule.

The element formatting (width alignment, ``1.`` for integer-valued floats, scientific mode for
wide ranges, 4 digits of precision, ``...`` summaries above 1000 elements, line wrapping at 80
columns) matches PyTorch's, so ``repr(plugflow_tensor)`` equals ``repr(torch_tensor)`` with
``torch`` replaced by ``plugflow``. Values are read with ``tolist()``: PyTorch formats the same
Python floats (float32 widened to double), so the digits agree.
"""

import math
import sys

__all__ = ["set_printoptions", "get_printoptions"]


class _PrinterOptions:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = _PrinterOptions()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None,
                     sci_mode=None):
    """Set options for printing tensors (torch.set_printoptions).

    precision: digits after the point (default 4); threshold: element count above which the
    repr is summarised (1000); edgeitems: items kept at each end of a summarised dim (3);
    linewidth: characters per line (80); profile: "default", "short" or "full";
    sci_mode: force (True) or forbid (False) scientific notation, None to choose automatically.
    """
    if profile is not None:
        profiles = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}
        if profile not in profiles:
            raise ValueError(f"unknown print profile {profile!r} (expected 'default', 'short' or 'full')")
        (PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems,
         PRINT_OPTS.linewidth) = profiles[profile]
    if precision is not None:
        PRINT_OPTS.precision = precision
    if threshold is not None:
        PRINT_OPTS.threshold = threshold
    if edgeitems is not None:
        PRINT_OPTS.edgeitems = edgeitems
    if linewidth is not None:
        PRINT_OPTS.linewidth = linewidth
    PRINT_OPTS.sci_mode = sci_mode


def get_printoptions():
    """The current print options as a dict."""
    return {name: getattr(PRINT_OPTS, name)
            for name in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}


class _Formatter:
    """Chooses one format for every element of a tensor, from the values that will be shown."""

    def __init__(self, floating, values):
        self.floating_dtype = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1

        if not floating:
            for value in values:
                self.max_width = max(self.max_width, len(str(value)))
        else:
            nonzero_finite = [v for v in values if math.isfinite(v) and v != 0]
            if not nonzero_finite:
                return  # only zeros, infs and nans: nothing to measure (PyTorch returns here too)
            abs_min = min(abs(v) for v in nonzero_finite)
            abs_max = max(abs(v) for v in nonzero_finite)
            self.int_mode = all(v == math.ceil(v) for v in nonzero_finite)
            precision = PRINT_OPTS.precision
            if self.int_mode:
                # Integer-valued floats print as "1."; the "+ 1" counts that point.
                if abs_max / abs_min > 1000.0 or abs_max > 1.0e8:
                    self.sci_mode = True
                    widths = (len(f"{v:.{precision}e}") for v in nonzero_finite)
                else:
                    widths = (len(f"{v:.0f}") + 1 for v in nonzero_finite)
            else:
                if abs_max / abs_min > 1000.0 or abs_max > 1.0e8 or abs_min < 1.0e-4:
                    self.sci_mode = True
                    widths = (len(f"{v:.{precision}e}") for v in nonzero_finite)
                else:
                    widths = (len(f"{v:.{precision}f}") for v in nonzero_finite)
            self.max_width = max(self.max_width, max(widths))

        if PRINT_OPTS.sci_mode is not None:
            self.sci_mode = PRINT_OPTS.sci_mode

    def width(self):
        return self.max_width

    def format(self, value):
        if self.floating_dtype:
            if self.sci_mode:
                ret = f"{value:{self.max_width}.{PRINT_OPTS.precision}e}"
            elif self.int_mode:
                ret = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    ret += "."
            else:
                ret = f"{value:.{PRINT_OPTS.precision}f}"
        else:
            ret = str(value)
        return (self.max_width - len(ret)) * " " + ret


def _summarized_values(t):
    """The values a summarised repr shows (the edge items of every dim), flattened."""
    edge = PRINT_OPTS.edgeitems
    if t.dim() == 0:
        return [t.item()]
    n = t.size(0)
    if t.dim() == 1:
        return t[:edge].tolist() + t[-edge:].tolist() if n > 2 * edge else t.tolist()
    rows = list(range(edge)) + list(range(n - edge, n)) if n > 2 * edge else range(n)
    return [v for i in rows for v in _summarized_values(t[i])]


def _vector_str(t, indent, summarize, formatter):
    element_length = formatter.width() + 2  # with ", "
    elements_per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / element_length)))
    edge = PRINT_OPTS.edgeitems
    if summarize and t.size(0) > 2 * edge:
        data = ([formatter.format(v) for v in t[:edge].tolist()] + [" ..."] +
                [formatter.format(v) for v in t[-edge:].tolist()])
    else:
        data = [formatter.format(v) for v in t.tolist()]
    lines = [", ".join(data[i:i + elements_per_line]) for i in range(0, len(data), elements_per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _tensor_str_with_formatter(t, indent, summarize, formatter):
    dim = t.dim()
    if dim == 0:
        return formatter.format(t.item())
    if dim == 1:
        return _vector_str(t, indent, summarize, formatter)
    edge = PRINT_OPTS.edgeitems
    n = t.size(0)
    if summarize and n > 2 * edge:
        slices = ([_tensor_str_with_formatter(t[i], indent + 1, summarize, formatter) for i in range(edge)] +
                  ["..."] +
                  [_tensor_str_with_formatter(t[i], indent + 1, summarize, formatter) for i in range(n - edge, n)])
    else:
        slices = [_tensor_str_with_formatter(t[i], indent + 1, summarize, formatter) for i in range(n)]
    return "[" + ("," + "\n" * (dim - 1) + " " * (indent + 1)).join(slices) + "]"


def _tensor_str(t, indent):
    if t.numel() == 0:
        return "[]"
    from . import _C

    t = t.detach()  # formatting reads values only: no autograd records

    summarize = t.numel() > PRINT_OPTS.threshold
    if t.dtype is _C.float16 or t.dtype is _C.bfloat16:
        t = t.float()  # format as PyTorch does: through float32
    if t.device.type != "cpu":
        t = t.cpu()  # one copy instead of one per element row
    values = _summarized_values(t) if summarize else t.reshape(-1).tolist()
    formatter = _Formatter(t.dtype.is_floating_point, values)
    return _tensor_str_with_formatter(t, indent, summarize, formatter)


def _add_suffixes(tensor_str, suffixes, indent):
    parts = [tensor_str]
    last_line_len = len(tensor_str) - tensor_str.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > PRINT_OPTS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def _is_plain(t):
    from ._C import Tensor

    if type(t) is Tensor:
        return True
    nn = sys.modules.get("plugflow.nn")  # Parameter prints as a plain tensor, as in PyTorch
    parameter = getattr(nn, "Parameter", None)
    return parameter is not None and type(t) is parameter


def _str(t):
    """repr(t) as PyTorch writes it, with plugflow's names."""
    from . import _C
    from ._creation import get_default_dtype

    prefix = "tensor(" if _is_plain(t) else f"{type(t).__name__}("
    indent = len(prefix)
    suffixes = []

    # PyTorch prints the device when it is not the default one (cpu).
    if t.device.type != "cpu":
        suffixes.append("device='" + str(t.device) + "'")

    default_dtype = get_default_dtype()
    if t.numel() == 0:
        # Explicitly print the shape if it is not (0,), to match NumPy; an empty tensor has no
        # elements to show that it is an integer one, so its dtype is printed unless it is the
        # default float type.
        if t.dim() != 1:
            suffixes.append("size=" + str(tuple(t.shape)))
        if t.dtype is not default_dtype:
            suffixes.append("dtype=" + str(t.dtype))
        tensor_str = "[]"
    else:
        if t.dtype not in (default_dtype, _C.int64, _C.bool):
            suffixes.append("dtype=" + str(t.dtype))
        tensor_str = _tensor_str(t, indent)

    grad_fn = getattr(t, "grad_fn", None)  # present once autograd is in
    if grad_fn is not None:
        name = getattr(grad_fn, "name", None)
        suffixes.append("grad_fn=<{}>".format(name() if callable(name) else type(grad_fn).__name__))
    elif getattr(t, "requires_grad", False):
        suffixes.append("requires_grad=True")

    return _add_suffixes(prefix + tensor_str, suffixes, indent)
