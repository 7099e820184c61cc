#!/usr/bin/env python3
"""Generates plugflow's op tables from the op definitions (core/opdefs/*.yaml, docs/opdefs.md).

    gen_ops.py DEFS.yaml... --header OUT.h --derivatives OUT.inc   (the build)
    gen_ops.py DEFS.yaml... --docs docs/kernels.md [--check]       (the generated docs sections)

The header holds X-macro lists (PF_OPDEFS_*) of all the definition files that the core, the
in-tree plugins and the Python bindings expand; the .inc holds the backward tables, compiled
inside core/src/ops/elementwise_grad.cpp (formulas), reduce.cpp and reduction_extra.cpp (named
functions). Nothing generated is committed
except the docs sections (one per definition file), which a test keeps equal to what this
script writes.
"""
import argparse
import os
import re
import sys

import yaml

FAMILIES = ("unary", "binary", "activation", "ternary", "reduction", "scan", "softmax", "moments", "composite",
            "indexed", "kernel")
# Ops along one dim (along_dim.yaml): each line along `dim` maps to a line of the same shape.
ALONG_DIM = ("scan", "softmax")
DTYPE_RULES = {
    "unary": {"float": "FloatMath", "same": "AnyDtype", "bool": "BoolOut", "integral": "IntegralOnly"},
    "binary": {"same": "Arithmetic", "float": "Arithmetic", "integral": "Arithmetic", "compare": "Compare",
               "logical": "Logical"},
    "activation": {"float": None},
    "ternary": {"promote": None, "same": None},
    "reduction": {"accumulate": "Accumulate", "floating": "Floating", "input": "Input", "logical": "Logical"},
    "scan": {"accumulate": None},
    "softmax": {"floating": None},
    "moments": {"floating": None},
}
DEFAULT_DTYPE = {"unary": "float", "binary": "same", "activation": "float", "ternary": "promote", "reduction": "input",
                 "scan": "accumulate", "softmax": "floating", "moments": "floating"}
KERNEL_DTYPES = {"all": "All", "numeric": "Numeric", "float": "Float", "integral": "Integral"}
DEFAULT_KERNEL_DTYPES = {"float": "float", "integral": "integral", "bool": "all", "compare": "all", "logical": "all"}
ATTR_TYPES = {"Scalar", "float", "int", "bool", "str"}
PY_TOKENS = {"function", "method", "inplace", "nn_functional", "tensor_only", "number_input", "special"}
OUT_KINDS = {"cast": "Cast", "same_dtype": "SameDtype", "same_dtype_for_number": "SameDtypeForNumber",
             "accumulate": "Accumulate", "mean": "Mean", "same_as_input": "SameAsInput", "exact": "Exact",
             "floating": "Floating", "logical": "Logical"}
IDENTITIES = {0: "Zero", 1: "One", "nan": "NaN"}  # a reduction's value over an empty dim
AMP_POLICIES = {"lower": "Lower", "float32": "Float32", "promote": "Promote", "native": "Native", "banned": "Banned"}
FIELDS = {"name", "family", "inputs", "dtype", "kernels", "attrs", "python", "out", "aliases", "amp", "derivative",
          "identity", "dim_optional", "dim", "doc", "outputs", "variants"}
REDUCTION_ONLY = {"identity", "dim_optional", "dim"}
# A reduction's Python dim: int[] (an int or a tuple/list) or int (PyTorch's X(input) and
# X(input, int dim, bool keepdim=False) overloads, both with out=: all, any)
REDUCTION_DIMS = ("int[]", "int")
MOMENTS_ONLY = {"outputs", "variants"}
# A variant: one Python function over a kernel with several outputs (moments.yaml)
VARIANT_FIELDS = {"name", "attrs", "outputs", "python", "out", "amp"}
VARIANT_PYTHON = {"function", "method"}
# A composite op (composite.yaml): no kernel, a C++ function of the core composes it
COMPOSITE_FIELDS = {"name", "family", "args", "dtype", "python", "out", "amp", "doc"}
COMPOSITE_DTYPES = {"float": "Float", "same": "Same"}  # float: integers and bool promote to float32
ARG_TYPES = {"int[]": "IntList", "int": "Int", "bool": "Bool", "float": "Float"}
# ternary ops name theirs
INPUTS = {"unary": ["self"], "activation": ["self"], "binary": ["self", "other"], "reduction": ["self"],
          "scan": ["self"], "softmax": ["self"], "moments": ["self"]}
# The families whose attributes (positional, in this order) and Python forms are the family's
FIXED_ATTRS = {"reduction": {"dims": "int[]", "keepdim": "bool"},
               "scan": {"dim": "int", "reverse": "bool"},  # reverse: from the end (cumsum's backward)
               "softmax": {"dim": "int"},
               # PyTorch's var/std arguments; `attrs:` adds the kernel's own, which variants fix
               "moments": {"dims": "int[]", "keepdim": "bool", "correction": "float"},
               "indexed": {"dim": "int", "keepdim": "bool"}}
FIXED_PYTHON = {"reduction": ["function", "method"], "scan": ["function", "method", "inplace"],
                "softmax": ["function", "method"], "moments": []}
PYTHON_FORM = {"reduction": "torch.X and Tensor.X (dim, keepdim[, dtype]), or (int dim, keepdim) as `dim` says",
               "scan": "torch.X, Tensor.X and Tensor.X_ (dim, *, dtype)",
               "softmax": "torch.X and Tensor.X (dim, dtype)",
               "moments": "its `variants` (dim, unbiased, keepdim, *, correction)"}


class DefinitionError(Exception):
    pass


def camel(name):
    return "".join(part.capitalize() for part in name.split("_"))


def load(path, seen=None):
    """The normalized entries of one definition file (`seen`: names taken by files read before)."""
    with open(path, encoding="utf-8") as f:
        entries = yaml.safe_load(f)
    seen = set() if seen is None else seen
    ops = []
    for e in entries:
        try:
            op = normalize(e, seen)
            op["file"] = os.path.splitext(os.path.basename(path))[0]
            ops.append(op)
        except DefinitionError as err:
            raise DefinitionError(f"{path}: {err}") from None
    return ops


def load_all(paths):
    """{path: its entries}; an op name is unique across the files."""
    seen = set()
    return {path: load(path, seen) for path in paths}


def normalize(e, seen):
    name = e.get("name")

    def fail(msg):
        raise DefinitionError(f"op '{name}': {msg}")

    # (a leading _ marks an internal op, as PyTorch's: _take_along_dim)
    if not isinstance(name, str) or not re.fullmatch(r"_?[a-z][a-z0-9_]*", name):
        raise DefinitionError(f"bad or missing op name: {e!r}")
    if name in seen:
        fail("defined twice")
    family = e.get("family")
    if family not in FAMILIES:
        fail(f"family must be one of {FAMILIES}")
    if family == "composite":
        return normalize_composite(e, seen, fail)
    if family == "indexed":
        return normalize_indexed(e, seen, fail)
    if family == "kernel":
        return normalize_kernel(e, seen, fail)
    unknown = set(e) - FIELDS
    if unknown:
        fail(f"unknown fields {sorted(unknown)}")
    if family != "reduction" and set(e) & REDUCTION_ONLY:
        fail(f"{sorted(set(e) & REDUCTION_ONLY)}: only reductions have these")
    if family != "moments" and set(e) & MOMENTS_ONLY:
        fail(f"{sorted(set(e) & MOMENTS_ONLY)}: only moments ops (several outputs, Python variants) have these")
    inputs = e.get("inputs", INPUTS.get(family))
    if family == "ternary":
        if not (isinstance(inputs, list) and len(inputs) == 3 and all(isinstance(i, str) for i in inputs)):
            fail("inputs: a ternary op names its three inputs")
    elif "inputs" in e:
        fail(f"inputs: a {family} op's inputs are {INPUTS[family]}")
    dtype = e.get("dtype", DEFAULT_DTYPE[family])
    if dtype not in DTYPE_RULES[family]:
        fail(f"dtype '{dtype}' is not a {family} rule ({sorted(DTYPE_RULES[family])})")

    kernels = e.get("kernels", {})
    if isinstance(kernels, str):
        kernels = {"dtypes": kernels}
    kdt = kernels.get("dtypes", DEFAULT_KERNEL_DTYPES.get(dtype))
    if kdt not in KERNEL_DTYPES:
        fail("kernels: say which dtypes the kernels cover (all, numeric, float, integral)")
    custom_kernel = bool(kernels.get("custom", family == "activation"))
    if custom_kernel and family not in ("unary", "binary", "activation"):
        fail(f"kernels: the in-tree plugins register every {family} op from its definition")

    attrs = e.get("attrs", {})
    for a, t in attrs.items():
        if t not in ATTR_TYPES:
            fail(f"attribute {a}: type {t} is not one of {sorted(ATTR_TYPES)}")
    if family == "moments":
        if set(attrs) & set(FIXED_ATTRS[family]):
            fail(f"attrs: {FIXED_ATTRS[family]} are the family's; name only the kernel's own")
        attrs = {**FIXED_ATTRS[family], **attrs}
    elif family in FIXED_ATTRS:
        if attrs:
            fail(f"attrs: a {family} op's are {FIXED_ATTRS[family]}")
        attrs = FIXED_ATTRS[family]

    default_python = {"ternary": "custom", **FIXED_PYTHON}
    python = e.get("python", default_python.get(family, ["function", "method", "inplace"]))
    custom_python = python == "custom"
    if family == "ternary" and not custom_python:
        fail("python: ternary ops are bound by hand (custom): their arguments differ")
    if family in FIXED_PYTHON and "python" in e:
        fail(f"python: a {family} op is bound as {PYTHON_FORM[family]}")
    python = set() if custom_python else set(python)
    if python - PY_TOKENS:
        fail(f"python: unknown exposure {sorted(python - PY_TOKENS)}")
    if "nn_functional" in python and python & {"function", "method"}:
        fail("python: nn_functional ops are not torch functions or Tensor methods")
    if "tensor_only" in python and family != "binary":
        fail("python: tensor_only is for binary ops")
    if "number_input" in python and (family != "binary" or "function" not in python or "tensor_only" in python):
        fail("python: number_input is for binary torch functions taking a number operand")
    if "special" in python and ("function" not in python or "method" in python):
        fail("python: special is for functions without a Tensor method (torch.special's)")
    bool_out = dtype in ("bool", "compare", "logical")

    out = e.get("out")
    if out is not None and out not in OUT_KINDS:
        fail(f"out: one of {sorted(OUT_KINDS)}")
    if out == "logical" and not (family == "reduction" and dtype == "logical"):
        fail("out: logical is for the logical reductions (all, any)")
    aliases = e.get("aliases", [])
    amp = e.get("amp", {})
    for dev, pol in amp.items():
        if dev not in ("cpu", "cuda") or pol not in AMP_POLICIES:
            fail(f"amp: {dev}: {pol} (devices cpu, cuda; policies {sorted(AMP_POLICIES)})")

    identity = e.get("identity")
    if identity is not None and identity not in IDENTITIES:
        fail(f"identity: one of {list(IDENTITIES)} (absent: reducing an empty dim raises)")
    dim_optional = e.get("dim_optional", False)
    if not isinstance(dim_optional, bool):
        fail("dim_optional: true or false")
    dim = e.get("dim", "int[]")
    if dim not in REDUCTION_DIMS:
        fail(f"dim: one of {REDUCTION_DIMS}")
    if dim == "int" and dim_optional and dtype in ("input", "logical"):
        fail("dim_optional: a reduction over one int dim without dtype= has PyTorch's no-dim overload X(input) "
             "already")

    outputs = e.get("outputs", ["result"])
    if family == "moments" and not (isinstance(outputs, list) and len(outputs) >= 2 and
                                    all(isinstance(x, str) and x not in ("self", "grad") for x in outputs)):
        fail("outputs: a moments op names its outputs (two or more)")
    seen.add(name)
    variants = [normalize_variant(v, name, attrs, outputs, seen, fail) for v in e.get("variants", [])]
    if family == "moments" and not variants:
        fail("variants: a moments op is bound to Python through its variants (at least one)")

    deriv = e.get("derivative")
    if deriv is not None:
        if family == "ternary":
            fail("derivative: a ternary op's backward is written in core/src/ops/math.cpp")
        if family in FIXED_ATTRS and "function" not in deriv:
            fail(f"derivative: a {family} op's backward is a `function` "
                 f"(it also reads {', '.join(FIXED_ATTRS[family])})")
        if bool_out:
            fail("an op with a bool output has no derivative")
        if "function" in deriv:
            uses = deriv.get("uses", [])
            if set(deriv) - {"function", "uses"} or set(uses) - set(INPUTS[family]) - set(outputs):
                fail(f"derivative: `function` takes only `uses` (a subset of the inputs and {outputs})")
        elif set(deriv) != set(INPUTS[family]):
            fail(f"derivative: give a formula for each input {INPUTS[family]}")
    seen.update(aliases)
    return dict(name=name, family=family, inputs=inputs, dtype=dtype, kernel_dtypes=kdt, custom_kernel=custom_kernel,
                attrs=attrs, python=python, custom_python=custom_python, out=out, aliases=aliases, amp=amp,
                derivative=deriv, bool_out=bool_out, identity=identity, dim_optional=dim_optional, dim=dim,
                outputs=outputs, variants=variants, doc=e.get("doc", ""))


def parse_args(text, fail):
    """A composite op's Python arguments after the input, `int[] dim, bool keepdim=False`:
    [(name, type, default or None)], in order (required ones first)."""
    args = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(int\[\]|int|bool|float) ([a-z][a-z0-9_]*)(?:=(\S+))?", part)
        if not m:
            fail(f"args: '{part}' is not `TYPE NAME[=DEFAULT]` (types {sorted(ARG_TYPES)})")
        typ, name, default = m.groups()
        if default is not None:
            try:
                value = {"bool": {"True": True, "False": False}.get, "int": int, "float": float}[typ](default)
            except (KeyError, ValueError):
                value = None
            if value is None:
                fail(f"args: {name}'s default {default} is not a {typ} (int[] arguments have none)")
            default = value
        elif args and args[-1][2] is not None:
            fail(f"args: {name} without a default follows one with a default")
        args.append((name, typ, default))
    if len({a[0] for a in args}) != len(args):
        fail("args: a name appears twice")
    return args


def normalize_composite(e, seen, fail):
    name = e["name"]
    if set(e) - COMPOSITE_FIELDS:
        fail(f"unknown fields {sorted(set(e) - COMPOSITE_FIELDS)} (a composite op has {sorted(COMPOSITE_FIELDS)})")
    if not isinstance(e.get("args"), str):
        fail("args: a composite op declares its Python arguments after the input (`int[] dim, bool keepdim=False`)")
    args = parse_args(e["args"], fail)
    dtype = e.get("dtype", "same")
    if dtype not in COMPOSITE_DTYPES:
        fail(f"dtype: one of {sorted(COMPOSITE_DTYPES)}")
    python = e.get("python", ["function", "method"])
    if not python or set(python) - VARIANT_PYTHON:
        fail(f"python: some of {sorted(VARIANT_PYTHON)}")
    out = e.get("out")
    if out is not None and out not in OUT_KINDS:
        fail(f"out: one of {sorted(OUT_KINDS)}")
    amp = e.get("amp", {})
    for dev, pol in amp.items():
        if dev not in ("cpu", "cuda") or pol not in AMP_POLICIES:
            fail(f"amp: {dev}: {pol} (devices cpu, cuda; policies {sorted(AMP_POLICIES)})")
    seen.add(name)
    sig_args = "".join(f", {t} {a}" + ("" if d is None else f"={d}") for a, t, d in args)
    return dict(name=name, family="composite", inputs=["self"], dtype=dtype, args=args, python=set(python),
                custom_python=False, out=out, aliases=[], amp=amp, derivative=None, bool_out=False,
                dim_optional=False, variants=[], outputs=["result"], custom_kernel=True, kernel_dtypes=None,
                attrs={}, identity=None, signature=f"{name}(Tensor self{sig_args}) -> Tensor", doc=e.get("doc", ""))


# A reduction to the extreme's index over one dim (indexed.yaml): the index alone, or the value too
INDEXED_FIELDS = {"name", "family", "outputs", "kernels", "dim_optional", "python", "out", "torch_name", "derivative",
                  "doc"}
INDEXED_OUTPUTS = (["values", "indices"], ["indices"])


def normalize_indexed(e, seen, fail):
    name = e["name"]
    if set(e) - INDEXED_FIELDS:
        fail(f"unknown fields {sorted(set(e) - INDEXED_FIELDS)} (an indexed op has {sorted(INDEXED_FIELDS)})")
    outputs = e.get("outputs")
    if outputs not in INDEXED_OUTPUTS:
        fail(f"outputs: one of {INDEXED_OUTPUTS}")
    kdt = e.get("kernels")
    if kdt not in KERNEL_DTYPES:
        fail("kernels: say which dtypes the kernels cover (all, numeric, float, integral)")
    dim_optional = e.get("dim_optional", False)
    if not isinstance(dim_optional, bool):
        fail("dim_optional: true or false")
    python = e.get("python", ["function", "method"])
    if python != "custom" and python != ["function", "method"]:
        fail("python: torch.X and Tensor.X(dim, keepdim) (the default), or custom (bound by hand behind another"
             " function, as max_dim behind torch.max)")
    out = e.get("out")
    if out is not None and (out not in OUT_KINDS or python == "custom"):
        fail(f"out: one of {sorted(OUT_KINDS)}, for an op bound from its definition")
    torch_name = e.get("torch_name", name)
    if not isinstance(torch_name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", torch_name):
        fail("torch_name: the PyTorch function the op is (its errors' and backward node's name)")
    deriv = e.get("derivative")
    if deriv is not None:
        uses = deriv.get("uses", [])
        if set(deriv) - {"function", "uses"} or "function" not in deriv or set(uses) - {"self"} - set(outputs):
            fail(f"derivative: {{function: NAME, uses: [...]}} (uses: a subset of self and {outputs})")
        if "values" not in outputs:
            fail("derivative: an op returning only indices has none")
    seen.add(name)
    attrs = FIXED_ATTRS["indexed"]
    op = dict(name=name, family="indexed", inputs=["self"], dtype="input", kernel_dtypes=kdt, custom_kernel=False,
              attrs=attrs, python=set() if python == "custom" else set(python), custom_python=python == "custom",
              out=out, aliases=[], amp={}, derivative=deriv, bool_out=False, identity=None,
              dim_optional=dim_optional, dim="int", outputs=outputs, variants=[], torch_name=torch_name,
              node=f"{camel(torch_name)}Backward0", doc=e.get("doc", ""))
    op["signature"] = signature(op)
    return op


# An op with a schema of its own (optim.yaml): its catalog entry, the in-tree plugins'
# registrations and its docs row come from the definition; its meta function (argument checks and
# output metas), functional entry, binding and kernels are code named by it.
KERNEL_FIELDS = {"name", "family", "signature", "meta", "mutated", "out_operands", "kernels", "kernel", "operands",
                 "doc"}
DTYPE_NAMES = {"float16": "Float16", "bfloat16": "BFloat16", "float32": "Float32", "float64": "Float64",
               "uint8": "UInt8", "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64", "bool": "Bool"}
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
# A function name, or a template's instance with one argument (a comma would split the X-macro's arguments).
META_FUNCTION = IDENTIFIER + r"(<[A-Za-z0-9_:]+>)?"


def schema_params(sig):
    """The parameters of a catalog schema `name(Type name, ...) [-> ...]`, as (type, name) pairs."""
    inner = sig[sig.index("(") + 1:sig.rindex(")", 0, sig.index(" -> ") if " -> " in sig else len(sig))]
    params = []
    for part in (x.strip() for x in inner.split(",")):
        if part:
            typ, _, pname = part.rpartition(" ")
            params.append((typ, pname))
    return params


def normalize_kernel(e, seen, fail):
    name = e["name"]
    if set(e) - KERNEL_FIELDS:
        fail(f"unknown fields {sorted(set(e) - KERNEL_FIELDS)} (a kernel op has {sorted(KERNEL_FIELDS)})")
    sig = e.get("signature")
    if not isinstance(sig, str) or not sig.startswith(name + "(") or ")" not in sig:
        fail("signature: the catalog schema, name(Type arg, ...) [-> outputs]")
    params = schema_params(sig)
    # Operands the caller allocates and hands the kernel as its outputs (fill's out): written, so
    # marked (x!), but not inputs (not `mutated`), and they may stand anywhere (index_put's dst is last).
    out_operands = e.get("out_operands", [])
    if not (isinstance(out_operands, list)
            and all(any(n == o and t.startswith("Tensor(") and "!" in t for t, n in params) for o in out_operands)):
        fail("out_operands: the names of the (x!) operands the caller allocates as the kernel's outputs")
    inputs = [(typ, n) for typ, n in params if n not in out_operands]
    tensors = [i for i, (typ, _) in enumerate(inputs) if typ.startswith("Tensor")]
    if tensors != list(range(len(tensors))):
        fail("signature: tensor operands first, then the attributes")
    meta = e.get("meta")
    if not isinstance(meta, str) or not re.fullmatch(META_FUNCTION, meta):
        fail("meta: the name of its meta function in the core (one template argument at most: no comma)")
    mutated = e.get("mutated", [])
    if not (isinstance(mutated, list) and all(isinstance(i, int) and 0 <= i < len(tensors) for i in mutated)):
        fail("mutated: the indices of the tensor operands it writes in place")
    for i, (typ, _) in enumerate(inputs[:len(tensors)]):
        if ("!" in typ) != (i in mutated) and "[]" not in typ:
            fail(f"mutated: operand {i} is {'not ' if i not in mutated else ''}marked (x!) in the signature")
    kernels = e.get("kernels")
    if isinstance(kernels, list):
        kernels = {"cpu": kernels, "cuda": kernels}

    def dtype_list(v):
        return isinstance(v, list) and all(k in DTYPE_NAMES for k in v) and len(set(v)) == len(v)
    if not (isinstance(kernels, dict) and set(kernels) == {"cpu", "cuda"} and all(map(dtype_list, kernels.values()))
            and kernels["cpu"]):
        fail(f"kernels: the dtypes of the in-tree plugins' kernels, from {sorted(DTYPE_NAMES)}: one list for both "
             "plugins, or {cpu: [...], cuda: [...]} (cpu not empty; cuda [] when the CUDA plugin has none)")
    kernel = e.get("kernel", name.rstrip("_") + "_kernel")
    if not isinstance(kernel, str) or not re.fullmatch(IDENTIFIER, kernel):
        fail("kernel: the name of the in-tree plugins' kernel function, or custom (registered by hand)")
    for field in ("operands", "doc"):
        if not isinstance(e.get(field), str):
            fail(f"{field}: the docs table's text")
    seen.add(name)
    return dict(name=name, family="kernel", signature=sig, meta=meta, mutated=mutated, kernel_dtypes=kernels,
                kernel=kernel, attrs={n: t for t, n in params if not t.startswith("Tensor")}, operands=e["operands"],
                doc=e["doc"], amp={}, aliases=[], out=None, python=set(), custom_python=False, variants=[],
                derivative=None)


ATTR_VALUE_TYPES = {"bool": bool, "int": int, "float": (int, float), "str": str}


def normalize_variant(v, kernel, attrs, outputs, seen, fail):
    """A Python function over `kernel`: the values of the kernel's own attributes it fixes, the
    outputs it returns (in the kernel's order), its Python forms, out= and autocast."""
    name = v.get("name")
    # (a leading _ marks an internal op, as PyTorch's: _take_along_dim)
    if not isinstance(name, str) or not re.fullmatch(r"_?[a-z][a-z0-9_]*", name):
        fail(f"variants: bad or missing name: {v!r}")
    if name in seen - {kernel}:
        fail(f"variant '{name}': defined twice")
    if set(v) - VARIANT_FIELDS:
        fail(f"variant '{name}': unknown fields {sorted(set(v) - VARIANT_FIELDS)} ({sorted(VARIANT_FIELDS)})")
    own = {a: t for a, t in attrs.items() if a not in FIXED_ATTRS["moments"]}
    fixed = v.get("attrs", {})
    if set(fixed) != set(own):
        fail(f"variant '{name}': attrs fixes each of the kernel's own attributes {sorted(own)}")
    for a, value in fixed.items():
        ok = ATTR_VALUE_TYPES.get(own[a])
        if ok is None or not isinstance(value, ok) or (own[a] != "bool" and isinstance(value, bool)):
            fail(f"variant '{name}': attrs: {a} is a {own[a]}, not {value!r}")
    returned = v.get("outputs", outputs)
    if not returned or [o for o in outputs if o in returned] != returned:
        fail(f"variant '{name}': outputs: some of {outputs}, in that order")
    python = v.get("python", ["function", "method"])
    if not python or set(python) - VARIANT_PYTHON:
        fail(f"variant '{name}': python: some of {sorted(VARIANT_PYTHON)}")
    out = v.get("out")
    if out is not None and (out not in OUT_KINDS or len(returned) != 1):
        fail(f"variant '{name}': out: one of {sorted(OUT_KINDS)}, for a variant returning one output")
    amp = v.get("amp", {})
    for dev, pol in amp.items():
        if dev not in ("cpu", "cuda") or pol not in AMP_POLICIES:
            fail(f"variant '{name}': amp: {dev}: {pol}")
    seen.add(name)
    return dict(name=name, kernel=kernel, family="moments", inputs=["self"], dtype="floating", fixed=fixed,
                outputs=returned, output_mask=sum(1 << outputs.index(o) for o in returned), python=set(python),
                custom_python=False, out=out, aliases=[], amp=amp, bool_out=False, dim_optional=True,
                node=f"{camel(name)}Backward0")


def variants_of(ops):
    return [v for o in ops for v in o["variants"]]


def signature(op):
    ins = ", ".join(f"Tensor {i}" for i in op["inputs"])
    attrs = "".join(f", {t} {a}" for a, t in op["attrs"].items())
    if attrs and op["family"] not in FIXED_ATTRS:  # those are positional
        attrs = ", *" + attrs
    outs = "Tensor" if len(op["outputs"]) == 1 else "(" + ", ".join(f"Tensor {o}" for o in op["outputs"]) + ")"
    return f"{op['name']}({ins}{attrs}) -> {outs}"


def cbool(b):
    return "true" if b else "false"


def macro(name, comment, rows):
    """An X-macro: `#define name(X) X(row 1) X(row 2) ...`, one row a line."""
    return f"// {comment}\n#define {name}(X)" + "".join(f" \\\n  X({', '.join(r)})" for r in rows) + "\n"


def q(s):
    return f'"{s}"'


def header(ops):
    unary = [o for o in ops if o["family"] == "unary"]
    binary = [o for o in ops if o["family"] == "binary"]
    acts = [o for o in ops if o["family"] == "activation"]
    ternary = [o for o in ops if o["family"] == "ternary"]
    reductions = [o for o in ops if o["family"] == "reduction"]
    scans = [o for o in ops if o["family"] == "scan"]
    softmaxes = [o for o in ops if o["family"] == "softmax"]
    moments = [o for o in ops if o["family"] == "moments"]
    composites = [o for o in ops if o["family"] == "composite"]
    indexed = [o for o in ops if o["family"] == "indexed"]
    parts = [
        "// Generated by tools/gen_ops.py from core/opdefs/*.yaml: do not edit.\n"
        "// X-macro lists of the defined ops (docs/opdefs.md says who expands which).\n#pragma once\n",
        macro("PF_OPDEFS_UNARY", "X(name, UnaryKind, signature): the catalog's unary ops",
              [[q(o["name"]), DTYPE_RULES["unary"][o["dtype"]], q(signature(o))] for o in unary]),
        macro("PF_OPDEFS_BINARY", "X(name, BinaryKind, integral_only, float_only, signature)",
              [[q(o["name"]), DTYPE_RULES["binary"][o["dtype"]], cbool(o["dtype"] == "integral"),
                cbool(o["dtype"] == "float"), q(signature(o))] for o in binary]),
        macro("PF_OPDEFS_ACTIVATION", "X(name, signature): unary ops with attributes, floating inputs",
              [[q(o["name"]), q(signature(o))] for o in acts]),
    ]

    def kernel_rows(sel):
        return [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], cbool(o["bool_out"])]
                for o in sel if not o["custom_kernel"]]

    parts += [
        macro("PF_OPDEFS_UNARY_FLOAT_KERNELS",
              "X(name, Camel, Dtypes, bool_out): in-tree plugins register functor Camel##Op (CPU) / Camel##Fn (CUDA)"
              " for Dtypes##Types", kernel_rows([o for o in unary if o["kernel_dtypes"] == "float"])),
        macro("PF_OPDEFS_UNARY_OTHER_KERNELS", "X(name, Camel, Dtypes, bool_out): the other unary kernels",
              kernel_rows([o for o in unary if o["kernel_dtypes"] != "float"])),
        macro("PF_OPDEFS_BINARY_KERNELS", "X(name, Camel, Dtypes, bool_out)", kernel_rows(binary)),
        macro("PF_OPDEFS_TERNARY",
              "X(name, Camel, Dtypes, signature): the math family's fused pointwise ops; the catalog, and in-tree"
              " plugins register functor Camel##Op (CPU) / descriptor Camel##Desc (CUDA) for Dtypes##Types",
              [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], q(signature(o))]
               for o in ternary]),
        macro("PF_OPDEFS_REDUCTION",
              "X(name, Camel, Dtypes, ReduceDtype, ReduceIdentity, signature): the reductions over dims; the"
              " catalog, and in-tree plugins register functor Camel##Op (CPU) / Camel##Red (CUDA) for Dtypes##Types",
              [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], DTYPE_RULES["reduction"][o["dtype"]],
                IDENTITIES.get(o["identity"], "None"), q(signature(o))] for o in reductions]),
        macro("PF_OPDEFS_PY_REDUCTION",
              "X(name, dtype_arg, dim_optional, one_dim): torch.X / Tensor.X(dim, keepdim[, *, dtype]); dim defaults to"
              " None where optional, else (); one_dim: PyTorch's X(input) and X(input, int dim, keepdim=False)",
              [[q(o["name"]), cbool(o["dtype"] not in ("input", "logical")), cbool(o["dim_optional"]),
                cbool(o["dim"] == "int")] for o in reductions]),
        macro("PF_OPDEFS_SCAN",
              "X(name, Camel, Dtypes, signature): the scans along one dim (integers and bool scan in int64, dtype="
              " casts first); the catalog, torch.X / Tensor.X / Tensor.X_(dim, *, dtype), and in-tree plugins"
              " register functor Camel##Op (CPU) / Camel##Scan (CUDA) for Dtypes##Types",
              [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], q(signature(o))] for o in scans]),
        macro("PF_OPDEFS_SOFTMAX",
              "X(name, Camel, Dtypes, signature): the softmax family along one dim (floating, dtype= casts first);"
              " the catalog, torch.X / Tensor.X(dim, dtype), and in-tree plugins register functor Camel##Op (CPU)"
              " / Camel##Fn (CUDA) for Dtypes##Types",
              [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], q(signature(o))]
               for o in softmaxes]),
        macro("PF_OPDEFS_MOMENTS",
              "X(name, Camel, Dtypes, n_outputs, signature): reductions with several outputs, bound through their"
              " variants; the catalog, and in-tree plugins register functor Camel##Op (CPU) / Camel##Red (CUDA)"
              " for Dtypes##Types",
              [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], str(len(o["outputs"])),
                q(signature(o))] for o in moments]),
        macro("PF_OPDEFS_MOMENT_VARIANTS",
              "X(name, kernel, (Attrs fixed), output_mask, node, function, method): the Python functions over a"
              " moments kernel: the attributes they fix, the outputs they return (bit i: output i), their"
              " backward node; torch.X / Tensor.X(dim, unbiased, keepdim, *, correction)",
              [[q(v["name"]), q(v["kernel"]), attrs_init(v["fixed"]), str(v["output_mask"]), q(v["node"]),
                cbool("function" in v["python"]), cbool("method" in v["python"])] for v in variants_of(moments)]),
        macro("PF_OPDEFS_COMPOSITE",
              "X(name, function, CompositeDtype, signature): the ops without a kernel, composed by the core's"
              " function ops::composites::function(self, attrs); the functional entry ops::composite",
              [[q(o["name"]), o["name"], COMPOSITE_DTYPES[o["dtype"]], q(o["signature"])] for o in composites]),
        macro("PF_OPDEFS_PY_COMPOSITE",
              "X(name, function, method, (args)): torch.X(input, ...) / Tensor.X(...); args: the Python arguments"
              " after the input, {name, ArgType[, default]}, each passed as the attribute of its name",
              [[q(o["name"]), cbool("function" in o["python"]), cbool("method" in o["python"]),
                composite_args_init(o["args"])] for o in composites]),
    ]
    parts += [
        macro("PF_OPDEFS_INDEXED",
              "X(name, Camel, Dtypes, n_outputs, torch_name, dim_optional, signature): the reductions to the"
              " extreme's index over one dim (values and indices, or indices), the functional entry ops::indexed"
              " (dim_optional: dim may be absent, over the flattened input); the catalog, and in-tree plugins"
              " register functor Camel##Op (CPU) / Camel##Red (CUDA) for Dtypes##Types",
              [[q(o["name"]), camel(o["name"]), KERNEL_DTYPES[o["kernel_dtypes"]], str(len(o["outputs"])),
                q(o["torch_name"]), cbool(o["dim_optional"]), q(o["signature"])] for o in indexed]),
        macro("PF_OPDEFS_PY_INDEXED",
              "X(name, dim_optional): torch.X / Tensor.X(dim, keepdim=False); dim defaults to None where optional",
              [[q(o["name"]), cbool(o["dim_optional"])] for o in indexed if o["python"]]),
    ]
    py_unary = [o for o in unary if o["python"]]
    py_binary = [o for o in binary if o["python"]]
    parts += [
        macro("PF_OPDEFS_PY_UNARY", "X(name, function, method, inplace, nn_functional): generic Python bindings",
              [[q(o["name"])] + [cbool(t in o["python"]) for t in ("function", "method", "inplace", "nn_functional")]
               for o in py_unary]),
        macro("PF_OPDEFS_PY_BINARY", "X(name, function, method, inplace, tensor_only, number_input)",
              [[q(o["name"])] + [cbool(t in o["python"])
                                 for t in ("function", "method", "inplace", "tensor_only", "number_input")]
               for o in py_binary]),
        macro("PF_OPDEFS_PY_SPECIAL", "X(name): functions of torch.special (plugflow.special), not of torch",
              [[q(o["name"])] for o in ops if "special" in o["python"]]),
        macro("PF_OPDEFS_PY_ALIASES", "X(alias, op, bound_generically): other Python names of an op",
              [[q(a), q(o["name"]), cbool(not o["custom_python"])] for o in ops for a in o["aliases"]]),
        macro("PF_OPDEFS_PY_OUT", "X(name, OutKind): functions taking out= (aliases and variants included)",
              [[q(n), OUT_KINDS[o["out"]]] for o in ops + variants_of(ops) if o["out"]
               for n in [o["name"]] + o["aliases"]]),
        macro("PF_OPDEFS_AUTOCAST", "X(name, cpu Policy, cuda Policy): PyTorch 1.13's autocast lists",
              [[q(o["name"]), AMP_POLICIES.get(o["amp"].get("cpu"), "None"),
                AMP_POLICIES.get(o["amp"].get("cuda"), "None")] for o in ops + variants_of(ops) if o["amp"]]),
    ]
    # The ops with schemas of their own, one list per definition file (optim.yaml: PF_OPDEFS_OPTIM),
    # expanded by the core file holding their meta functions; PF_OPDEFS_OPTIM_KERNELS holds those
    # whose in-tree kernels are registered from the definition, expanded by the in-tree plugins.
    # The lists arrive parenthesized: `{PF_OPDEFS_UNPAREN mutated}` makes an initializer list.
    kernel_ops = [o for o in ops if o["family"] == "kernel"]
    if kernel_ops:
        parts.append("#define PF_OPDEFS_UNPAREN(...) __VA_ARGS__\n")

    def dtypes(o, device):
        return f"({', '.join('DType::' + DTYPE_NAMES[d] for d in o['kernel_dtypes'][device])})"
    for f in sorted({o["file"] for o in kernel_ops}):
        in_file = [o for o in kernel_ops if o["file"] == f]
        parts.append(macro(
            f"PF_OPDEFS_{f.upper()}", "X(name, signature, meta, (mutated operands)): catalog entries",
            [[q(o["name"]), q(o["signature"]), o["meta"], f"({', '.join(map(str, o['mutated']))})"] for o in in_file]))
        parts.append(macro(
            f"PF_OPDEFS_{f.upper()}_KERNELS",
            "X(name, (CPU dtypes), (CUDA dtypes), kernel function): the registrations made from the definitions",
            [[q(o["name"]), dtypes(o, "cpu"), dtypes(o, "cuda"), o["kernel"]] for o in in_file
             if o["kernel"] != "custom"]))
    if kernel_ops:
        parts.append(macro(
            "PF_OPDEFS_KERNEL_DTYPES",
            "X(name, (CPU dtypes), (CUDA dtypes)): what the in-tree plugins register, checked by their test suites",
            [[q(o["name"]), dtypes(o, "cpu"), dtypes(o, "cuda")] for o in kernel_ops]))
    return "\n".join(parts)


def attrs_init(fixed):
    """Attribute values as a parenthesized C++ Attrs initializer (one macro argument)."""
    def value(v):
        return cbool(v) if isinstance(v, bool) else q(v) if isinstance(v, str) else repr(v)
    return "(Attrs{" + ", ".join(f'{{"{a}", {value(v)}}}' for a, v in fixed.items()) + "})"


def composite_args_init(args):
    """A composite op's Python arguments as a parenthesized C++ std::vector<CompositeArg>."""
    def arg(a, t, d):
        default = "" if d is None else ", " + (cbool(d) if isinstance(d, bool) else
                                               f"int64_t{{{d}}}" if isinstance(d, int) else repr(float(d)))
        return f'{{"{a}", ArgType::{ARG_TYPES[t]}{default}}}'
    return "(std::vector<CompositeArg>{" + ", ".join(arg(*a) for a in args) + "})"


def uses_of(exprs, names):
    return [n for n in names if any(re.search(rf"\b{n}\b", x) for x in exprs)]


def derivatives(ops):
    letters = {"self": "a", "other": "b", "result": "o"}
    out = {"unary": [], "binary": [], "reduction": [], "along_dim": [], "moments": [], "indexed": []}
    for o in ops:
        d = o["derivative"]
        if d is None:
            continue
        if o["family"] == "reduction":
            needs = "".join(letters[u] for u in ("self", "result") if u in d.get("uses", []))
            # PyTorch's node names: a reduction with a no-dim overload has XBackward0 for it, XBackward1 with dims
            nodes = [f"{camel(o['name'])}Backward0", f"{camel(o['name'])}Backward{1 if o['dim_optional'] else 0}"]
            out["reduction"].append(f'{{"{o["name"]}", {{{d["function"]}, "{needs}", "{nodes[0]}", "{nodes[1]}"}}}},')
            continue
        if o["family"] == "moments":
            # the saved tensors: a (the input), then an output's index
            needs = "".join("a" if u == "self" else str(o["outputs"].index(u)) for u in d.get("uses", []))
            out["moments"].append(f'{{"{o["name"]}", {{{d["function"]}, "{needs}"}}}},')
            continue
        if o["family"] == "indexed":
            # the saved tensors: a (the input), then an output's index
            needs = "".join("a" if u == "self" else str(o["outputs"].index(u)) for u in d.get("uses", []))
            out["indexed"].append(f'{{"{o["name"]}", {{{d["function"]}, "{needs}", "{o["node"]}"}}}},')
            continue
        if o["family"] in ALONG_DIM:
            needs = "".join(letters[u] for u in ("self", "result") if u in d.get("uses", []))
            node = f"{camel(o['name'])}Backward0"
            out["along_dim"].append(f'{{"{o["name"]}", {{{d["function"]}, "{needs}", "{node}"}}}},')
            continue
        kind = "binary" if o["family"] == "binary" else "unary"
        inputs = INPUTS[o["family"]]
        if "function" in d:
            fn, uses = d["function"], d.get("uses", [])
        else:
            exprs = [d[i] for i in inputs]
            uses = uses_of(exprs, inputs + ["result"])
            params = "const Tensor& grad, " + "".join(f"const Tensor& {i}, " for i in inputs)
            params += "const Tensor& result, const Attrs& attrs"
            if kind == "binary":
                fn = f"[]({params}) -> std::pair<Tensor, Tensor> {{ return {{{exprs[0]}, {exprs[1]}}}; }}"
            else:
                fn = f"[]({params}) -> Tensor {{ return {exprs[0]}; }}"
        needs = "".join(letters[u] for u in ("self", "other", "result") if u in uses)
        out[kind].append(f'{{"{o["name"]}", {{{fn}, "{needs}"}}}},')
    return ("// Generated by tools/gen_ops.py from core/opdefs/*.yaml: do not edit.\n"
            "// The backward formulas, as initializers of elementwise_grad.cpp's, reduce.cpp's and\n"
            "// reduction_extra.cpp's tables (the moments' node names are their variants').\n"
            "#define PF_OPDEFS_BINARY_DERIVATIVES \\\n  " + " \\\n  ".join(out["binary"]) + "\n"
            "#define PF_OPDEFS_UNARY_DERIVATIVES \\\n  " + " \\\n  ".join(out["unary"]) + "\n"
            "#define PF_OPDEFS_REDUCTION_DERIVATIVES \\\n  " + " \\\n  ".join(out["reduction"]) + "\n"
            "#define PF_OPDEFS_ALONG_DIM_DERIVATIVES \\\n  " + " \\\n  ".join(out["along_dim"]) + "\n"
            "#define PF_OPDEFS_MOMENTS_DERIVATIVES \\\n  " + " \\\n  ".join(out["moments"]) + "\n"
            "#define PF_OPDEFS_INDEXED_DERIVATIVES \\\n  " + " \\\n  ".join(out["indexed"]) + "\n")


DOC_BEGIN = "<!-- BEGIN generated by tools/gen_ops.py from {source} -->"
DOC_END = "<!-- END generated -->"
OUT_DTYPE = {"float": "a's dtype", "same": "a's dtype", "integral": "a's dtype", "bool": "**bool**",
             "compare": "**bool**", "logical": "**bool**"}
IN_DTYPE = {"float": "floating (the functional layer promotes integers to float32)", "same": "any",
            "integral": "integral or bool", "bool": "any", "compare": "any", "logical": "any"}
TERNARY_DTYPE = {"promote": "one dtype (promoted to result_type first)", "same": "one dtype (mixed ones refused)"}


def cell(text):
    return text.replace("|", "\\|")


def kernel_cell(o):
    return o["kernel_dtypes"] + (" (registered by hand)" if o["custom_kernel"] else "")


def attrs_cell(o):
    return "; ".join(f"{a}: {t}" for a, t in o["attrs"].items()) or "–"


def elementwise_rows(ops):
    rows = ["| op | inputs | input dtypes | output | kernel dtypes | attrs | notes |",
            "|---|---|---|---|---|---|---|"]
    for o in ops:
        ins = "a" if o["family"] != "binary" else "a, b (one dtype)"
        in_dtype = "floating" if o["family"] == "activation" else IN_DTYPE[o["dtype"]]
        rows.append(f"| `{o['name']}` | {ins} | {in_dtype} | {OUT_DTYPE[o['dtype']]} | {kernel_cell(o)} | "
                    f"{attrs_cell(o)} | {cell(o['doc'])} |")
    return rows


def ternary_rows(ops):
    rows = ["| op | inputs | input dtypes | output | kernel dtypes | attrs | notes |",
            "|---|---|---|---|---|---|---|"]
    for o in ops:
        rows.append(f"| `{o['name']}` | {', '.join(o['inputs'])} | {TERNARY_DTYPE[o['dtype']]} | "
                    f"{o['inputs'][0]}'s dtype and shape | {kernel_cell(o)} | {attrs_cell(o)} | {cell(o['doc'])} |")
    return rows


REDUCTION_DTYPE = {"accumulate": "integers and bool are cast to int64 first (or all to `dtype=`)",
                   "floating": "floating (the input or `dtype=`; the cast happens first)",
                   "input": "any (no `dtype=`)",
                   "logical": "any, read as it is; the output is **bool** (uint8 for a uint8 input)"}


def reduction_rows(ops):
    rows = ["| op | dtypes (the output's = the input's unless said) | kernel dtypes | over an empty dim | notes |",
            "|---|---|---|---|---|"]
    for o in ops:
        empty = "never reaches the kernel: raises" if o["identity"] is None else f"{o['identity']} (the core answers)"
        rows.append(f"| `{o['name']}` | {REDUCTION_DTYPE[o['dtype']]} | {kernel_cell(o)} | {empty} | "
                    f"{cell(o['doc'])} |")
    return rows


ALONG_DIM_DTYPE = {"accumulate": "any: integers and bool are cast to int64 first (or all to `dtype=`)",
                   "floating": "floating (the input or `dtype=`; the cast happens first)"}


def along_dim_rows(ops):
    rows = ["| op | input (= output) dtypes | kernel dtypes | attrs | notes |", "|---|---|---|---|---|"]
    for o in ops:
        rows.append(f"| `{o['name']}` | {ALONG_DIM_DTYPE[o['dtype']]} | {kernel_cell(o)} | {attrs_cell(o)} | "
                    f"{cell(o['doc'])} |")
    return rows


def variant_cell(v):
    forms = " / ".join(f for f, token in (("torch.X", "function"), ("Tensor.X", "method")) if token in v["python"])
    fixed = ", ".join(f"{a}={str(x).lower() if isinstance(x, bool) else x}" for a, x in v["fixed"].items())
    out = f", out= ({v['out']})" if v["out"] else ""
    return f"`{v['name']}`: {forms.replace('X', v['name'])} → {', '.join(v['outputs'])} ({fixed}{out})"


def moments_rows(ops):
    rows = ["| op | outputs | input (= output) dtypes | kernel dtypes | attrs | Python functions | notes |",
            "|---|---|---|---|---|---|---|"]
    for o in ops:
        rows.append(f"| `{o['name']}` | {', '.join(o['outputs'])} | floating | {kernel_cell(o)} | {attrs_cell(o)} | "
                    f"{'<br>'.join(variant_cell(v) for v in o['variants'])} | {cell(o['doc'])} |")
    return rows


COMPOSITE_DTYPE = {"float": "any: integers and bool promote to float32", "same": "any (the function's rules)"}


def composite_rows(ops):
    rows = ["| op | Python | input dtypes | out= | autocast | composed as |", "|---|---|---|---|---|---|"]
    for o in ops:
        forms = " / ".join(f for f, token in (("torch.X", "function"), ("Tensor.X", "method")) if token in o["python"])
        amp = ", ".join(f"{dev}: {pol}" for dev, pol in o["amp"].items()) or "–"
        rows.append(f"| `{o['name']}` | `{o['signature'].replace(' -> Tensor', '')}`: {forms.replace('X', o['name'])} | "
                    f"{COMPOSITE_DTYPE[o['dtype']]} | {o['out'] or '–'} | {amp} | {cell(o['doc'])} |")
    return rows


def indexed_rows(ops):
    rows = ["| op | outputs | kernel dtypes | attrs | Python | over an empty dim | notes |",
            "|---|---|---|---|---|---|---|"]
    kinds = {"values": "values (a's dtype)", "indices": "indices (int64)"}
    for o in ops:
        dim = "dim=None" if o["dim_optional"] else "dim"
        python = (f"behind torch.{o['torch_name']}(input, dim, keepdim) and Tensor.{o['torch_name']} (bound by hand)"
                  if o["custom_python"] else f"torch.{o['name']} / Tensor.{o['name']}({dim}, keepdim=False)")
        if o["out"]:
            python += f", out= ({o['out']})"
        empty = "raises IndexError" + (" (dim=None: over the flattened input, raises when it is empty)"
                                       if o["dim_optional"] else "")
        rows.append(f"| `{o['name']}` | {', '.join(kinds[x] for x in o['outputs'])} | {kernel_cell(o)} | "
                    f"{attrs_cell(o)} | {python} | {empty} | {cell(o['doc'])} |")
    return rows


def kernel_dtypes_cell(by_device):
    if by_device["cpu"] == by_device["cuda"]:
        return ", ".join(by_device["cpu"])
    return "; ".join(f"{dev.upper()}: {', '.join(d) or 'none'}" for dev, d in by_device.items())


def kernel_rows(ops):
    rows = ["| op | operands (†: written in place; → outputs) | attrs | kernel dtypes | notes |",
            "|---|---|---|---|---|"]
    for o in ops:
        rows.append(f"| `{o['name']}` | {cell(o['operands'])} | {attrs_cell(o)} | "
                    f"{kernel_dtypes_cell(o['kernel_dtypes'])} | {cell(o['doc'])} |")
    return rows


def docs_section(ops, source):
    rows_of = {"ternary": ternary_rows, "reduction": reduction_rows, "scan": along_dim_rows,
               "softmax": along_dim_rows, "moments": moments_rows, "composite": composite_rows,
               "indexed": indexed_rows, "kernel": kernel_rows}
    writers = {rows_of.get(o["family"], elementwise_rows) for o in ops}
    if len(writers) > 1:
        raise DefinitionError(f"{source}: its families need different docs tables (one file, one table)")
    rows = writers.pop()(ops)
    return DOC_BEGIN.format(source=source) + "\n" + "\n".join(rows) + "\n" + DOC_END


def update_docs(ops_by_file, path, check):
    """Rewrites each definition file's section of `path` (marked by DOC_BEGIN / DOC_END)."""
    text = open(path, encoding="utf-8").read()
    new = text
    for defs, ops in ops_by_file.items():
        source = "core/opdefs/" + os.path.basename(defs)
        begin = DOC_BEGIN.format(source=source)
        start = new.find(begin)
        end = new.find(DOC_END, start)
        if start < 0 or end < 0:
            raise DefinitionError(f"{path}: no generated section for {source} ({begin} ... {DOC_END})")
        new = new[:start] + docs_section(ops, source) + new[end + len(DOC_END):]
    if check:
        if new != text:
            sys.exit(f"{path}: a generated op table is out of date; run "
                     f"tools/gen_ops.py core/opdefs/*.yaml --docs {path}")
        return
    if new != text:
        open(path, "w", encoding="utf-8").write(new)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("defs", nargs="+")
    p.add_argument("--header")
    p.add_argument("--derivatives")
    p.add_argument("--docs")
    p.add_argument("--check", action="store_true", help="with --docs: fail if a section is out of date")
    args = p.parse_args()
    try:
        ops_by_file = load_all(args.defs)
    except DefinitionError as e:
        sys.exit(str(e))
    ops = [o for file_ops in ops_by_file.values() for o in file_ops]
    if args.header:
        open(args.header, "w", encoding="utf-8").write(header(ops))
    if args.derivatives:
        open(args.derivatives, "w", encoding="utf-8").write(derivatives(ops))
    if args.docs:
        try:
            update_docs(ops_by_file, args.docs, args.check)
        except DefinitionError as e:
            sys.exit(str(e))


if __name__ == "__main__":
    main()
