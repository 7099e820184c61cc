"""Random inputs for the differential fuzzer (fuzz_harness.py): tensors with identical values on
PyTorch and plugflow in any layout, shapes, dims and Python scalars at dtype limits.

A call is generated from np.random.default_rng([seed, index]) alone, so (seed, index) replays
it. Its code is a Python expression (or statement) over `lib` (torch or plugflow), `F` (their
nn.functional) and named tensors t0, t1, ..., each described by a TensorSpec that builds the
same values in the same layout with either library."""

import math

import numpy as np
import torch


DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]

# Materialized tensors stay small (a few MB at most); only views (stride 0) may be huge.
MAX_NUMEL = 1 << 18
# Sizes of 'huge' creations: at least 2^36 bytes (beyond the worker's address-space limit, so
# they fail without touching memory on both sides) or overflowing int64 outright.
HUGE_SIZES = [2**31, 2**32 + 1, 2**36, 2**40, 2**62, 2**63 - 1]

INT_SCALARS = [0, 1, -1, 2, -2, 3, 5, 7, 100, 127, 128, -128, -129, 255, 256, -256, 32767, 32768, -32769,
               65535, 65536, 2**31 - 1, 2**31, -2**31 - 1, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -2**63]
FLOAT_SCALARS = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.001, 3.25, 1e5, 65504.0, 65520.0, 3.4e38, 3.5e38, 1e40,
                 -1e40, 1e-40, 1e-310, 1e300, math.nan, math.inf, -math.inf]
# Out of int64's range: PyTorch refuses them as arguments; plugflow must too, cleanly.
OUT_OF_RANGE_INTS = [2**63, 2**64, -2**63 - 1]


def lit(v):
    """v as Python source: floats as float('nan') etc., containers recursively."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "-float('inf')"
        return repr(v)
    if isinstance(v, tuple):
        return "(" + "".join(lit(x) + ", " for x in v).rstrip(" ") + ")" if len(v) == 1 else \
            "(" + ", ".join(lit(x) for x in v) + ")"
    if isinstance(v, list):
        return "[" + ", ".join(lit(x) for x in v) + "]"
    if isinstance(v, Code):
        return v.code
    raise TypeError(f"no literal for {v!r}")


class Code:
    """Source text used verbatim inside lit() (a tensor name, lib.float32, a slice)."""

    def __init__(self, code):
        self.code = code

    def __repr__(self):
        return self.code


def dtype_code(name):
    return Code(f"lib.{name}")


def finfo_max(name):
    return {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
            "float64": 1.7976931348623157e308}[name]


def iinfo(name):
    i = np.iinfo(name)
    return int(i.min), int(i.max)


def round_to(values, name):
    """float64 values rounded to a floating dtype (exactly representable there), as float32 for
    bfloat16 (numpy has no bfloat16) or in the dtype itself."""
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "bfloat16":
            return torch.from_numpy(np.asarray(values, dtype=np.float32)).bfloat16().float().numpy()
        return np.asarray(values, dtype=name)


REGIMES = ["small", "small", "small", "special", "wide", "limits", "integral", "positive"]
# For sums of products (matrix products, convolutions): NaN propagates whatever the order, but an
# infinity meeting another one (inf - inf) or a zero (inf * 0, a folded alpha * A) depends on
# how the BLAS or oneDNN groups the terms, so those operands get NaN and zeros only.
PRODUCT_REGIMES = ["small", "small", "integral", "nan"]
# For ops built on sums of squares (variance, norms, normalization layers, cosine similarity,
# interpolation weights): values near the dtype's limit overflow there by construction, and
# where the overflow lands (two-pass or Welford variance, a scaled norm) is the algorithm's
# choice, not a defined value; NaN, infinities and zeros stay.
BOUNDED_REGIMES = ["small", "small", "nonfinite", "integral", "positive"]


def random_values(rng, shape, name, regime):
    """numpy data for a dtype (float32 holding bfloat16 values) in a value regime:
    small (|x| < 5), special (NaN, +-inf, +-0, extremes among small values), wide (any magnitude
    of the dtype), limits (the dtype's extremes), integral (whole and half numbers: ties),
    positive (0.1 .. 5)."""
    n = int(np.prod(shape, dtype=np.int64))
    if name == "bool":
        return rng.random(shape) < rng.choice([0.0, 0.3, 0.5, 1.0])
    if name in INTS:
        lo, hi = iinfo(name)
        if regime in ("wide",):
            data = rng.integers(lo, hi, size=shape, endpoint=True, dtype=name)
        elif regime in ("limits", "special"):
            pool = np.array([lo, lo + 1, -1 if lo < 0 else 2, 0, 1, hi - 1, hi], dtype=name)
            data = np.where(rng.random(shape) < 0.5, rng.choice(pool, size=shape),
                            rng.integers(max(lo, -5), 6, size=shape).astype(name))
        elif regime == "positive":
            data = rng.integers(1, 6, size=shape).astype(name)
        else:
            data = rng.integers(0 if lo == 0 else -5, 6, size=shape).astype(name)
        return np.asarray(data, dtype=name).reshape(shape)
    big = finfo_max(name)
    if regime == "wide":
        exps = rng.uniform(-math.log10(big) + 1, math.log10(big), size=n)
        data = np.sign(rng.standard_normal(n)) * 10.0 ** exps
    elif regime == "integral":
        data = rng.integers(-8, 9, size=n) / 2.0
    elif regime == "positive":
        data = rng.uniform(0.1, 5, size=n)
    else:
        data = rng.uniform(-5, 5, size=n)
        if regime in ("special", "limits", "nan", "nonfinite"):
            pool = [math.nan, math.inf, -math.inf, 0.0, -0.0, big, -big, 1.0, -1.0]
            if regime == "nonfinite":  # special values without the dtype's extremes
                pool = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0]
            if regime == "limits":
                pool = [big, -big, big / 2, -big / 2, 0.0, -0.0, 1e-30, -1e-30]
            if regime == "nan":
                pool = [math.nan, 0.0, -0.0]
            mask = rng.random(n) < rng.uniform(0.1, 0.6)
            data[mask] = rng.choice(pool, size=int(mask.sum()))
        elif rng.random() < 0.3:
            data = np.round(data, 1)  # repeats: ties for sort, max, unique
    return round_to(data, name).reshape(shape)


class TensorSpec:
    """One input tensor: its values (numpy), dtype, layout and whether it requires grad.

    Layouts (each built by the same view calls on both libraries from a contiguous base):
      contiguous; permuted (dims permuted in memory); stepped (every step-th element of a dim,
      junk between); offset (a narrow of a larger storage); expanded (size-1 dims broadcast,
      stride 0); overlap (as_strided over a 1-D buffer, elements sharing memory; read-only);
      huge (as_strided with stride 0 over a few elements, sizes far beyond memory; views only)."""

    def __init__(self, data, dtype, layout=("contiguous",), requires_grad=False):
        self.data = data
        self.dtype = dtype
        self.layout = layout
        self.requires_grad = requires_grad

    @property
    def shape(self):
        kind = self.layout[0]
        if kind in ("overlap", "huge"):
            return tuple(self.layout[1])
        if kind == "expanded":
            return tuple(self.layout[1])
        return tuple(self.data.shape)

    def describe(self):
        kind = self.layout[0]
        extra = ""
        if kind in ("overlap", "huge"):
            extra = f" size={list(self.layout[1])} stride={list(self.layout[2])} offset={self.layout[3]}" \
                    f" buffer={self.data.shape[0]}"
        elif kind == "permuted":
            extra = f" perm={list(self.layout[1])}"
        elif kind == "stepped":
            extra = f" dim={self.layout[1]} step={self.layout[2]}"
        elif kind == "expanded":
            extra = f" from={list(self.data.shape)}"
        grad = " requires_grad" if self.requires_grad else ""
        return f"{self.dtype}{list(self.shape)} {kind}{extra}{grad}"

    def _base(self, lib, mem):
        """A contiguous tensor of lib holding mem's values exactly, in this spec's dtype."""
        # clone(): storage of its own (from_numpy's cannot be resized by an out= argument in PyTorch)
        t = lib.from_numpy(np.array(mem, order="C", copy=True)).clone()  # (ascontiguousarray makes 0-d 1-d)
        return t.bfloat16() if self.dtype == "bfloat16" else t

    def build(self, lib, as_dtype=None):
        """(tensor, leaf): the input in its layout and the leaf autograd sees (its base).
        as_dtype="float64" builds the same values as float64 (the reference run)."""
        spec = self if as_dtype is None else TensorSpec(self.data, as_dtype, self.layout, self.requires_grad)
        if as_dtype is not None:
            spec.data = self.data.astype(np.float64)
        kind = spec.layout[0]
        data = spec.data
        if kind == "permuted":
            perm = spec.layout[1]
            mem = np.transpose(data, perm)
            base = spec._base(lib, mem)
            leaf = spec._leaf(base)
            return leaf.permute(*[int(i) for i in np.argsort(perm)]), leaf
        if kind == "stepped":
            _, dim, step, junk = spec.layout
            shape = list(data.shape)
            mem_shape = shape.copy()
            mem_shape[dim] = shape[dim] * step + 1
            mem = np.broadcast_to(junk, mem_shape).astype(data.dtype).copy()
            index = [slice(None)] * len(shape)
            index[dim] = slice(1, 1 + shape[dim] * step, step)
            mem[tuple(index)] = data
            leaf = spec._leaf(spec._base(lib, mem))
            return leaf[tuple(index)], leaf
        if kind == "offset":
            flat = data.reshape(-1)
            pad = np.resize(flat[::-1], 2) if flat.size else np.zeros(2, data.dtype)
            mem = np.concatenate([pad, flat, pad])
            leaf = spec._leaf(spec._base(lib, mem))
            return leaf.narrow(0, 2, data.size).view(*data.shape) if data.ndim else leaf[2], leaf
        if kind == "expanded":
            leaf = spec._leaf(spec._base(lib, data))
            return leaf.expand(*spec.layout[1]), leaf
        if kind in ("overlap", "huge"):
            _, size, stride, offset = spec.layout
            leaf = spec._leaf(spec._base(lib, data))
            return leaf.as_strided(tuple(size), tuple(stride), offset), leaf
        leaf = spec._leaf(spec._base(lib, data))
        return leaf, leaf

    def _leaf(self, base):
        return base.requires_grad_() if self.requires_grad else base


class Gen:
    """The random choices of one call; tensor() registers an input and returns its name."""

    def __init__(self, rng):
        self.rng = rng
        self.specs = {}
        self.bounded = False  # draw values from BOUNDED_REGIMES only

    # -- basic draws ------------------------------------------------------------------------
    def p(self, prob):
        return bool(self.rng.random() < prob)

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def int(self, lo, hi):
        """An int in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    def dtype(self, pool=None):
        return self.choice(pool or DTYPES)

    def float_dtype(self):
        return self.choice(FLOATS)

    # -- shapes -------------------------------------------------------------------------------
    def size(self):
        r = self.rng.random()
        if r < 0.06:
            return 0
        if r < 0.3:
            return 1
        if r < 0.9:
            return self.int(2, 7)
        return self.choice([8, 13, 16, 17, 31, 33])

    def shape(self, ndim=None, min_ndim=0, max_ndim=4, max_numel=4096):
        if ndim is None:
            ndim = self.int(min_ndim, max_ndim) if not self.p(0.03) else self.int(max(min_ndim, 5), 6)
        for _ in range(20):
            shape = tuple(self.size() for _ in range(ndim))
            if int(np.prod(shape, dtype=np.int64)) <= max_numel:
                return shape
        return tuple(1 for _ in range(ndim))

    def large_shape(self):
        """A shape big enough for the vectorized and parallel paths (still a few MB at most)."""
        n = self.choice([1000, 4097, 33000, 70001, 200000])
        if self.p(0.5):
            return (n,)
        rows = self.choice([2, 3, 7, 64])
        return (rows, max(1, n // rows))

    def broadcastable(self, shape):
        """A shape that broadcasts with shape (sometimes one that does not)."""
        if self.p(0.05):
            return tuple(s + 1 for s in shape) or (2,)
        out = list(shape)
        if out and self.p(0.3):
            out = out[self.int(0, len(out)):]
        out = [1 if self.p(0.25) else s for s in out]
        if self.p(0.1):
            out = [self.int(1, 3)] + out
        return tuple(out)

    def dim(self, ndim, bad=0.05):
        """A dim of an ndim tensor, maybe negative, sometimes out of range."""
        if self.p(bad):
            return self.choice([ndim, -ndim - 1, 64])
        n = max(ndim, 1)
        return self.int(-n, n - 1)

    def dims(self, ndim):
        """None, one dim, or a tuple of dims (sometimes empty, sometimes with a repeat)."""
        r = self.rng.random()
        if r < 0.25:
            return None
        if r < 0.6:
            return self.dim(ndim)
        n = max(ndim, 1)
        count = self.int(0, n)
        dims = [int(d) for d in self.rng.permutation(n)[:count]]
        dims = [d - n if self.p(0.3) else d for d in dims]
        if dims and self.p(0.05):
            dims.append(dims[0])
        return tuple(dims)

    # -- scalars ------------------------------------------------------------------------------
    def scalar(self, kind=None):
        """A Python number: an int near a dtype limit, a float (maybe non-finite), a bool."""
        kind = kind or self.choice(["int", "int", "float", "float", "small", "bool"])
        if kind == "int":
            return self.choice(OUT_OF_RANGE_INTS) if self.p(0.03) else self.choice(INT_SCALARS)
        if kind == "float":
            return self.choice(FLOAT_SCALARS)
        if kind == "small":
            return self.choice([0, 1, 2, -1, 3, 0.5, -1.5, 2.0])
        return self.choice([True, False])

    # -- tensors ------------------------------------------------------------------------------
    def tensor(self, shape=None, dtype=None, regime=None, layout=None, writable=False, grad=False,
               large=0.03):
        """Registers a random input and returns its name. writable inputs are never 'overlap'
        (writing through overlapping elements is order dependent, which PyTorch does not check)."""
        if shape is None:
            shape = self.large_shape() if self.p(large) else self.shape()
        shape = tuple(int(s) for s in shape)
        dtype = dtype or self.dtype()
        regime = regime or self.choice(BOUNDED_REGIMES if self.bounded else REGIMES)
        data = random_values(self.rng, shape, dtype, regime)
        kinds = ["contiguous"] * 5 + ["permuted", "stepped", "offset", "expanded"]
        if not writable:
            kinds.append("overlap")
        kind = layout or self.choice(kinds)
        spec_layout = ("contiguous",)
        if kind == "permuted" and len(shape) >= 2:
            spec_layout = ("permuted", tuple(int(i) for i in self.rng.permutation(len(shape))))
        elif kind == "stepped" and len(shape) >= 1:
            junk = random_values(self.rng, (), dtype, "special").item()
            spec_layout = ("stepped", self.int(0, len(shape) - 1), self.int(2, 3), junk)
        elif kind == "offset":
            spec_layout = ("offset",)
        elif kind == "expanded" and len(shape) >= 1 and 0 not in shape:
            small = tuple(1 if self.p(0.5) else s for s in shape)
            data = data[tuple(slice(0, s) for s in small)].copy()
            spec_layout = ("expanded", shape)
        elif kind == "overlap" and len(shape) >= 1 and 0 not in shape:
            stride = tuple(self.int(0, 2) for _ in shape)
            extent = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
            offset = self.int(0, 2)
            data = random_values(self.rng, (extent + offset,), dtype, regime)
            spec_layout = ("overlap", shape, stride, offset)
        if grad and dtype not in ("float32", "float64"):
            grad = False
        name = f"t{len(self.specs)}"
        self.specs[name] = TensorSpec(data, dtype, spec_layout, requires_grad=grad)
        return Code(name)

    def huge_view(self, ndim=None):
        """A stride-0 view whose sizes are far beyond memory (element count within int64 or not)."""
        ndim = ndim or self.int(1, 3)
        size = []
        for _ in range(ndim):
            # (2**20 times a few small sizes is still cheap to copy; 2**34 and up can never be
            # materialized, so a copy fails at once on both sides)
            size.append(self.choice([1, 2, 3, 2**20, 2**34, 2**40]) if self.p(0.7) else self.int(1, 5))
        stride = [0 if s > 8 else self.int(0, 1) for s in size]
        buffer = 1 + sum((s - 1) * st for s, st in zip(size, stride))
        dtype = self.dtype()
        data = random_values(self.rng, (buffer,), dtype, "small")
        name = f"t{len(self.specs)}"
        self.specs[name] = TensorSpec(data, dtype, ("huge", tuple(size), tuple(stride), 0))
        return Code(name)

    def index_tensor(self, shape, bound, dtype="int64", unique=False, bad=0.05):
        """Indices into a dim of size bound, negative ones included; sometimes out of range;
        unique: no repeats (ops whose result with repeats depends on write order)."""
        n = int(np.prod(shape, dtype=np.int64))
        if unique and bound > 0:
            n = min(n, bound)
            shape = (n,) if len(shape) <= 1 else shape
            values = self.rng.permutation(bound)[:n]
            if int(np.prod(shape)) != n:
                shape = (n,)
        elif bound > 0:
            values = self.rng.integers(0, bound, size=n)
        else:
            values = np.zeros(n, dtype=np.int64)
        values = np.where(self.rng.random(n) < 0.3, values - bound, values) if bound > 0 else values
        if self.p(bad) and n:
            values = values.copy()
            values[self.int(0, n - 1)] = self.choice([bound, -bound - 1, 2**40])
        data = values.astype("int64").reshape(shape)
        if dtype != "int64":
            data = data.astype(dtype if dtype != "bool" else "int64")
        name = f"t{len(self.specs)}"
        self.specs[name] = TensorSpec(data, dtype, ("contiguous",))
        return Code(name)

    def sorted_tensor(self, shape, dtype):
        data = np.sort(random_values(self.rng, shape, dtype, self.choice(["small", "integral"])), axis=-1)
        name = f"t{len(self.specs)}"
        self.specs[name] = TensorSpec(data, dtype, ("contiguous",))
        return Code(name)
