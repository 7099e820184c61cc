"""The op definitions (core/opdefs/*.yaml) against PyTorch: every Python form an entry
declares (function, Tensor method, in-place form, out=, aliases, nn.functional) exists in both
libraries and gives the same result, and the forms it does not declare are missing from torch
too, so a new entry is checked without a test of its own for its bindings."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_same_outcome

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gen_ops  # noqa: E402  (the build's own reader of the definitions)

DEFINED = [o for ops in gen_ops.load_all(sorted((ROOT / "core" / "opdefs").glob("*.yaml"))).values() for o in ops]
# The Python functions: the ops, and the variants of a kernel with several outputs (var over var_mean)
OPS = DEFINED + gen_ops.variants_of(DEFINED)
PYTHON_OPS = [o for o in OPS if not o["custom_python"] and o["python"]]
# The arguments after the tensors that a family's Python forms require (the dim of an op along one dim).
REQUIRED_ARGS = {"scan": [1], "softmax": [1]}
SAMPLE_ARG = {"int[]": 1, "int": 1, "bool": True, "float": 0.5}


def inputs(lib, op):
    """Operands inside every op's domain where one exists (0.1..0.9), integers for integral ops."""
    rng = np.random.default_rng(0)
    if op["dtype"] == "integral":
        data = [rng.integers(-8, 8, size=(2, 3)) for _ in range(3)]
    else:
        data = [rng.uniform(0.1, 0.9, size=(2, 3)) for _ in range(3)]
    tensors = [lib.tensor(d) for d in data]
    return tensors[:len(op["inputs"])] + required_args(op)


def required_args(op):
    """The arguments after the tensors that an entry's Python forms require: the dim of an op
    along one dim, a value of each of a composite op's arguments without a default."""
    if op["family"] == "composite":
        return [SAMPLE_ARG[typ] for _, typ, default in op["args"] if default is None]
    return REQUIRED_ARGS.get(op["family"], [])


def names(op):
    return [op["name"]] + op["aliases"]


def function(lib, op, name):
    """The torch function of an op: torch.special's for `special` ops, which torch lacks."""
    if "special" in op["python"]:
        assert not hasattr(lib, name), f"{lib.__name__}.{name} exists: the op is declared torch.special's"
        return getattr(lib.special, name)
    return getattr(lib, name)


@pytest.mark.parametrize("op", PYTHON_OPS, ids=lambda o: o["name"])
def test_declared_forms_match_torch(op):
    for name in names(op):
        if "nn_functional" in op["python"]:
            assert_same_outcome(lambda lib: lib.nn.functional.__dict__[name](*inputs(lib, op)))
            assert not hasattr(torch.Tensor, name)
            continue
        if "function" in op["python"]:
            assert_same_outcome(lambda lib: function(lib, op, name)(*inputs(lib, op)))
        if "method" in op["python"]:
            assert_same_outcome(lambda lib: getattr(lib.Tensor, name)(*inputs(lib, op)))
        else:
            assert not hasattr(torch.Tensor, name), f"torch.Tensor.{name} exists: the op is declared without it"
            assert not hasattr(pf.Tensor, name), f"plugflow.Tensor.{name} exists: the op is declared without it"
        inplace = "inplace" in op["python"]
        assert hasattr(torch.Tensor, name + "_") == inplace, f"torch.Tensor.{name}_ exists: {not inplace}"
        if inplace:
            def run(lib):
                a, *rest = inputs(lib, op)
                return getattr(a, name + "_")(*rest), a
            assert_same_outcome(run)


@pytest.mark.parametrize("op", [o for o in OPS if o["out"] or "function" in o["python"]], ids=lambda o: o["name"])
def test_out_forms_match_torch(op):
    """out= where declared (both write into it); elsewhere both refuse the argument."""
    for name in names(op):
        # With a no-dim overload, PyTorch's out= is the dim overload's: sum(t, out=o) is a TypeError.
        # A reduction over one int dim (all) takes out= in both of its overloads.
        for with_dim in (False, True) if op["dim_optional"] or op.get("dim") == "int" else (False,):
            def run(lib):
                args = inputs(lib, op) + ([0] if with_dim else [])
                dtype = lib.bool if op["bool_out"] else lib.int64 if op["outputs"] == ["indices"] else args[0].dtype
                out = lib.empty(0, dtype=dtype)
                res = function(lib, op, name)(*args, out=out)
                return res is out, out
            assert_same_outcome(run)


ONE_INT_DIM = [o for o in DEFINED if o["family"] == "reduction" and o["dim"] == "int"]


@pytest.mark.parametrize("op", ONE_INT_DIM, ids=lambda o: o["name"])
@pytest.mark.parametrize("dtype", ["float32", "uint8", "bool"])
def test_one_int_dim_reductions_take_torchs_arguments(op, dtype):
    """X(input) and X(input, int dim, bool keepdim=False) (all, any): the same results, and the
    same refusals of other arguments (a tuple, a bool or None as dim, keepdim without dim), in
    both forms; out= of a bool or uint8 tensor in both overloads, of another dtype refused."""
    data = np.random.default_rng(0).integers(0, 2, size=(2, 3))

    def tensor(lib):
        return lib.tensor(data).to(getattr(lib, dtype))

    calls = [((), {}), ((1,), {}), ((-1, True), {}), ((), {"dim": 0, "keepdim": True}), ((), {"keepdim": True}),
             ((None,), {}), (((0,),), {}), ((True,), {}), ((0.0,), {}), ((0,), {"keepdim": 1})]
    for args, kwargs in calls:
        assert_same_outcome(lambda lib: getattr(lib, op["name"])(tensor(lib), *args, **kwargs))
        assert_same_outcome(lambda lib: getattr(tensor(lib), op["name"])(*args, **kwargs))
    for out_dtype in ("bool", "uint8", "float32", "int64"):
        for args in ((), (0,), (1, True)):
            def run(lib):
                out = lib.empty(0, dtype=getattr(lib, out_dtype))
                return getattr(lib, op["name"])(tensor(lib), *args, out=out) is out, out
            assert_same_outcome(run)


def test_every_catalog_op_is_defined_once():
    """The catalog (what plugins can register kernels for and graphs are made of) is exactly the
    ops of the definition files (less the composites, which have no kernel): no op written only
    in C++, none defined twice, none defined without its catalog entry; each catalog schema is the
    definition's where it names one."""
    defined = [o["name"] for o in DEFINED]
    assert len(defined) == len(set(defined))
    assert set(pf._C.op_names()) == {o["name"] for o in DEFINED if o["family"] != "composite"}
    for o in DEFINED:
        if o["family"] == "kernel":
            assert pf._C.op_signature(o["name"]) == o["signature"], o["name"]
