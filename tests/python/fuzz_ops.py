"""The op table of the differential fuzzer: each generator draws one random call (Python code
over lib / F and tensors t0, t1, ...) of a family of ops. generate(seed, index) picks a family
by weight and returns the Call; nothing but (seed, index) decides it."""

import math
import re

import numpy as np

from fuzz_inputs import FLOATS, HUGE_SIZES, INTS, PRODUCT_REGIMES, Code, Gen, dtype_code, lit, random_values

OPS = []  # (family name, weight, generator)


def family(weight):
    def register(fn):
        OPS.append((fn.__name__, weight, fn))
        return fn
    return register


class Call:
    """One generated call. stmt: code is a statement (setitem, +=) and the result is None.
    tol scales the float tolerance; accumulates: a mismatch may be re-checked against PyTorch
    on float64 inputs (sums, products, norms: the order of float operations differs)."""

    def __init__(self, family_name, code, specs, index, stmt=False, tol=1.0, accumulates=False):
        self.family = family_name
        self.code = code
        self.specs = specs
        self.index = index
        self.stmt = stmt
        self.tol = tol
        self.accumulates = accumulates
        self.compiled = compile(code, "<fuzz>", "exec" if stmt else "eval")

    def with_code(self, code):
        """The same call with other code (an allowed difference's check reruns a variant)."""
        return Call(self.family, code, self.specs, self.index, self.stmt, self.tol, self.accumulates)

    def describe(self):
        inputs = "; ".join(f"{n}={s.describe()}" for n, s in self.specs.items())
        return f"[{self.family}] {self.code}" + (f"   with {inputs}" if inputs else "")


class C:
    """What a generator returns: the code and how to compare."""

    def __init__(self, code, stmt=False, tol=1.0, accumulates=False):
        self.code, self.stmt, self.tol, self.accumulates = code, stmt, tol, accumulates


def generate(seed, index):
    rng = np.random.default_rng([seed, index])
    g = Gen(rng)
    weights = np.array([w for _, w, _ in OPS], dtype=float)
    name, _, fn = OPS[int(rng.choice(len(OPS), p=weights / weights.sum()))]
    c = fn(g)
    if isinstance(c, str):
        c = C(c)
    return Call(name, c.code, g.specs, index, c.stmt, c.tol, c.accumulates)


def kwargs(**kw):
    """', a=1, b=2' for the keyword arguments that are not None-skipped (value Ellipsis drops it)."""
    parts = [f"{k}={lit(v)}" for k, v in kw.items() if v is not Ellipsis]
    return "".join(", " + p for p in parts)


def ndim_of(g, name):
    return len(g.specs[str(name)].shape)


def shape_of(g, name):
    return g.specs[str(name)].shape


def maybe_grad(g, form_ok=True):
    return form_ok and g.p(0.15)


# ---- elementwise ----------------------------------------------------------------------------

FLOAT_UNARY = ("sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh exp exp2 expm1 log log2 log10 log1p "
               "sqrt rsqrt sigmoid erf erfc erfinv reciprocal").split()
SAME_UNARY = "abs neg sign floor ceil round trunc frac square".split()
NO_OUT = {"isnan", "isinf", "isfinite", "relu",  # no out= in PyTorch
          "nan_to_num"}  # plugflow raises NotImplementedError for nan_to_num(out=)
NO_INPLACE = {"isnan", "isinf", "isfinite"}


@family(8)
def unary(g):
    name = g.choice(FLOAT_UNARY + SAME_UNARY + ["isnan", "isinf", "isfinite", "logical_not", "bitwise_not", "relu",
                                                 "nan_to_num", "absolute", "negative"])
    forms = ["fn", "method"] + ([] if name in NO_INPLACE else ["inplace"]) + ([] if name in NO_OUT else ["out"])
    form = g.choice(forms)
    x = g.tensor(writable=form == "inplace", grad=maybe_grad(g, form in ("fn", "method")))
    args = ""
    if name == "nan_to_num" and g.p(0.6):
        args = kwargs(nan=g.scalar("float") if g.p(0.5) else ..., posinf=g.scalar() if g.p(0.5) else ...,
                      neginf=g.scalar("float") if g.p(0.5) else ...).lstrip(", ")
    if form == "fn":
        return f"lib.{name}({x}{', ' + args if args else ''})"
    if form == "method":
        return f"{x}.{name}({args})"
    if form == "inplace":
        return C(f"{x}.{name}_({args})")
    out = g.tensor(shape=shape_of(g, x) if g.p(0.7) else g.shape(), dtype=g.dtype(), writable=True)
    return f"lib.{name}({x}{', ' + args if args else ''}, out={out})"


BINARY = ("add sub mul div true_divide floor_divide remainder fmod pow atan2 maximum minimum eq ne lt le gt ge "
          "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor heaviside logaddexp subtract "
          "multiply divide xlogy hypot float_power special.xlogy special.xlog1py").split()
# torch.special's functions: no Tensor method or in-place form.
SPECIAL_BINARY = {"special.xlogy", "special.xlog1py"}
# Functions without an operator that take a number as their first operand (torch.xlogy(2, t)).
NUMBER_INPUT = {"xlogy", "float_power", "special.xlogy", "special.xlog1py"}
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%", "pow": "**",
             "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "eq": "==", "ne": "!=", "lt": "<",
             "le": "<=", "gt": ">", "ge": ">="}
NO_INPLACE_BINARY = {"maximum", "minimum", "logaddexp"}
# plugflow's composite ops take out= only of the result's shape and dtype (no resize or cast).
NO_OUT_BINARY = {"logaddexp", "heaviside"}
NO_SCALAR_OTHER = {"atan2", "maximum", "minimum", "logaddexp", "heaviside", "logical_and", "logical_or",
                   "logical_xor", "hypot"}


def other_operand(g, x, name, writable_self=False):
    """The second operand of a binary op: a broadcastable tensor, a 0-d tensor or a number."""
    r = g.rng.random()
    if r < 0.5 or name in NO_SCALAR_OTHER:
        shape = g.broadcastable(shape_of(g, x))
        if writable_self and g.p(0.7):  # in place: the result must keep self's shape
            shape = tuple(shape_of(g, x))[g.int(0, ndim_of(g, x)):]
        return g.tensor(shape=shape, grad=g.specs[str(x)].requires_grad and g.p(0.7))
    if r < 0.65:
        return g.tensor(shape=(), grad=g.specs[str(x)].requires_grad and g.p(0.5))
    return g.scalar()


def binary_extra(g, name):
    if name in ("add", "sub", "subtract") and g.p(0.3):
        return kwargs(alpha=g.scalar())
    if name in ("div", "divide") and g.p(0.5):
        return kwargs(rounding_mode=g.choice([None, "trunc", "floor", "floor", "round"]))
    return ""


@family(12)
def binary(g):
    name = g.choice(BINARY)
    forms = ["fn", "fn", "method", "operator", "reflected"] + ([] if name in NO_OUT_BINARY else ["out"]) + \
        ([] if name in NO_INPLACE_BINARY else ["inplace", "inplace_operator"])
    if name in SPECIAL_BINARY:
        forms = ["fn", "fn", "reflected", "out"]
    form = g.choice(forms)
    if form in ("operator", "inplace_operator") and name not in OPERATORS or \
            form == "reflected" and name not in OPERATORS and name not in NUMBER_INPUT:
        form = "fn"
    x = g.tensor(writable=form.startswith("inplace"), grad=maybe_grad(g, not form.startswith("inplace")))
    extra = binary_extra(g, name)
    if form == "reflected":
        s = g.scalar()
        if name == "pow" and g.p(0.5) or name not in OPERATORS:
            return f"lib.{name}({lit(s)}, {x})"
        return f"{lit(s)} {OPERATORS[name]} {x}"
    y = other_operand(g, x, name, writable_self=form.startswith("inplace"))
    if form == "fn":
        return f"lib.{name}({x}, {lit(y)}{extra})"
    if form == "method":
        return f"{x}.{name}({lit(y)}{extra})"
    if form == "inplace":
        return f"{x}.{name}_({lit(y)}{extra})"
    if form == "operator":
        return f"{x} {OPERATORS[name]} {lit(y)}"
    if form == "inplace_operator":
        if OPERATORS[name] in ("==", "!=", "<", "<=", ">", ">="):
            return f"{x} {OPERATORS[name]} {lit(y)}"
        return C(f"{x} {OPERATORS[name]}= {lit(y)}", stmt=True)
    out = g.tensor(shape=g.choice([shape_of(g, x), (), (0,), g.shape()]), dtype=g.dtype(), writable=True)
    return f"lib.{name}({x}, {lit(y)}{extra}, out={out})"


@family(5)
def ternary(g):
    kind = g.choice(["where", "where_scalar", "clamp", "clamp_tensor", "lerp", "addcmul", "addcdiv", "masked_fill",
                     "clamp_min_max", "isclose", "allclose", "equal", "where1"])
    x = g.tensor(grad=maybe_grad(g), writable=True)  # (some forms write x in place)
    shape = shape_of(g, x)
    if kind == "where":
        cond = g.tensor(shape=g.broadcastable(shape), dtype="bool" if g.p(0.9) else g.dtype())
        y = g.tensor(shape=g.broadcastable(shape))
        return f"lib.where({cond}, {x}, {y})"
    if kind == "where_scalar":
        cond = g.tensor(shape=g.broadcastable(shape), dtype="bool")
        a, b = (x, lit(g.scalar())) if g.p(0.5) else (lit(g.scalar()), x)
        return f"lib.where({cond}, {a}, {b})"
    if kind == "where1":
        return f"lib.where({x})"
    if kind == "clamp":
        lo = g.scalar() if g.p(0.7) else None
        hi = g.scalar() if g.p(0.7) else None
        form = g.choice(["lib.clamp({x}{kw})", "{x}.clamp({kw0})", "{x}.clamp_({kw0})", "lib.clip({x}{kw})"])
        kw = kwargs(min=lo, max=hi)
        return form.format(x=x, kw=kw, kw0=kw.lstrip(", "))
    if kind == "clamp_tensor":
        lo = g.tensor(shape=g.broadcastable(shape)) if g.p(0.7) else None
        hi = g.tensor(shape=g.broadcastable(shape)) if g.p(0.7) else None
        return f"lib.clamp({x}{kwargs(min=lo, max=hi)})"
    if kind == "clamp_min_max":
        fn = g.choice(["clamp_min", "clamp_max"])
        v = g.scalar() if g.p(0.6) else g.tensor(shape=g.broadcastable(shape))
        return f"lib.{fn}({x}, {lit(v)})"
    if kind == "lerp":
        end = g.tensor(shape=g.broadcastable(shape), dtype=g.specs[str(x)].dtype if g.p(0.8) else g.dtype())
        w = g.scalar(g.choice(["float", "small"])) if g.p(0.5) else g.tensor(shape=g.broadcastable(shape))
        form = g.choice(["lib.lerp({x}, {e}, {w})", "{x}.lerp({e}, {w})", "{x}.lerp_({e}, {w})"])
        return form.format(x=x, e=end, w=lit(w))
    if kind in ("addcmul", "addcdiv"):
        a = g.tensor(shape=g.broadcastable(shape))
        b = g.tensor(shape=g.broadcastable(shape))
        v = kwargs(value=g.scalar()) if g.p(0.5) else ""
        form = g.choice(["lib.{k}({x}, {a}, {b}{v})", "{x}.{k}({a}, {b}{v})", "{x}.{k}_({a}, {b}{v})"])
        return form.format(k=kind, x=x, a=a, b=b, v=v)
    if kind == "masked_fill":
        mask = g.tensor(shape=g.broadcastable(shape), dtype="bool" if g.p(0.9) else g.dtype())
        v = lit(g.scalar()) if g.p(0.7) else g.tensor(shape=() if g.p(0.8) else (1,))
        form = g.choice(["lib.masked_fill({x}, {m}, {v})", "{x}.masked_fill({m}, {v})", "{x}.masked_fill_({m}, {v})"])
        return form.format(x=x, m=mask, v=v)
    if kind == "isclose":
        y = g.tensor(shape=g.broadcastable(shape), dtype=g.specs[str(x)].dtype if g.p(0.8) else g.dtype())
        kw = kwargs(rtol=g.choice([1e-5, 0.0, 0.1]) if g.p(0.3) else ..., atol=g.choice([1e-8, 0.0, 1.0]) if g.p(0.3)
                    else ..., equal_nan=g.choice([True, False]) if g.p(0.5) else ...)
        return f"lib.isclose({x}, {y}{kw})"
    if kind == "allclose":
        y = g.tensor(shape=g.broadcastable(shape), dtype=g.specs[str(x)].dtype)
        return f"lib.allclose({x}, {y}{kwargs(equal_nan=g.choice([True, False]))})"
    y = g.tensor(shape=shape if g.p(0.7) else g.shape(), dtype=g.specs[str(x)].dtype if g.p(0.8) else g.dtype())
    return f"lib.equal({x}, {y})"


# ---- reductions -------------------------------------------------------------------------------

@family(10)
def reduction(g):
    name = g.choice(["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "std",
                     "var", "std_mean", "var_mean", "logsumexp", "norm", "count_nonzero", "nansum_like",
                     "aminmax", "max_other", "cumsum", "cumprod", "softmax", "log_softmax", "nan_reductions"])
    # (sums, products and scans of values near the dtype's limit overflow in an order-dependent way)
    g.bounded = name in ("std", "var", "std_mean", "var_mean", "norm", "sum", "mean", "prod", "cumsum", "cumprod",
                         "nansum_like")
    x = g.tensor(grad=maybe_grad(g), writable=name in ("cumsum", "cumprod"))
    nd = ndim_of(g, x)
    keep = kwargs(keepdim=g.choice([True, False])) if g.p(0.5) else ""
    acc = dict(accumulates=True, tol=4.0)
    if name in ("sum", "mean"):
        dims = g.dims(nd)
        dt = kwargs(dtype=dtype_code(g.dtype())) if g.p(0.2) else ""
        if dims is None:
            return C(g.choice([f"lib.{name}({x}{dt})", f"{x}.{name}({dt.lstrip(', ')})"]), **acc)
        return C(f"lib.{name}({x}, {lit(dims)}{keep}{dt})", **acc)
    if name == "prod":
        dt = kwargs(dtype=dtype_code(g.dtype())) if g.p(0.2) else ""
        if g.p(0.3):
            return C(f"lib.prod({x}{dt})", **acc)
        return C(f"lib.prod({x}, {g.dim(nd)}{keep}{dt})", **acc)
    if name in ("amax", "amin"):
        dims = g.dims(nd)
        return f"lib.{name}({x}{'' if dims is None else ', ' + lit(dims)}{keep})"
    if name in ("max", "min", "argmax", "argmin"):
        if g.p(0.3):
            return f"lib.{name}({x})"
        return f"lib.{name}({x}, {g.dim(nd)}{keep})"
    if name == "max_other":
        y = g.tensor(shape=g.broadcastable(shape_of(g, x)))
        return f"lib.{g.choice(['max', 'min'])}({x}, {y})"
    if name in ("all", "any"):
        if g.p(0.3):
            return f"{x}.{name}()"
        return f"lib.{name}({x}, {g.dim(nd)}{keep})"
    if name in ("std", "var", "std_mean", "var_mean"):
        dims = g.dims(nd)
        unb = kwargs(unbiased=g.choice([True, False])) if g.p(0.4) else ""
        if dims is not None and g.p(0.2):  # PyTorch 1.13 takes correction= only with dims
            unb = kwargs(correction=g.choice([0, 1, 2]))
        if dims is None:
            return C(f"lib.{name}({x}{unb})", **acc)
        return C(f"lib.{name}({x}, {lit(dims)}{unb}{keep})", **acc)
    if name == "logsumexp":  # (dim=() without keepdim fails in PyTorch 1.13: a torch bug, not generated)
        dims = g.dims(nd)
        return C(f"lib.logsumexp({x}, {lit(dims if dims not in (None, ()) else g.dim(nd))}{keep})", **acc)
    if name == "norm":
        p = g.choice([1, 2, 3, 0, 1.5, float("inf"), -float("inf"), "fro", None, -1])
        dims = g.dims(nd)
        kw = kwargs(p=p if p is not None else ..., dim=dims if dims is not None else ...,
                    keepdim=g.choice([True, False]) if g.p(0.4) else ...)
        return C(f"lib.norm({x}{kw})", **acc)
    if name == "count_nonzero":
        dims = g.dims(nd)
        return f"lib.count_nonzero({x}{'' if dims is None else ', ' + lit(dims)})"
    if name == "nansum_like":  # (infinities become +-100, not the dtype's limits, whose sum overflows in an
        # order-dependent way, as the bounded regime avoids; nan_to_num's defaults are tested elementwise)
        return C(f"lib.nan_to_num({x}, posinf=100.0, neginf=-100.0).sum()", **acc)
    if name == "aminmax":
        kw = kwargs(dim=g.dim(nd) if g.p(0.6) else ..., keepdim=g.choice([True, False]) if g.p(0.4) else ...)
        return f"lib.aminmax({x}{kw})"
    if name in ("cumsum", "cumprod"):
        dt = kwargs(dtype=dtype_code(g.dtype())) if g.p(0.2) else ""
        form = g.choice(["lib.{n}({x}, {d}{dt})", "{x}.{n}({d}{dt})", "{x}.{n}_({d}{dt})"])
        return C(form.format(n=name, x=x, d=g.dim(nd), dt=dt), **acc)
    if name in ("softmax", "log_softmax"):
        # (dtype= casts first; PyTorch has no float16 softmax and the float64 reference cannot cast
        # through float16 as plugflow does, so only float32/float64 there)
        dt = kwargs(dtype=dtype_code(g.choice(["float32", "float64"]))) if g.p(0.2) else ""
        lib_ = g.choice(["lib", "F"])
        return C(f"{lib_}.{name}({x}, {g.dim(nd)}{dt})", tol=4.0)
    fn = g.choice(["median", "nanmedian"])
    if g.p(0.5):
        return f"lib.{fn}({x})"
    return f"(lambda r: (r.values, {x}.gather({'{d}'}, r.indices) if {x}.dim() else r.indices))" \
           f"(lib.{fn}({x}, {'{d}'}{keep}))".replace("{d}", str(g.dim(nd))) if not keep else \
           f"lib.{fn}({x}, {g.dim(nd)}{keep}).values"


@family(6)
def sort_search(g):
    name = g.choice(["sort", "argsort", "topk", "kthvalue", "mode", "msort", "unique", "unique_consecutive",
                     "searchsorted", "bucketize", "bincount", "histc", "quantile", "diff", "trace", "nonzero",
                     "argwhere", "masked_select", "tril_triu"])
    x = g.tensor(dtype=g.dtype() if name not in ("bincount",) else g.choice(INTS + ["int64"] * 3), writable=name == "tril_triu",
                 # (mode and unique sort with `<` in PyTorch, which leaves NaN anywhere: no NaN for them)
                 regime=g.choice(["small", "integral"] + (["special"] if name not in ("mode", "unique") else [])) if name != "bincount" else
                 g.choice(["positive", "small"]))
    nd = ndim_of(g, x)
    d = g.dim(nd)
    if name == "sort":
        kw = kwargs(descending=g.choice([True, False]) if g.p(0.5) else ...)
        if g.p(0.5):  # PyTorch 1.13 takes stable= only with a keyword dim
            kw = kwargs(stable=g.choice([True, False]), dim=d) + kw
        else:
            kw = f", {d}{kw}"
        # Unstable sorts may order ties either way: compare the values the indices pick.
        return f"(lambda r: (r.values, {x}.gather({d}, r.indices) if {x}.dim() else r.indices))" \
               f"(lib.sort({x}{kw}))"
    if name == "argsort":
        desc = kwargs(descending=g.choice([True, False])) if g.p(0.5) else ""
        return f"(lambda i: (i.dtype, {x}.gather({d}, i) if {x}.dim() else i))(lib.argsort({x}, {d}{desc}))"
    if name == "topk":
        size = shape_of(g, x)[d] if nd and -nd <= d < nd else 1
        k = g.int(0, size) if not g.p(0.05) else size + 1
        kw = kwargs(largest=g.choice([True, False]) if g.p(0.5) else ..., sorted=True)
        return f"(lambda r: (r.values, {x}.gather({d}, r.indices) if {x}.dim() else r.indices))" \
               f"(lib.topk({x}, {k}, {d}{kw}))"
    if name == "kthvalue":
        size = shape_of(g, x)[d] if nd and -nd <= d < nd else 1
        k = g.int(1, max(size, 1)) if not g.p(0.05) else g.choice([0, size + 1])
        return f"(lambda r: (r.values, {x}.gather({d}, r.indices.unsqueeze({d})).squeeze({d}) if {x}.dim() " \
               f"else r.indices))(lib.kthvalue({x}, {k}, {d}))"
    if name == "mode":
        return f"lib.mode({x}, {d}).values"
    if name == "msort":
        return f"lib.msort({x})"
    if name == "unique":
        kw = kwargs(sorted=True, return_inverse=g.choice([True, False]), return_counts=g.choice([True, False]),
                    dim=g.dim(nd) if g.p(0.2) else ...)
        return f"lib.unique({x}{kw})"
    if name == "unique_consecutive":
        kw = kwargs(return_inverse=g.choice([True, False]), return_counts=g.choice([True, False]),
                    dim=g.dim(nd) if g.p(0.2) else ...)
        return f"lib.unique_consecutive({x}{kw})"
    if name in ("searchsorted", "bucketize"):
        dt = g.choice(["float32", "float64", "int64", "int32"])
        seq = g.sorted_tensor(g.shape(ndim=1) if g.p(0.7) else shape_of(g, x)[:-1] + (g.int(0, 6),), dt)
        right = kwargs(right=g.choice([True, False])) if g.p(0.5) else ""
        if name == "bucketize":
            return f"lib.bucketize({x}, {seq}{right})"
        v = lit(g.scalar("small")) if g.p(0.1) else x
        return f"lib.searchsorted({seq}, {v}{right})"
    if name == "bincount":
        w = kwargs(weights=g.tensor(shape=shape_of(g, x), dtype=g.choice(["float32", "float64"]))) if g.p(0.3) else ""
        return f"lib.bincount({x}{w}{kwargs(minlength=g.choice([0, 3, 10]) if g.p(0.4) else ...)})"
    if name == "histc":
        lo, hi = sorted([g.choice([0, -3, 1, -1.5]), g.choice([0, 3, 5, 2.5])])
        return C(f"lib.histc({x}, {g.choice([1, 4, 10])}, {lo}, {hi})", tol=2.0)
    if name == "quantile":
        q = g.choice([0.0, 0.25, 0.5, 1.0, 0.7]) if g.p(0.7) else g.tensor(shape=(g.int(0, 3),), dtype="float32",
                                                                             regime="positive")
        kw = kwargs(dim=g.dim(nd) if g.p(0.6) else ..., interpolation=g.choice(
            ["linear", "lower", "higher", "midpoint", "nearest"]) if g.p(0.5) else ...)
        return C(f"lib.{g.choice(['quantile', 'nanquantile'])}({x}, {lit(q)}{kw})", tol=4.0)
    if name == "diff":
        kw = kwargs(n=g.choice([1, 2, 0]) if g.p(0.3) else ..., dim=g.dim(nd) if g.p(0.5) else ...)
        if g.p(0.2):
            kw += kwargs(prepend=g.tensor(shape=shape_of(g, x)[:-1] + (2,) if nd else ()))
        return f"lib.diff({x}{kw})"
    if name == "trace":
        return C(f"lib.trace({x})", accumulates=True)
    if name == "nonzero":
        return f"lib.nonzero({x}{kwargs(as_tuple=g.choice([True, False]))})"
    if name == "argwhere":
        return f"lib.argwhere({x})"
    if name == "masked_select":
        m = g.tensor(shape=g.broadcastable(shape_of(g, x)), dtype="bool")
        return f"lib.masked_select({x}, {m})"
    fn = g.choice(["tril", "triu"])
    form = g.choice(["lib.{f}({x}, {k})", "{x}.{f}({k})", "{x}.{f}_({k})"])
    return form.format(f=fn, x=x, k=g.int(-3, 3))


# ---- shapes and views -------------------------------------------------------------------------

def reshape_target(g, shape):
    """A size list with the same element count (one entry maybe -1), sometimes a wrong one."""
    n = int(np.prod(shape, dtype=np.int64))
    if g.p(0.08):
        return [g.int(1, 5), g.int(1, 5)]
    parts = []
    rest = n
    while rest > 1 and len(parts) < 4:
        divisors = [d for d in range(2, min(rest, 64) + 1) if rest % d == 0] or [rest]
        d = g.choice(divisors)
        parts.append(d)
        rest //= d
    if rest > 1:
        parts.append(rest)
    if n == 0:
        parts = [0] + [g.int(1, 3) for _ in range(g.int(0, 2))]
    parts = [int(p) for p in g.rng.permutation(parts)] if parts else []
    if g.p(0.2):
        parts.insert(g.int(0, len(parts)), 1)
    if parts and g.p(0.3) and n:
        parts[g.int(0, len(parts) - 1)] = -1
    return parts


@family(12)
def shape_op(g):
    huge = g.p(0.08)
    x = g.huge_view() if huge else g.tensor(grad=maybe_grad(g))
    shape = shape_of(g, x)
    nd = len(shape)
    d = g.dim(nd)
    name = g.choice(["view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze", "flatten",
                     "unflatten", "narrow", "select", "diagonal", "movedim", "swapaxes", "as_strided", "size",
                     "chunk", "split", "tensor_split", "unbind", "flip", "roll", "repeat", "tile", "rot90",
                     "contiguous", "clone", "broadcast_to", "diag", "diag_embed", "repeat_interleave", "atleast",
                     "to", "T", "expand_as", "flip_lr_ud", "split_with_sizes"])
    if huge and name in ("unbind", "flip", "roll", "repeat", "tile", "rot90", "clone", "diag", "diag_embed",
                         "repeat_interleave", "to", "flip_lr_ud", "split", "tensor_split", "split_with_sizes"):
        name = g.choice(["view", "select", "narrow", "expand", "permute", "contiguous", "diagonal"])
    s = shape[d] if nd and -nd <= d < nd else 1
    if name in ("view", "reshape"):
        target = reshape_target(g, shape)
        if huge and g.p(0.5):
            target = [-1]
        return f"{x}.{name}({lit(tuple(target)) if g.p(0.5) else ', '.join(map(str, target)) or '()'})"
    if name == "permute":
        perm = [int(i) for i in g.rng.permutation(nd)]
        if perm and g.p(0.05):
            perm[0] = perm[-1]
        return f"{x}.permute({lit(tuple(perm))})" if g.p(0.5) else f"lib.permute({x}, {lit(tuple(perm))})"
    if name == "transpose":
        return f"{x}.transpose({d}, {g.dim(nd)})"
    if name == "t":
        return f"{x}.t()"
    if name == "T":
        return f"{x}.T" if nd == 2 or g.p(0.2) else f"{x}.t()"
    if name in ("expand", "broadcast_to", "expand_as"):
        target = [g.choice([si, si, -1, 1, g.int(2, 4)]) if si == 1 else g.choice([si, si, si, -1, si + 1])
                  for si in shape]
        target = [g.int(1, 3) for _ in range(g.int(0, 2))] + target
        if g.p(0.1):
            target = [g.choice([2**62, 2**40, 2**31])] + target
        if name == "expand_as" and max(target, default=0) < 2**20:
            y = g.tensor(shape=tuple(max(t, 0) for t in target))
            return f"{x}.expand_as({y})"
        if name == "broadcast_to":
            return f"lib.broadcast_to({x}, {lit(tuple(target))})"
        return f"{x}.expand({', '.join(map(str, target)) or '()'})"
    if name == "squeeze":
        return f"{x}.squeeze({d})" if g.p(0.6) else f"lib.squeeze({x})"
    if name == "unsqueeze":
        return f"{x}.unsqueeze({g.dim(nd + 1)})"
    if name == "flatten":
        return f"lib.flatten({x}{kwargs(start_dim=g.dim(nd) if g.p(0.6) else ..., end_dim=g.dim(nd) if g.p(0.6) else ...)})"
    if name == "unflatten":
        sizes = reshape_target(g, (s,))
        return f"{x}.unflatten({d}, {lit(tuple(sizes))})"
    if name == "narrow":
        start = g.int(-s, s) if not g.p(0.05) else s + 1
        length = g.int(0, max(0, s - (start if start >= 0 else start + s)))
        return f"{x}.narrow({d}, {start}, {length})" if g.p(0.7) else f"lib.narrow({x}, {d}, {start}, {length})"
    if name == "select":
        i = g.int(-s, s - 1) if s and not g.p(0.05) else g.choice([s, -s - 1])
        return f"{x}.select({d}, {i})"
    if name == "diagonal":
        return f"lib.diagonal({x}{kwargs(offset=g.int(-3, 3), dim1=g.dim(nd), dim2=g.dim(nd))})"
    if name in ("movedim", "swapaxes"):
        return f"lib.{name}({x}, {d}, {g.dim(nd)})"
    if name == "as_strided":
        size = tuple(g.int(0, 4) for _ in range(g.int(0, 3)))
        stride = tuple(g.int(0, 3) for _ in size)
        offset = g.int(0, 4)
        return f"lib.as_strided({x}, {lit(size)}, {lit(stride)}, {offset})"
    if name == "size":
        return g.choice([f"{x}.size()", f"{x}.shape", f"{x}.size({d})", f"{x}.stride()", f"{x}.numel()",
                         f"{x}.dim()", f"len({x})", f"{x}.is_contiguous()", f"{x}.storage_offset()"])
    if name == "chunk":
        return f"lib.chunk({x}, {g.choice([1, 2, 3, 5, 0])}, {d})"
    if name == "split":
        size = g.choice([1, 2, 3, 0]) if g.p(0.6) else tuple(g.int(0, 3) for _ in range(g.int(1, 3)))
        if isinstance(size, int) and 0 < size and s // size > 512:
            size = s // 8
        return f"lib.split({x}, {lit(size)}, {d})"
    if name == "split_with_sizes":
        sizes = []
        left = s
        while left > 0:
            sizes.append(g.int(0, left))
            left -= sizes[-1]
        if g.p(0.1):
            sizes.append(1)
        return f"{x}.split_with_sizes({lit(sizes)}, {d})"
    if name == "tensor_split":
        arg = g.choice([1, 2, 3]) if g.p(0.5) else [g.int(0, s + 1) for _ in range(g.int(1, 3))]
        return f"lib.tensor_split({x}, {lit(arg)}, {d})"
    if name == "unbind":  # (at most 512 pieces: 100000 of them timed the worker, not the op)
        return f"lib.unbind({x}, {d})" if s <= 512 else f"lib.unbind({x}.narrow({d}, 0, 512), {d})"
    if name == "flip":
        dims = g.dims(nd)
        return f"lib.flip({x}, {lit(dims if isinstance(dims, tuple) else (d,))})"
    if name == "flip_lr_ud":
        return f"lib.{g.choice(['fliplr', 'flipud'])}({x})"
    if name == "roll":
        if g.p(0.3):
            return f"lib.roll({x}, {g.int(-5, 5)})"
        dims = tuple(g.dim(nd) for _ in range(g.int(1, 2)))
        return f"lib.roll({x}, {lit(tuple(g.int(-7, 7) for _ in dims))}, {lit(dims)})"
    if name in ("repeat", "tile"):
        reps = [g.choice([1, 1, 2, 3, 0]) for _ in range(max(nd, 1) - (1 if name == "tile" and g.p(0.5) else 0))]
        reps = [g.int(1, 2) for _ in range(g.int(0, 1))] + reps
        if reps and g.p(0.05):
            reps[0] = -1
        return f"{x}.{name}({lit(tuple(reps))})" if name == "repeat" else f"lib.tile({x}, {lit(tuple(reps))})"
    if name == "rot90":
        return f"lib.rot90({x}, {g.int(-2, 5)}, {lit((d, g.dim(nd)))})"
    if name == "contiguous":
        return f"{x}.contiguous()"
    if name == "clone":
        return f"lib.clone({x})" if g.p(0.5) else f"{x}.clone()"
    # (diag / diag_embed of a long last dim and split into pieces of 1 make n^2 elements or n
    # tensors: their results must stay small, as the inputs do)
    if name == "diag":
        x = x if 1 <= nd <= 2 and max(shape) <= 512 else g.tensor(shape=g.shape(max_ndim=2))
        return f"lib.diag({x}, {g.int(-2, 2)})"
    if name == "diag_embed":
        x = x if not nd or shape[-1] <= 512 else g.tensor(shape=g.shape())
        return f"lib.diag_embed({x}{kwargs(offset=g.int(-2, 2))})"
    if name == "repeat_interleave":
        if g.p(0.5):
            return f"lib.repeat_interleave({x}, {g.choice([0, 1, 2, 3])}{kwargs(dim=d if g.p(0.6) else ...)})"
        reps = g.tensor(shape=(s,) if g.p(0.8) else (1,), dtype="int64", regime="positive", layout="contiguous")
        return f"lib.repeat_interleave({x}, {reps}, {d})"
    if name == "atleast":
        return f"lib.atleast_{g.int(1, 3)}d({x})"
    return g.choice([f"{x}.to({dtype_code(g.dtype())})", f"{x}.{g.choice(['float', 'double', 'half', 'bfloat16', 'int', 'long', 'short', 'bool', 'byte', 'char'])}()",
                     f"{x}.type_as({g.tensor(shape=(1,))})"])


@family(5)
def join_op(g):
    name = g.choice(["cat", "cat", "stack", "hstack", "vstack", "dstack", "column_stack", "meshgrid",
                     "broadcast_tensors"])
    shape = g.shape(max_ndim=3)
    count = g.int(1, 4)
    tensors = []
    d = g.dim(len(shape) + (1 if name == "stack" else 0))
    for _ in range(count):
        s = list(shape)
        if name == "cat" and s and -len(s) <= d < len(s) and g.p(0.7):
            s[d] = g.int(0, 4)
        if g.p(0.08):
            s = [0]  # PyTorch's legacy empty 1-D tensor, skipped by cat
        if name in ("meshgrid",):
            s = [g.int(0, 4)]
        if name == "broadcast_tensors":
            s = g.broadcastable(shape)
        tensors.append(g.tensor(shape=tuple(s), dtype=g.dtype() if g.p(0.3) else None, grad=g.p(0.05)))
    seq = f"[{', '.join(map(str, tensors))}]" if g.p(0.8) else f"({', '.join(map(str, tensors))},)"
    if name in ("cat", "stack"):
        out = ""
        if g.p(0.1):
            out = kwargs(out=g.tensor(shape=g.shape(max_ndim=2), writable=True))
        return f"lib.{name}({seq}, {d}{out})" if g.p(0.7) else f"lib.{name}({seq}, dim={d}{out})"
    if name == "meshgrid":
        return f"lib.meshgrid({seq}{kwargs(indexing=g.choice(['ij', 'xy']))})"
    if name == "broadcast_tensors":
        return f"lib.broadcast_tensors({', '.join(map(str, tensors))})"
    return f"lib.{name}({seq})"


# ---- indexing -------------------------------------------------------------------------------

def index_item(g, size, tensor_ok=True, unique=False, basic=False):
    """One element of an index tuple for a dim of this size (basic: ints, slices, None and
    Ellipsis only)."""
    r = g.rng.random() * (0.66 if basic else 1.0)
    if r < 0.25:
        return lit(g.int(-size, size - 1) if size and not g.p(0.05) else g.choice([size, -size - 1, 2**40]))
    if r < 0.55:
        start = g.choice([None, g.int(-size - 1, size + 1)])
        stop = g.choice([None, g.int(-size - 1, size + 1), 2**62])
        step = g.choice([None, None, 1, 2, 3]) if not g.p(0.03) else g.choice([0, -1])
        return ":".join("" if v is None else str(v) for v in (start, stop, step)).rstrip(":") or ":"
    if r < 0.62:
        return "None"
    if r < 0.66:
        return "..."
    if not tensor_ok:
        return ":"
    if r < 0.8:
        return str(g.index_tensor(g.shape(max_ndim=2, max_numel=8), size, unique=unique,
                                  dtype=g.choice(["int64"] * 6 + ["int32", "int16", "uint8", "float32"])))
    if r < 0.87:
        return lit([g.int(-size, size - 1) if size else 0 for _ in range(g.int(0, 3))])
    if r < 0.93:
        return g.choice(["True", "False"])
    return str(g.tensor(shape=(size,), dtype="bool", layout="contiguous"))


def index_tuple(g, shape, unique=False, basic=False):
    items = []
    dim = 0
    for _ in range(g.int(1, max(1, min(len(shape) + 1, 4)))):
        size = shape[dim] if dim < len(shape) else 1
        items.append(index_item(g, size, tensor_ok=not unique or not any(i.startswith("t") for i in items),
                                unique=unique, basic=basic))
        if items[-1] not in ("None", "True", "False"):
            dim += 1
    return ", ".join(items)


@family(10)
def getitem(g):
    huge = g.p(0.05)
    x = g.huge_view() if huge else g.tensor(grad=maybe_grad(g))
    idx = index_tuple(g, shape_of(g, x), basic=huge)  # a huge input: views only
    return f"{x}[{idx}]"


@family(7)
def setitem(g):
    x = g.tensor(writable=True)
    shape = shape_of(g, x)
    idx = index_tuple(g, shape, unique=True)
    r = g.rng.random()
    if r < 0.5:
        v = lit(g.scalar())
    elif r < 0.65:
        v = g.tensor(shape=())
    else:
        v = g.tensor(shape=g.choice([(1,), shape[-1:], shape[1:], g.shape(max_ndim=2)]))
    return C(f"{x}[{idx}] = {v}", stmt=True)


def gather_index(g, shape, dim, unique=False):
    """An index for gather/scatter along dim: sizes up to shape's (or larger, rarely)."""
    nd = len(shape)
    d = dim % nd if nd and -nd <= dim < nd else 0
    size = shape[d] if nd else 1
    index_shape = [g.int(0, s) if i != d else g.int(0, max(size, 1) + (1 if g.p(0.05) else 0))
                   for i, s in enumerate(shape)] if nd else []
    if g.p(0.04):
        index_shape = index_shape + [2]
    if unique and size and nd:
        index_shape[d] = min(index_shape[d], size)
        rows = np.argsort(g.rng.random(tuple(index_shape[:d]) + (size,) + tuple(index_shape[d + 1:])), axis=d)
        values = np.take(rows, np.arange(index_shape[d]), axis=d) if nd else rows
        values = np.where(g.rng.random(values.shape) < 0.2, values - size, values)
    else:
        values = g.rng.integers(-size, max(size, 1), size=tuple(index_shape)) if size else \
            np.zeros(tuple(index_shape), dtype=np.int64)
    if g.p(0.05) and values.size:
        values = values.copy()
        values.reshape(-1)[0] = g.choice([size, -size - 1])
    from fuzz_inputs import TensorSpec
    name = f"t{len(g.specs)}"
    dtype = "int64" if not g.p(0.05) else "int32"
    g.specs[name] = TensorSpec(np.asarray(values).astype(dtype), dtype)
    return Code(name)


@family(10)
def index_op(g):
    # (scatter's reduce= is not generated: plugflow raises NotImplementedError for it, documented
    # and tested in test_indexing_ops.py)
    name = g.choice(["gather", "scatter", "scatter_value", "scatter_add", "index_select",
                     "index_add", "index_fill", "index_put", "take", "take_along_dim", "index_copy_like"])
    writable = name not in ("gather", "index_select", "take", "take_along_dim")
    x = g.tensor(writable=writable, grad=maybe_grad(g, name in ("gather", "index_select", "take")))
    shape = shape_of(g, x)
    nd = len(shape)
    d = g.dim(nd)
    s = shape[d] if nd and -nd <= d < nd else 1
    inplace = g.p(0.3) and writable
    sfx = "_" if inplace else ""
    if name == "gather":
        return f"lib.gather({x}, {d}, {gather_index(g, shape, d)})"
    if name == "take_along_dim":
        return f"lib.take_along_dim({x}, {gather_index(g, shape, d)}, {d})"
    if name in ("scatter", "scatter_value", "scatter_add"):
        unique = name in ("scatter", "scatter_value")
        idx = gather_index(g, shape, d, unique=unique)
        if name == "scatter_value":
            return f"{x}.scatter{sfx}({d}, {idx}, {lit(g.scalar())})"
        src_shape = tuple(max(a, b) for a, b in zip(shape_of(g, idx), shape)) if g.p(0.5) else shape_of(g, idx)
        src = g.tensor(shape=src_shape, dtype=g.specs[str(x)].dtype if g.p(0.85) else g.dtype())
        if name == "scatter_add":
            return C(f"{x}.scatter_add{sfx}({d}, {idx}, {src})", tol=4.0)
        return f"{x}.scatter{sfx}({d}, {idx}, {src})"
    if name == "index_select":
        idx = g.index_tensor(g.choice([(g.int(0, 6),), ()]), s, dtype=g.choice(["int64"] * 5 + ["int32"]))
        return f"lib.index_select({x}, {d}, {idx})"
    if name == "take":
        n = int(np.prod(shape, dtype=np.int64))
        return f"lib.take({x}, {g.index_tensor(g.shape(max_ndim=2, max_numel=10), n)})"
    if name == "index_add":
        idx = g.index_tensor((g.int(0, 5),), s)
        src_shape = list(shape)
        if nd and -nd <= d < nd:
            src_shape[d] = shape_of(g, idx)[0]
        src = g.tensor(shape=tuple(src_shape), dtype=g.specs[str(x)].dtype if g.p(0.85) else g.dtype())
        alpha = kwargs(alpha=g.scalar()) if g.p(0.3) else ""
        return C(f"{x}.index_add{sfx}({d}, {idx}, {src}{alpha})", tol=4.0)
    if name == "index_fill":
        idx = g.index_tensor(g.choice([(g.int(0, 4),), ()]), s)
        v = lit(g.scalar()) if g.p(0.8) else g.tensor(shape=())
        return f"{x}.index_fill{sfx}({d}, {idx}, {v})"
    if name == "index_put":
        if not nd:
            return f"{x}.index_put{sfx}(({g.index_tensor((1,), 1)},), {g.tensor(shape=())})"
        count = g.int(1, min(nd, 2))
        n = g.int(0, 4)
        accumulate = g.choice([True, False])
        idxs = [g.index_tensor((n,), shape[i], unique=not accumulate) for i in range(count)]
        if not accumulate and count > 1:
            idxs = idxs[:1]
        v = g.tensor(shape=g.choice([(), (1,), (n,) + tuple(shape[len(idxs):])]),
                     dtype=g.specs[str(x)].dtype if g.p(0.9) else g.dtype())
        return C(f"{x}.index_put{sfx}(({', '.join(map(str, idxs))},), {v}{kwargs(accumulate=accumulate)})", tol=4.0)
    # a copy into positions picked by an index: index_put with a bool mask
    m = g.tensor(shape=shape, dtype="bool", layout="contiguous")
    return f"{x}.masked_fill({m}, {lit(g.scalar())})" if g.p(0.5) else f"{x}.index_put(({m},), {g.tensor(shape=())})"


# ---- creation -------------------------------------------------------------------------------

def creation_shape(g):
    """A small shape, or (rarely) one that must be refused before any allocation."""
    if g.p(0.1):
        shape = tuple(g.choice(HUGE_SIZES + [0, 3]) for _ in range(g.int(1, 3)))
        # (beyond the worker's 8 GiB even at a byte an element, unless empty: 2**31 int8 elements
        # fit, and PyTorch's result held beside plugflow's exhausted the worker, not the op)
        if 0 not in shape and math.prod(shape) < 2**34:
            shape += (2**36,)
        return shape
    return g.shape(max_numel=4096)


def dtype_kw(g, prob=0.6, pool=None):
    return kwargs(dtype=dtype_code(g.dtype(pool))) if g.p(prob) else ""


@family(6)
def creation(g):
    name = g.choice(["zeros", "ones", "full", "empty", "like", "arange", "linspace", "eye", "tensor", "tril_indices",
                     "randperm", "rand", "randint", "new", "scalar_tensor"])
    shape = creation_shape(g)
    if name in ("zeros", "ones"):
        form = g.choice([f"lib.{name}({lit(shape)}{dtype_kw(g)})", f"lib.{name}(*{lit(shape)}{dtype_kw(g)})"])
        return form
    if name == "empty":
        return f"(lambda r: (r.shape, r.dtype))(lib.empty({lit(shape)}{dtype_kw(g)}))"
    if name == "full":
        return f"lib.full({lit(shape)}, {lit(g.scalar())}{dtype_kw(g)})"
    if name == "like":
        x = g.tensor()
        fn = g.choice(["zeros_like", "ones_like", "full_like", "empty_like"])
        arg = f", {lit(g.scalar())}" if fn == "full_like" else ""
        if fn == "empty_like":
            return f"(lambda r: (r.shape, r.dtype))(lib.empty_like({x}{dtype_kw(g, 0.3)}))"
        return f"lib.{fn}({x}{arg}{dtype_kw(g, 0.3)})"
    if name == "arange":
        start = g.choice([0, 1, -3, 2.5, -0.5, 10])
        end = g.choice([0, 5, 10, -4, 3.7, 100]) if not g.p(0.05) else g.choice([2**62, float("inf"), float("nan")])
        step = g.choice([1, 2, -1, 0.5, -0.7, 3]) if not g.p(0.05) else g.choice([0, 1e-300])
        if g.p(0.3):
            return f"lib.arange({lit(end)}{dtype_kw(g, 0.3)})"
        return f"lib.arange({lit(start)}, {lit(end)}, {lit(step)}{dtype_kw(g, 0.3)})"
    if name == "linspace":
        steps = g.choice([0, 1, 2, 5, 17, 100]) if not g.p(0.05) else g.choice([-1, 2**62])
        return C(f"lib.linspace({lit(g.choice([0, -1.5, 3, 1e10]))}, {lit(g.choice([1, 5, -2.5, 7]))}, {steps}"
                 f"{dtype_kw(g, 0.4)})", tol=4.0)
    if name == "eye":
        n = g.choice([0, 1, 3, 5]) if not g.p(0.05) else g.choice([-1, 2**40])
        m = f", {g.choice([0, 2, 4, 7])}" if g.p(0.5) else ""
        return f"lib.eye({n}{m}{dtype_kw(g, 0.4)})"
    if name == "tensor":
        data = g.choice([[], [[]], 1, 2.5, True, [1, 2.5], [True, 2], [[1, 2], [3, 4]], [float("nan"), float("inf")],
                         [1, True, 3.0], [300, -1], [2**63 - 1], [[1], [2, 3]], [[[]]], 1e40, -2**63, [0.1, 2**40]])
        return f"lib.tensor({lit(data)}{dtype_kw(g, 0.5)})"
    if name == "tril_indices":
        return f"lib.{g.choice(['tril_indices', 'triu_indices'])}({g.int(0, 5)}, {g.int(0, 5)}, {g.int(-3, 3)})"
    if name == "randperm":
        n = g.choice([0, 1, 5, 100]) if not g.p(0.05) else g.choice([-1, 2**62])
        return f"(lambda r: (r.dtype, r.sort().values))(lib.randperm({n}{dtype_kw(g, 0.3, ['int64', 'int32', 'float32', 'float64'])}))"
    if name == "rand":
        fn = g.choice(["rand", "randn"])
        return f"(lambda r: (r.shape, r.dtype, bool(r.isfinite().all())))(lib.{fn}({lit(shape)}{dtype_kw(g, 0.4, FLOATS)}))"
    if name == "randint":
        lo, hi = g.choice([(0, 5), (-3, 3), (0, 1), (5, 5), (10, 2), (0, 256), (-2**63, 2**63 - 1)])
        return f"(lambda r: (r.shape, r.dtype, bool(((r >= {lo}) & (r < {hi})).all())))" \
               f"(lib.randint({lo}, {hi}, {lit(shape)}{dtype_kw(g, 0.4)}))"
    if name == "scalar_tensor":
        return f"lib.scalar_tensor({lit(g.scalar())}{dtype_kw(g, 0.5)})"
    x = g.tensor()
    fn = g.choice(["new_zeros", "new_ones", "new_full", "new_tensor", "new_empty"])
    if fn == "new_full":
        return f"{x}.new_full({lit(shape)}, {lit(g.scalar())}{dtype_kw(g, 0.3)})"
    if fn == "new_tensor":
        return f"{x}.new_tensor({lit(g.choice([[1, 2], 3.5, [[True]], []]))}{dtype_kw(g, 0.3)})"
    if fn == "new_empty":
        return f"(lambda r: (r.shape, r.dtype))({x}.new_empty({lit(shape)}))"
    return f"{x}.{fn}({lit(shape)}{dtype_kw(g, 0.3)})"


# ---- nn.functional --------------------------------------------------------------------------

ACTIVATIONS = ["relu", "relu6", "gelu", "silu", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid",
               "hardswish", "mish", "softplus", "softshrink", "hardshrink", "tanhshrink", "logsigmoid", "sigmoid",
               "tanh", "threshold", "softsign", "glu", "normalize", "softmin"]


@family(8)
def activation(g):
    name = g.choice(ACTIVATIONS)
    g.bounded = name == "normalize"
    inplace = name in ("relu", "elu", "celu", "leaky_relu", "hardtanh", "selu", "threshold", "relu6",
                       "hardsigmoid", "hardswish", "silu", "mish") and g.p(0.15)
    # (normalize of float16: PyTorch has no float16 clamp_min, and its eps underflows there,
    # so no reference exists)
    dtype = g.choice(["float32", "float64"]) if name == "normalize" else g.choice(FLOATS + FLOATS + [g.dtype()])
    x = g.tensor(dtype=dtype, grad=maybe_grad(g, not inplace), writable=inplace)
    nd = ndim_of(g, x)
    kw = ""
    if name == "gelu" and g.p(0.5):
        kw = kwargs(approximate=g.choice(["none", "tanh"]))
    elif name in ("elu", "celu") and g.p(0.5):
        kw = kwargs(alpha=g.choice([1.0, 0.5, 2.0, 0.0]))
    elif name == "leaky_relu" and g.p(0.5):
        kw = kwargs(negative_slope=g.choice([0.01, 0.2, -1.0, 0.0]))
    elif name == "hardtanh" and g.p(0.5):
        kw = kwargs(min_val=g.choice([-1.0, -2.0, 0.0]), max_val=g.choice([1.0, 2.0, 0.5]))
    elif name == "softplus" and g.p(0.5):
        kw = kwargs(beta=g.choice([1, 2, 0.5]), threshold=g.choice([20, 1, 5]))
    elif name in ("softshrink", "hardshrink") and g.p(0.5):
        kw = kwargs(lambd=g.choice([0.5, 0.0, 1.5]))
    elif name == "threshold":
        kw = ", " + lit(g.choice([0.0, 0.5, -1.0, 1e40])) + ", " + lit(g.choice([0.0, -1.0, 20.0, float("nan")]))
    elif name == "glu":
        kw = kwargs(dim=g.dim(nd))
    elif name == "normalize":
        kw = kwargs(p=g.choice([1.0, 2.0, 3.0, float("inf")]), dim=g.dim(nd))
    elif name == "softmin":
        kw = kwargs(dim=g.dim(nd))
    if inplace:
        kw += kwargs(inplace=True)
    return C(f"F.{name}({x}{kw})", tol=2.0)


@family(3)
def pad(g):
    mode = g.choice(["constant", "constant", "reflect", "replicate", "circular"])
    nd_pad = g.int(1, 3)
    x = g.tensor(shape=g.shape(min_ndim=nd_pad if g.p(0.9) else 0, max_ndim=4), grad=maybe_grad(g))
    pads = [g.choice([0, 1, 2, 3, -1]) for _ in range(2 * nd_pad)]
    if g.p(0.05):
        pads[0] = g.choice([2**62, 100])
    value = kwargs(value=g.scalar()) if mode == "constant" and g.p(0.5) else ""
    return f"F.pad({x}, {lit(tuple(pads))}, mode={lit(mode)}{value})"


@family(3)
def one_hot_embedding(g):
    if g.p(0.5):
        n = g.choice([-1, 1, 3, 7])
        x = g.tensor(dtype=g.choice(["int64"] * 6 + ["int32", "float32"]), regime="positive")
        return f"F.one_hot({x}, {n})"
    num, dim = g.int(1, 6), g.int(0, 5)
    w = g.tensor(shape=(num, dim), dtype=g.choice(["float32", "float64"]), grad=g.p(0.3))
    idx = g.index_tensor(g.shape(max_ndim=2, max_numel=20), num, bad=0.05)
    kw = kwargs(padding_idx=g.int(-num, num - 1)) if g.p(0.3) else ""
    return C(f"F.embedding({idx}, {w}{kw})")


@family(5)
def conv(g):
    dims = g.int(1, 2)
    transposed = g.p(0.25)
    groups = g.choice([1, 1, 1, 2, 3])
    cin = groups * g.int(1, 3)
    cout = groups * g.int(1, 3)
    batch = g.int(0, 3) if g.p(0.9) else None
    spatial = tuple(g.int(1, 9) for _ in range(dims))
    k = tuple(g.int(1, 4) for _ in range(dims))
    dtype = g.choice(["float32", "float32", "float64", "float16", "bfloat16"])
    grad = g.p(0.2)
    x = g.tensor(shape=((batch,) if batch is not None else ()) + (cin,) + spatial, dtype=dtype, grad=grad,
                 regime=g.choice(PRODUCT_REGIMES))
    wshape = (cin, cout // groups) + k if transposed else (cout, cin // groups) + k
    w = g.tensor(shape=wshape, dtype=dtype, layout=g.choice(["contiguous", "permuted"]), grad=grad,
                 regime=g.choice(PRODUCT_REGIMES))
    b = g.tensor(shape=(cout,), dtype=dtype) if g.p(0.5) else None
    kw = kwargs(stride=g.choice([1, 2, 3]) if g.p(0.4) else ...,
                padding=g.choice([0, 1, 2, "same", "valid"] if not transposed else [0, 1, 2]) if g.p(0.5) else ...,
                dilation=g.choice([1, 2]) if g.p(0.3) else ..., groups=groups)
    if "same" in kw and "stride" in kw:
        kw = kw.replace("padding='same'", "padding=0")
    if transposed and g.p(0.3):
        kw += kwargs(output_padding=g.choice([0, 1]))
    if re.search(r"padding=(\d*[1-9]|'same')", kw):
        # (a NaN weight tap that meets only padding: PyTorch's im2col multiplies it by the padded
        # zero, plugflow's kernel never reads padding; which one holds is the backend's choice.
        # A transposed convolution's input gradient is a convolution over the cropped output: the
        # same holds for its padding)
        # (and a transposed convolution's weight gradient pairs each input value with the
        # cropped output's gradient: a NaN input meets PyTorch's padded zeros the same way)
        for spec in [g.specs[str(w)]] + ([g.specs[str(x)]] if transposed else []):
            spec.data = np.where(np.isnan(spec.data), 0, spec.data).astype(spec.data.dtype)
    fn = f"conv_transpose{dims}d" if transposed else f"conv{dims}d"
    return C(f"F.{fn}({x}, {w}, {lit(b) if b is not None else 'None'}{kw})", tol=8.0, accumulates=True)


@family(4)
def pool(g):
    dims = g.int(1, 2)
    kind = g.choice(["max", "avg", "adaptive_avg", "adaptive_max", "interpolate"])
    g.bounded = kind in ("interpolate", "avg", "adaptive_avg")  # (averages sum first)
    batch = (g.int(0, 2),) if g.p(0.8) else ()
    x = g.tensor(shape=batch + (g.int(1, 3),) + tuple(g.int(1, 9) for _ in range(dims)),
                 dtype=g.choice(["float32", "float32", "float64", "bfloat16", "float16", "int64"]), grad=maybe_grad(g))
    if kind in ("max", "avg"):
        kernel = g.int(1, 4)
        kw = kwargs(stride=g.choice([1, 2, 3]) if g.p(0.5) else ..., padding=g.choice([0, 1, 2]) if g.p(0.4) else ...,
                    ceil_mode=g.choice([True, False]) if g.p(0.4) else ...)
        if kind == "max":
            kw += kwargs(dilation=g.choice([1, 2]) if g.p(0.3) else ..., return_indices=g.choice([True, False])
                         if g.p(0.3) else ...)
        else:
            kw += kwargs(count_include_pad=g.choice([True, False]) if g.p(0.4) else ...)
            if dims == 2 and g.p(0.2):
                kw += kwargs(divisor_override=g.choice([1, 3]))
        return C(f"F.{kind}_pool{dims}d({x}, {kernel}{kw})", tol=2.0)
    if kind in ("adaptive_avg", "adaptive_max"):
        out = g.int(1, 5) if dims == 1 else (g.int(1, 5), g.int(1, 5))
        return C(f"F.{kind}_pool{dims}d({x}, {lit(out)})", tol=2.0)
    mode = g.choice(["nearest", "linear" if dims == 1 else "bilinear"])
    if mode != "nearest":  # (finite values: a weight of 0 times an infinity is NaN, and whether a
        # weight is exactly 0 depends on how the source coordinate is rounded)
        g.specs[str(x)].data = random_values(g.rng, shape_of(g, x), g.specs[str(x)].dtype, "small")
    if g.p(0.5):
        size = kwargs(size=g.int(1, 12) if dims == 1 else (g.int(1, 12), g.int(1, 12)))
    else:
        size = kwargs(scale_factor=g.choice([2, 0.5, 1.7, 3]))
    ac = kwargs(align_corners=g.choice([True, False])) if mode != "nearest" and g.p(0.5) else ""
    return C(f"F.interpolate({x}{size}, mode={lit(mode)}{ac})", tol=4.0)


@family(4)
def normalization(g):
    # (the affine weight and bias are finite: PyTorch folds them into w / std and b - mean * w /
    # std, so an infinite one gives inf - inf there, an artefact of the folding)
    g.bounded = True
    kind = g.choice(["layer_norm", "batch_norm", "group_norm", "instance_norm"])
    dtype = g.choice(["float32", "float32", "float64", "bfloat16"])
    grad = maybe_grad(g)
    if kind == "layer_norm":
        x = g.tensor(shape=g.shape(min_ndim=1), dtype=dtype, grad=grad)
        shape = shape_of(g, x)
        ns = shape[len(shape) - g.int(1, len(shape)):]
        affine = g.p(0.5)
        w = g.tensor(shape=ns, dtype=dtype, regime="small") if affine else None
        b = g.tensor(shape=ns, dtype=dtype, regime="small") if affine and g.p(0.7) else None
        return C(f"F.layer_norm({x}, {lit(tuple(ns))}, {lit(w)}, {lit(b)}{kwargs(eps=g.choice([1e-5, 0.1]))})", tol=8.0,
                 accumulates=True)
    c = g.int(1, 4)
    x = g.tensor(shape=(g.int(1, 4), c) + tuple(g.int(1, 5) for _ in range(g.int(0, 2))), dtype=dtype, grad=grad)
    if kind == "group_norm":
        groups = g.choice([d for d in range(1, c + 1) if c % d == 0] + ([3] if g.p(0.1) else []))
        w = g.tensor(shape=(c,), dtype=dtype, regime="small") if g.p(0.5) else None
        return C(f"F.group_norm({x}, {groups}, {lit(w)})", tol=8.0, accumulates=True)
    if kind == "instance_norm":
        return C(f"F.instance_norm({x})", tol=8.0, accumulates=True)
    training = g.choice([True, False])
    rm = g.tensor(shape=(c,), dtype=dtype, regime="small", layout="contiguous")
    rv = g.tensor(shape=(c,), dtype=dtype, regime="positive", layout="contiguous")
    w = g.tensor(shape=(c,), dtype=dtype, regime="small") if g.p(0.5) else None
    return C(f"F.batch_norm({x}, {rm}, {rv}, {lit(w)}, None, {training}, {g.choice([0.1, 0.0, 1.0])})", tol=8.0,
             accumulates=True)


@family(5)
def loss(g):
    kind = g.choice(["cross_entropy", "cross_entropy_prob", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
                     "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
                     "cosine_similarity", "pairwise_distance"])
    g.bounded = kind in ("cosine_similarity", "pairwise_distance")
    dtype = g.choice(["float32", "float64"])
    reduction = kwargs(reduction=g.choice(["mean", "sum", "none"])) if g.p(0.6) else ""
    grad = maybe_grad(g)
    if kind in ("cross_entropy", "nll_loss"):
        n, c = g.int(0, 5), g.int(1, 5)
        extra = (g.int(1, 3),) if g.p(0.2) else ()
        x = g.tensor(shape=(n, c) + extra if g.p(0.9) else (c,), dtype=dtype, grad=grad)
        t = g.index_tensor((n,) + extra if ndim_of(g, x) > 1 else (), c, bad=0.05)
        kw = reduction + (kwargs(ignore_index=g.choice([-100, 0, 1])) if g.p(0.3) else "")
        if g.p(0.3):
            kw += kwargs(weight=g.tensor(shape=(c,), dtype=dtype, regime="positive"))
        if kind == "cross_entropy" and g.p(0.3):
            kw += kwargs(label_smoothing=g.choice([0.0, 0.1, 0.5]))
        return C(f"F.{kind}({x}, {t}{kw})", tol=8.0, accumulates=True)
    if kind == "cross_entropy_prob":
        n, c = g.int(1, 4), g.int(1, 5)
        x = g.tensor(shape=(n, c), dtype=dtype, grad=grad)
        t = g.tensor(shape=(n, c), dtype=dtype, regime="positive")
        return C(f"F.cross_entropy({x}, {t}{reduction})", tol=8.0, accumulates=True)
    shape = g.shape()
    x = g.tensor(shape=shape, dtype=dtype, grad=grad)
    if kind in ("binary_cross_entropy",):
        x = g.tensor(shape=shape, dtype=dtype, regime="positive", grad=grad)
        return C(f"F.binary_cross_entropy({x} / 5, {g.tensor(shape=shape, dtype=dtype, regime='positive')} / 5{reduction})",
                 tol=8.0, accumulates=True)
    y = g.tensor(shape=shape if g.p(0.9) else g.broadcastable(shape), dtype=dtype)
    if kind == "smooth_l1_loss" and g.p(0.5):
        reduction += kwargs(beta=g.choice([1.0, 0.5, 0.0]))
    if kind == "huber_loss" and g.p(0.5):
        reduction += kwargs(delta=g.choice([1.0, 0.5, 2.0]))
    if kind == "kl_div" and g.p(0.5):
        reduction += kwargs(log_target=g.choice([True, False]))
    if kind == "cosine_similarity":
        return C(f"F.cosine_similarity({x}, {y}{kwargs(dim=g.dim(len(shape)))})", tol=8.0, accumulates=True)
    if kind == "pairwise_distance":
        return C(f"F.pairwise_distance({x}, {y})", tol=8.0, accumulates=True)
    return C(f"F.{kind}({x}, {y}{reduction})", tol=8.0, accumulates=True)


# ---- matrix products ------------------------------------------------------------------------

@family(6)
def matmul(g):
    name = g.choice(["matmul", "mm", "bmm", "mv", "dot", "vdot", "outer", "addmm", "addmv", "baddbmm", "addbmm",
                     "einsum", "tensordot", "cross", "cdist", "linear", "operator"])
    dtype = g.choice(["float32", "float32", "float64", "float64", "int64", "float16", "bfloat16", "int32"])
    if g.p(0.1):
        dtype = g.dtype()
    n, m, k, b = (g.int(0, 6) if g.p(0.15) else g.int(1, 9) for _ in range(4))
    grad = maybe_grad(g)
    acc = dict(tol=8.0, accumulates=True)

    def t(shape, dt=dtype):
        if g.p(0.04):  # a mismatched size
            shape = tuple(s + 1 for s in shape)
        return g.tensor(shape=shape, dtype=dt if not g.p(0.05) else g.dtype(), regime=g.choice(PRODUCT_REGIMES),
                        grad=grad)

    if name in ("matmul", "operator"):
        shapes = g.choice([((k,), (k,)), ((n, k), (k,)), ((k,), (k, m)), ((n, k), (k, m)), ((b, n, k), (k, m)),
                           ((b, n, k), (b, k, m)), ((2, 1, n, k), (b, k, m)), ((k,), (b, k, m)), ((b, n, k), (k,))])
        x, y = t(shapes[0]), t(shapes[1])
        return C(f"lib.matmul({x}, {y})" if name == "matmul" else f"{x} @ {y}", **acc)
    if name == "mm":
        return C(f"lib.mm({t((n, k))}, {t((k, m))})", **acc)
    if name == "bmm":
        return C(f"lib.bmm({t((b, n, k))}, {t((b, k, m))})", **acc)
    if name == "mv":
        return C(f"lib.mv({t((n, k))}, {t((k,))})", **acc)
    if name in ("dot", "vdot"):
        return C(f"lib.{name}({t((k,))}, {t((k,))})", **acc)
    if name == "outer":
        return f"lib.{g.choice(['outer', 'ger'])}({t((n,))}, {t((m,))})"
    ab = kwargs(beta=g.choice([1, 0, 0.5, 2]) if g.p(0.4) else ..., alpha=g.choice([1, 0, -1.5, 2]) if g.p(0.4) else ...)
    if name == "addmm":
        return C(f"lib.addmm({t(g.choice([(n, m), (m,), (1, m), ()]))}, {t((n, k))}, {t((k, m))}{ab})", **acc)
    if name == "addmv":
        return C(f"lib.addmv({t(g.choice([(n,), ()]))}, {t((n, k))}, {t((k,))}{ab})", **acc)
    if name == "baddbmm":
        return C(f"lib.baddbmm({t(g.choice([(b, n, m), (n, m)]))}, {t((b, n, k))}, {t((b, k, m))}{ab})", **acc)
    if name == "addbmm":
        return C(f"lib.addbmm({t((n, m))}, {t((b, n, k))}, {t((b, k, m))}{ab})", **acc)
    if name == "einsum":
        eq, shapes = g.choice([("ij,jk->ik", ((n, k), (k, m))), ("bij,bjk->bik", ((b, n, k), (b, k, m))),
                               ("i,i->", ((k,), (k,))), ("ij->ji", ((n, m),)), ("ii->i", ((n, n),)),
                               ("ij->", ((n, m),)), ("i,j->ij", ((n,), (m,))), ("bi,bi->b", ((b, k), (b, k))),
                               ("...ij,...jk", ((b, n, k), (k, m)))])
        return C(f"lib.einsum({lit(eq)}, {', '.join(str(t(s)) for s in shapes)})", **acc)
    if name == "tensordot":
        return C(f"lib.tensordot({t((n, k, b))}, {t((k, b, m))}, dims={lit(g.choice([2, ([1, 2], [0, 1]), 0]))})",
                 **acc)
    if name == "cross":
        shape = g.choice([(3,), (n, 3), (3, m)])
        return f"lib.cross({t(shape)}, {t(shape)}{kwargs(dim=-1 if shape[-1] == 3 else 0)})"
    if name == "cdist":  # (finite: PyTorch's max over |x - y| for p=inf drops a NaN unless it comes first)
        x1 = g.tensor(shape=(n, k), dtype="float64", regime=g.choice(["small", "integral"]), grad=grad)
        x2 = g.tensor(shape=(m, k), dtype="float64", regime=g.choice(["small", "integral"]), grad=grad)
        return C(f"lib.cdist({x1}, {x2}, p={lit(g.choice([1.0, 2.0, 0.0, 3.0, float('inf')]))})", **acc)
    bias = t((m,)) if g.p(0.5) else None
    return C(f"F.linear({t((n, k))}, {t((m, k))}, {lit(bias)})", **acc)


# ---- autograd-free misc ---------------------------------------------------------------------

@family(3)
def conversion(g):
    r = g.rng.random()
    x = g.tensor(writable=r >= 0.85)
    if r < 0.4:
        return f"{x}.to({dtype_code(g.dtype())})"
    if r < 0.6:
        return f"{x}.tolist()"
    if r < 0.75:
        return f"{x}.item()"
    if r < 0.85:
        return g.choice([f"bool({x})", f"float({x})", f"int({x})"])
    return f"{x}.copy_({g.tensor(shape=g.broadcastable(shape_of(g, x)))})"
