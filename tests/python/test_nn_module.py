"""nn.Module mechanics against PyTorch 1.13: Parameter, registration and attribute semantics,
named_* iteration (prefix, recurse, remove_duplicate), train/eval, apply, dtype conversion,
zero_grad, hooks (forward pre/post, full backward), state_dict / load_state_dict (round trips,
strict errors and messages), repr, containers (Sequential, ModuleList, ModuleDict,
ParameterList, ParameterDict), nn.init (distributions checked statistically on fresh random
draws, deterministic initialisers exactly) and nn.utils (clip_grad_*, parameters <-> vector)."""

import copy
import math
import pickle
from collections import OrderedDict

import numpy as np
import pytest
import torch

import plugflow as pf
import plugflow.nn as pnn
from helpers import assert_matches, load_from_torch, seeded_rng


@pytest.fixture
def rng():
    return seeded_rng(seed_plugflow=True)  # plugflow's own draws (nn.init) differ per run too


def torch_repr(obj):
    """repr of a torch object with plugflow's names, for comparing printed forms."""
    return repr(obj).replace("torch.", "plugflow.")


# ---- a model built the same way with torch.nn and plugflow.nn -----------------------------------

def build_model(nn):
    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = nn.Linear(width, width)
            self.act = nn.GELU(approximate="tanh")
            self.register_buffer("scale", (pf if nn is pnn else torch).ones(width))
            self.register_buffer("cache", (pf if nn is pnn else torch).zeros(2), persistent=False)

        def forward(self, x):
            return self.act(self.fc(x)) * self.scale

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(3, 4, bias=False)
            self.blocks = nn.Sequential(Block(4), nn.Identity(), Block(4))
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Bilinear(4, 4, 1)})
            self.extra = nn.ParameterList([nn.Parameter((pf if nn is pnn else torch).zeros(2, 2))])
            self.shared = self.stem  # the same module twice: listed once unless remove_duplicate=False

        def forward(self, x):
            h = self.blocks(self.stem(x))
            return self.heads["a"](h), self.heads["b"](h, h)

    return Net()


@pytest.fixture
def models():
    net_t = build_model(torch.nn)
    net_p = build_model(pnn)
    load_from_torch(net_p, net_t)
    return net_p, net_t


def test_names_match_torch(models):
    net_p, net_t = models
    assert [n for n, _ in net_p.named_parameters()] == [n for n, _ in net_t.named_parameters()]
    assert [n for n, _ in net_p.named_buffers()] == [n for n, _ in net_t.named_buffers()]
    assert [n for n, _ in net_p.named_modules()] == [n for n, _ in net_t.named_modules()]
    assert [n for n, _ in net_p.named_modules(remove_duplicate=False)] == \
        [n for n, _ in net_t.named_modules(remove_duplicate=False)]
    assert [n for n, _ in net_p.named_modules(prefix="net")] == [n for n, _ in net_t.named_modules(prefix="net")]
    assert [n for n, _ in net_p.named_parameters(prefix="m", recurse=False)] == \
        [n for n, _ in net_t.named_parameters(prefix="m", recurse=False)]
    assert [n for n, _ in net_p.blocks.named_parameters(recurse=False)] == []
    assert [n for n, _ in net_p.named_children()] == [n for n, _ in net_t.named_children()]
    assert list(net_p.state_dict()) == list(net_t.state_dict())
    assert len(list(net_p.parameters())) == len(list(net_t.parameters()))
    assert len(list(net_p.modules())) == len(list(net_t.modules()))
    assert all(isinstance(p, pnn.Parameter) for p in net_p.parameters())


def test_named_parameters_remove_duplicate():
    lin = pnn.Linear(2, 2)
    seq = pnn.Sequential(lin, lin)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias"]
    assert [n for n, _ in seq.named_parameters(remove_duplicate=False)] == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_forward_matches_torch(rng, models):
    net_p, net_t = models
    x = rng.normal(size=(5, 3)).astype(np.float32)
    out_t = net_t(torch.from_numpy(x))
    out_p = net_p(pf.from_numpy(x))
    for a, b in zip(out_p, out_t):
        assert_matches(a, b.detach(), rtol=1e-5, atol=1e-5)
    sum(o.sum() for o in out_t).backward()
    sum(o.sum() for o in out_p).backward()
    grads_t = dict(net_t.named_parameters())
    for name, p in net_p.named_parameters():
        if grads_t[name].grad is None:
            assert p.grad is None, name
        else:
            assert_matches(p.grad, grads_t[name].grad, rtol=1e-4, atol=1e-5)


def test_repr_matches_torch(models):
    net_p, net_t = models
    assert repr(net_p) == torch_repr(net_t)


# ---- Parameter -----------------------------------------------------------------------------------

def test_parameter_basics(rng):
    data = pf.from_numpy(rng.normal(size=(2, 3)))
    p = pnn.Parameter(data)
    assert isinstance(p, pf.Tensor) and isinstance(p, pnn.Parameter)
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    data.add_(1)  # Parameter(data) shares data's memory, as in PyTorch
    assert_matches(p.detach(), torch.from_numpy(data.numpy()))
    assert type(p * 2) is pf.Tensor and type(p.detach()) is pf.Tensor
    assert repr(p).startswith("Parameter containing:\ntensor([[")
    assert repr(p).endswith("requires_grad=True)") and "dtype=plugflow.float64" in repr(p)
    assert repr(p) == "Parameter containing:\n" + repr(p.detach().requires_grad_())  # printed as a tensor
    frozen = pnn.Parameter(pf.zeros(2), requires_grad=False)
    assert not frozen.requires_grad
    assert repr(frozen) == torch_repr(torch.nn.Parameter(torch.zeros(2), requires_grad=False))
    assert repr(pnn.Parameter(pf.ones(3))) == torch_repr(torch.nn.Parameter(torch.ones(3)))
    assert pnn.Parameter().shape == (0,)
    with pytest.raises(TypeError):
        pnn.Parameter([1.0, 2.0])


def test_parameter_from_non_leaf_is_a_leaf():
    x = pf.ones(3, requires_grad=True)
    p = pnn.Parameter(x * 2)
    assert p.is_leaf and p.grad_fn is None
    (p * 3).sum().backward()
    assert x.grad is None and p.grad.tolist() == [3.0, 3.0, 3.0]


def test_parameter_data_and_to():
    p = pnn.Parameter(pf.ones(2, 2))
    p.data = pf.zeros(3, dtype=pf.float64)
    assert isinstance(p, pnn.Parameter) and p.requires_grad and p.shape == (3,) and p.dtype is pf.float64
    q = p.to(pf.float32)
    assert q.dtype is pf.float32 and q.requires_grad


def test_parameter_deepcopy():
    p = pnn.Parameter(pf.ones(2))
    c = copy.deepcopy(p)
    assert type(c) is pnn.Parameter and c.requires_grad and c.is_leaf
    c.data.add_(1)
    assert p.tolist() == [1.0, 1.0]


# ---- registration and attributes ---------------------------------------------------------------------

def test_setattr_registers():
    m = pnn.Module()
    m.w = pnn.Parameter(pf.ones(2))
    m.sub = pnn.Linear(2, 2)
    m.register_buffer("buf", pf.zeros(2))
    m.plain = pf.ones(1)  # a plain tensor attribute is not registered
    assert list(m._parameters) == ["w"] and list(m._modules) == ["sub"] and list(m._buffers) == ["buf"]
    assert "plain" not in m.state_dict() and "w" in m.state_dict()
    m.buf = pf.ones(2)  # stays a buffer
    assert m._buffers["buf"].tolist() == [1.0, 1.0]
    m.w = None  # allowed: a parameter slot may be None
    assert m.w is None and "w" not in m.state_dict()
    m.sub = pnn.Identity()
    assert isinstance(m._modules["sub"], pnn.Identity)
    m.w = pnn.Parameter(pf.ones(1))
    del m.w, m.sub, m.buf
    assert not m._parameters and not m._modules and not m._buffers
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'w'"):
        m.w


def test_reassigning_switches_kind():
    m = pnn.Module()
    m.register_buffer("x", pf.zeros(1))
    m.x = pnn.Parameter(pf.ones(1))
    assert "x" in m._parameters and "x" not in m._buffers
    m.x = None
    m.y = pnn.Linear(1, 1)
    m.y = pnn.Parameter(pf.ones(1))
    assert "y" in m._parameters and "y" not in m._modules


def _error_of(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", ["tensor as parameter", "int as module", "int as buffer", "dotted buffer",
                                  "empty parameter name", "existing attribute", "non-leaf parameter",
                                  "non-Parameter", "module not a Module"])
def test_registration_errors(case):
    def make(lib):
        m = lib.nn.Linear(2, 2)
        m.thing = 1
        m.register_buffer("buf", lib.zeros(1))
        return m

    def act(lib):
        m = make(lib)
        nn = lib.nn
        if case == "tensor as parameter":
            m.weight = lib.zeros(2, 2)
        elif case == "int as module":
            m.sub = nn.Linear(1, 1)
            m.sub = 3
        elif case == "int as buffer":
            m.buf = 3
        elif case == "dotted buffer":
            m.register_buffer("a.b", lib.zeros(1))
        elif case == "empty parameter name":
            m.register_parameter("", nn.Parameter(lib.zeros(1)))
        elif case == "existing attribute":
            m.register_parameter("thing", nn.Parameter(lib.zeros(1)))
        elif case == "non-leaf parameter":
            m.register_parameter("p", lib.ones(1, requires_grad=True) * 2)
        elif case == "non-Parameter":
            m.register_parameter("p", lib.ones(1))
        elif case == "module not a Module":
            m.add_module("x", lib.ones(1))

    expected_type, expected_msg = _error_of(lambda: act(torch))
    actual_type, actual_msg = _error_of(lambda: act(pf))
    assert actual_type is expected_type
    if case not in ("tensor as parameter", "non-Parameter", "module not a Module", "non-leaf parameter"):
        assert actual_msg == expected_msg  # messages naming torch.FloatTensor differ in the type name


def test_assign_before_init():
    class Broken(pnn.Module):
        def __init__(self):
            self.w = pnn.Parameter(pf.zeros(1))

    with pytest.raises(AttributeError, match="cannot assign parameters before Module.__init__"):
        Broken()


def test_missing_forward():
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing the required "forward" function'):
        pnn.Module()(pf.zeros(1))


def test_get_submodule_parameter_buffer(models):
    net_p, _ = models
    assert net_p.get_submodule("blocks.0.fc") is net_p.blocks[0].fc
    assert net_p.get_parameter("blocks.2.fc.bias") is net_p.blocks[2].fc.bias
    assert net_p.get_buffer("blocks.0.scale") is net_p.blocks[0].scale
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        net_p.get_submodule("blocks.nope")
    with pytest.raises(AttributeError, match="is not a buffer"):
        net_p.get_buffer("stem.weight")


def test_dir_lists_members(models):
    names = dir(models[0])
    assert {"stem", "blocks", "heads", "forward", "training"} <= set(names)
    assert not any(n[0].isdigit() for n in dir(models[0].blocks))


# ---- modes, apply, conversion, gradients ------------------------------------------------------------

def test_train_eval_apply(models):
    net_p, _ = models
    assert all(m.training for m in net_p.modules())
    assert net_p.eval() is net_p
    assert not any(m.training for m in net_p.modules())
    net_p.train()
    assert all(m.training for m in net_p.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net_p.train(1)
    order = []
    net_p.heads.apply(lambda m: order.append(type(m).__name__))
    assert order == ["Linear", "Bilinear", "ModuleDict"]  # children first, then the module


def test_to_dtype_keeps_parameter_objects(models):
    net_p, _ = models
    params = list(net_p.parameters())
    net_p.stem.weight.grad = pf.ones(4, 3)
    assert net_p.double() is net_p
    assert [id(p) for p in net_p.parameters()] == [id(p) for p in params]
    assert all(p.dtype is pf.float64 and isinstance(p, pnn.Parameter) and p.is_leaf for p in net_p.parameters())
    assert net_p.stem.weight.grad.dtype is pf.float64
    net_p.to(pf.float32)
    assert all(p.dtype is pf.float32 for p in net_p.parameters())
    net_p.half()
    assert net_p.stem.weight.dtype is pf.float16
    net_p.to("cpu", pf.float32)
    net_p.to(device="cpu")
    net_p.to(pf.zeros(1, dtype=pf.float64))
    assert net_p.stem.weight.dtype is pf.float64
    with pytest.raises(TypeError, match="nn.Module.to only accepts floating point"):
        net_p.to(pf.int32)
    with pytest.raises(TypeError):
        net_p.to(pf.float32, "cpu")
    with pytest.raises(TypeError, match="unexpected keyword argument 'memory'"):
        net_p.to(memory=1)


def test_to_leaves_integer_buffers():
    bn = pnn.Module()
    bn.register_buffer("count", pf.tensor(3))
    bn.register_buffer("stat", pf.zeros(2))
    bn.double()
    assert bn.count.dtype is pf.int64 and bn.stat.dtype is pf.float64
    bn.type(pf.float32)  # type() converts every tensor, as in PyTorch
    assert bn.count.dtype is pf.float32


def test_zero_grad_and_requires_grad(models):
    net_p, _ = models
    for p in net_p.parameters():
        p.grad = pf.ones(p.shape)
    net_p.zero_grad()  # PyTorch 1.13's default: zeros in place
    assert all(p.grad is not None and not bool(p.grad.any()) for p in net_p.parameters())
    net_p.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in net_p.parameters())
    net_p.requires_grad_(False)
    assert not any(p.requires_grad for p in net_p.parameters())
    net_p.requires_grad_()
    assert all(p.requires_grad for p in net_p.parameters())


# ---- hooks -----------------------------------------------------------------------------------------

def test_forward_hooks():
    lin = pnn.Linear(2, 2)
    seen = []
    h1 = lin.register_forward_pre_hook(lambda m, inp: (inp[0] * 0,))  # replaces the input
    h2 = lin.register_forward_hook(lambda m, inp, out: seen.append(out.shape) or out + 1)
    out = lin(pf.ones(3, 2))
    assert seen == [(3, 2)]
    expected = (lin.bias + 1).detach().expand(3, 2)
    assert bool((out == expected).all())
    h1.remove()
    h2.remove()
    h2.remove()  # removing twice is harmless
    out = lin(pf.ones(3, 2))
    assert seen == [(3, 2)]
    with lin.register_forward_pre_hook(lambda m, inp: pf.zeros(1, 2)):  # a non-tuple result is wrapped
        assert lin(pf.ones(3, 2)).shape == (1, 2)
    assert lin(pf.ones(3, 2)).shape == (3, 2)


def test_global_forward_hook():
    from plugflow.nn.modules.module import register_module_forward_hook
    calls = []
    handle = register_module_forward_hook(lambda m, i, o: calls.append(type(m).__name__))
    try:
        pnn.Sequential(pnn.ReLU(), pnn.Tanh())(pf.zeros(2))
    finally:
        handle.remove()
    assert calls == ["ReLU", "Tanh", "Sequential"]


def test_full_backward_hook_matches_torch(rng):
    def run(lib, nn):
        recorded = []

        def hook(module, grad_input, grad_output):
            recorded.append((grad_input, grad_output))
            return tuple(None if g is None else g * 2 for g in grad_input)

        lin = nn.Linear(3, 2).double()
        for p in lin.parameters():
            p.data = lib.from_numpy(np.ones(tuple(p.shape)))
        lin.register_full_backward_hook(hook)
        x = lib.from_numpy(data.copy()).requires_grad_()
        lin(x).pow(2).sum().backward()
        return recorded, x.grad, lin.weight.grad

    data = rng.normal(size=(4, 3))
    rec_t, xg_t, wg_t = run(torch, torch.nn)
    rec_p, xg_p, wg_p = run(pf, pnn)
    assert len(rec_p) == len(rec_t) == 1
    (gi_p, go_p), (gi_t, go_t) = rec_p[0], rec_t[0]
    assert len(gi_p) == len(gi_t) and len(go_p) == len(go_t)
    for a, b in zip(gi_p + go_p, gi_t + go_t):
        assert_matches(a, b, rtol=1e-12, atol=1e-12)
    assert_matches(xg_p, xg_t, rtol=1e-12, atol=1e-12)  # doubled by the hook
    assert_matches(wg_p, wg_t, rtol=1e-12, atol=1e-12)


def test_full_backward_hook_without_input_grad():
    lin = pnn.Linear(3, 2)
    calls = []
    lin.register_full_backward_hook(lambda m, gi, go: calls.append((gi, go[0].shape)))
    lin(pf.ones(4, 3)).sum().backward()
    assert calls == [((None,), (4, 2))]


# ---- state_dict / load_state_dict --------------------------------------------------------------------

def test_state_dict_contents(models):
    net_p, net_t = models
    sd = net_p.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == list(net_t.state_dict())
    assert "blocks.0.cache" not in sd  # non-persistent
    assert all(type(v) is pf.Tensor and not v.requires_grad for v in sd.values())
    sd["stem.weight"].zero_()  # detached, but sharing the parameter's memory
    assert not bool(net_p.stem.weight.any())
    kept = net_p.state_dict(keep_vars=True)
    assert kept["stem.weight"] is net_p.stem.weight
    assert list(net_p.state_dict(prefix="model.")) == ["model." + k for k in sd]
    assert sd._metadata[""] == {"version": 1} and "blocks.0" in sd._metadata


def test_state_dict_round_trip(rng, models):
    net_p, _ = models
    other = build_model(pnn)
    result = other.load_state_dict(net_p.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    x = pf.from_numpy(rng.normal(size=(2, 3)).astype(np.float32))
    for a, b in zip(other(x), net_p(x)):
        assert bool((a == b).all())
    # The loaded values are copies: changing the source afterwards leaves the target alone.
    with pf.no_grad():
        net_p.stem.weight.add_(1)
    assert not bool((other.stem.weight == net_p.stem.weight).any())


def test_load_state_dict_strict_errors_match_torch(rng):
    def attempt(lib, strict):
        nn = lib.nn
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        sd = OrderedDict(model.state_dict())
        del sd["2.bias"]
        sd["0.weight"] = lib.zeros(5, 3)
        sd["1.extra"] = lib.zeros(1)
        sd["head.weight"] = lib.zeros(1)
        with pytest.raises(RuntimeError) as info:
            model.load_state_dict(sd, strict=strict)
        return str(info.value)

    for strict in (True, False):
        assert attempt(pf, strict) == attempt(torch, strict).replace("torch.", "plugflow.")


def test_load_state_dict_non_strict_returns_keys():
    def attempt(lib):
        nn = lib.nn
        model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
        sd = OrderedDict(model.state_dict())
        del sd["1.weight"]
        sd["2.weight"] = lib.zeros(1)
        return model.load_state_dict(sd, strict=False)

    result_p, result_t = attempt(pf), attempt(torch)
    assert result_p.missing_keys == result_t.missing_keys == ["1.weight"]
    assert result_p.unexpected_keys == result_t.unexpected_keys == ["2.weight"]
    assert repr(result_p) == repr(result_t)


def test_load_state_dict_bad_values():
    lin = pnn.Linear(2, 2)
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        lin.load_state_dict([("weight", pf.zeros(2, 2))])
    with pytest.raises(RuntimeError, match='While copying the parameter named "weight", expected torch.Tensor'):
        lin.load_state_dict({"weight": [[0.0, 0.0], [0.0, 0.0]], "bias": pf.zeros(2)})


def test_load_state_dict_casts_dtype():
    lin = pnn.Linear(2, 2)
    lin.load_state_dict({"weight": pf.ones(2, 2, dtype=pf.float64), "bias": pf.zeros(2, dtype=pf.float64)})
    assert lin.weight.dtype is pf.float32 and lin.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_load_from_torch_state_dict(rng):
    """A PyTorch model's weights (as numpy) give the same outputs in the plugflow model."""
    net_t = build_model(torch.nn)
    net_p = build_model(pnn)
    load_from_torch(net_p, net_t)
    x = rng.normal(size=(3, 3)).astype(np.float32)
    for a, b in zip(net_p(pf.from_numpy(x)), net_t(torch.from_numpy(x))):
        assert_matches(a, b.detach(), rtol=1e-5, atol=1e-5)


# ---- containers ------------------------------------------------------------------------------------

def test_sequential_indexing():
    layers = [pnn.Linear(2, 2), pnn.ReLU(), pnn.Linear(2, 3), pnn.Tanh()]
    seq = pnn.Sequential(*layers)
    assert len(seq) == 4 and seq[0] is layers[0] and seq[-1] is layers[3]
    sliced = seq[1:3]
    assert isinstance(sliced, pnn.Sequential) and list(sliced) == layers[1:3]
    assert list(sliced._modules) == ["1", "2"]  # slicing keeps the names, as PyTorch
    with pytest.raises(IndexError, match="index 4 is out of range"):
        seq[4]
    seq[1] = pnn.GELU()
    assert isinstance(seq[1], pnn.GELU)
    del seq[1]
    assert list(seq._modules) == ["0", "1", "2"] and seq[1] is layers[2]
    seq.append(pnn.Sigmoid())
    seq.insert(0, pnn.Identity())
    seq.extend([pnn.ReLU()])
    assert [type(m).__name__ for m in seq] == ["Identity", "Linear", "Linear", "Tanh", "Sigmoid", "ReLU"]
    assert isinstance(seq.pop(0), pnn.Identity) and len(seq) == 5
    named = pnn.Sequential(OrderedDict([("first", pnn.Linear(1, 1)), ("second", pnn.ReLU())]))
    assert list(named._modules) == ["first", "second"] and named.first is named[0]
    assert len(seq + named) == 7 and len(named * 2) == 4


def test_sequential_forward_and_repr(rng):
    seq_t = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2), torch.nn.Softmax(-1))
    seq_p = pnn.Sequential(pnn.Linear(3, 5), pnn.ReLU(), pnn.Linear(5, 2), pnn.Softmax(-1))
    load_from_torch(seq_p, seq_t)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    assert_matches(seq_p(pf.from_numpy(x)), seq_t(torch.from_numpy(x)).detach(), rtol=1e-5, atol=1e-6)
    assert repr(seq_p) == repr(seq_t)


def test_module_list_and_dict():
    ml = pnn.ModuleList([pnn.Linear(1, 1) for _ in range(3)])
    assert len(ml) == 3 and isinstance(ml[1:], pnn.ModuleList) and len(ml[1:]) == 2
    ml.append(pnn.ReLU())
    ml.insert(1, pnn.Tanh())
    ml.extend([pnn.Sigmoid()])
    assert [type(m).__name__ for m in ml] == ["Linear", "Tanh", "Linear", "Linear", "ReLU", "Sigmoid"]
    del ml[0]
    assert list(ml._modules) == [str(i) for i in range(5)]
    ml += [pnn.GELU()]
    assert len(ml) == 6 and ml[-1].approximate == "none"
    with pytest.raises(IndexError):
        ml[6]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(pnn.ReLU())
    assert len(list(ml.parameters())) == 4

    md = pnn.ModuleDict({"b": pnn.ReLU(), "a": pnn.Tanh()})
    assert list(md.keys()) == ["b", "a"] and "a" in md and len(md) == 2
    md["c"] = pnn.Linear(1, 1)
    md.update([("d", pnn.Identity())])
    assert isinstance(md.pop("b"), pnn.ReLU) and list(md) == ["a", "c", "d"]
    assert [n for n, _ in md.named_parameters()] == ["c.weight", "c.bias"]
    with pytest.raises(ValueError, match="has length 3; 2 is required"):
        md.update([("x", pnn.ReLU(), 1)])
    md.clear()
    assert len(md) == 0


def test_parameter_list_and_dict():
    pl = pnn.ParameterList([pf.zeros(2), pnn.Parameter(pf.ones(3))])
    assert all(isinstance(p, pnn.Parameter) for p in pl)
    pl.append(pf.ones(1, 2))
    pl.extend([pf.zeros(4)])
    assert len(pl) == 4 and [p.shape for p in pl[1:3]] == [(3,), (1, 2)]
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2", "3"]
    expected = torch.nn.ParameterList([torch.zeros(2), torch.ones(3), torch.ones(1, 2), torch.zeros(4)])
    assert repr(pl) == torch_repr(expected)
    with pytest.raises(TypeError, match="ParameterList.extend should be called with an iterable"):
        pl.extend(pf.zeros(2))
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        pl()

    pd = pnn.ParameterDict({"b": pf.zeros(1), "a": pf.ones(2)})
    assert list(pd.keys()) == ["a", "b"]  # a plain dict is sorted, as PyTorch does
    pd["c"] = pf.zeros(3)
    assert isinstance(pd["c"], pnn.Parameter) and "c" in pd and len(pd) == 3
    assert [n for n, _ in pd.named_parameters()] == ["a", "b", "c"]
    assert pd.get("zz") is None and pd.pop("a").shape == (2,)
    k, v = pd.popitem()
    assert k == "c" and v.shape == (3,) and list(pd) == ["b"]
    merged = pd | pnn.ParameterDict(OrderedDict([("z", pf.zeros(1))]))
    assert list(merged) == ["b", "z"]
    with pytest.raises(TypeError, match="cannot be used as a key"):
        pd[1] = pf.zeros(1)


# ---- nn.init -------------------------------------------------------------------------------------

def test_calculate_gain_matches_torch():
    for name in ["linear", "conv2d", "sigmoid", "tanh", "relu", "selu"]:
        assert pnn.init.calculate_gain(name) == torch.nn.init.calculate_gain(name)
    for slope in (None, 0.2, 3):
        assert pnn.init.calculate_gain("leaky_relu", slope) == torch.nn.init.calculate_gain("leaky_relu", slope)
    with pytest.raises(ValueError, match="Unsupported nonlinearity softmax"):
        pnn.init.calculate_gain("softmax")
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        pnn.init.calculate_gain("leaky_relu", True)


N_DRAWS = 40000
Z = 5.0  # standard errors allowed: false alarms are rarer than 1 in 10^6


def check_moments(t, mean, std):
    """The sample mean and standard deviation of t match (mean, std) within sampling error."""
    values = t.detach().double().numpy().ravel()
    n = values.size
    assert abs(values.mean() - mean) < Z * std / math.sqrt(n), (values.mean(), mean)
    # The sample variance's standard error is about var * sqrt(2 / n) (a little more for
    # heavy tails; the uniform's is lighter).
    assert abs(values.var() - std ** 2) < Z * std ** 2 * math.sqrt(2.0 / n), (values.std(), std)


def test_uniform_and_normal(rng):
    a, b = sorted(rng.uniform(-3, 3, size=2))
    t = pnn.init.uniform_(pf.empty(200, N_DRAWS // 200), a, b)
    # Drawn in float32 like PyTorch's: the bounds are the float32 numbers nearest a and b.
    assert float(t.min()) >= np.float32(a) and float(t.max()) <= np.float32(b)
    check_moments(t, (a + b) / 2, (b - a) / math.sqrt(12))
    mean, std = rng.uniform(-2, 2), rng.uniform(0.1, 3)
    t = pnn.init.normal_(pf.empty(N_DRAWS, dtype=pf.float64), mean, std)
    check_moments(t, mean, std)


def test_trunc_normal(rng):
    mean, std = rng.uniform(-1, 1), rng.uniform(0.5, 2)
    a, b = mean - rng.uniform(0.5, 2) * std, mean + rng.uniform(0.5, 2) * std
    t = pnn.init.trunc_normal_(pf.empty(N_DRAWS, dtype=pf.float64), mean, std, a, b)
    values = t.numpy()
    assert values.min() >= a and values.max() <= b
    # Moments of the truncated normal, from scipy-free formulas.
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    mass = cdf(beta) - cdf(alpha)
    t_mean = mean + std * (pdf(alpha) - pdf(beta)) / mass
    t_var = std ** 2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / mass - ((pdf(alpha) - pdf(beta)) / mass) ** 2)
    check_moments(t, t_mean, math.sqrt(t_var))
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        pnn.init.trunc_normal_(pf.empty(3), mean=10.0, std=1.0, a=-2.0, b=2.0)


@pytest.mark.parametrize("shape", [(120, 300), (64, 32, 3, 3), (50, 80, 7)])
def test_xavier_and_kaiming(rng, shape):
    fan_in = shape[1] * int(np.prod(shape[2:]))
    fan_out = shape[0] * int(np.prod(shape[2:]))
    gain = rng.uniform(0.5, 2)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    t = pnn.init.xavier_uniform_(pf.empty(shape), gain)
    assert float(t.abs().max()) <= math.sqrt(3) * std * (1 + 1e-6)
    check_moments(t, 0.0, std)
    check_moments(pnn.init.xavier_normal_(pf.empty(shape), gain), 0.0, std)
    slope = rng.uniform(0, 0.5)
    for mode, fan in (("fan_in", fan_in), ("fan_out", fan_out)):
        std = math.sqrt(2.0 / (1 + slope ** 2)) / math.sqrt(fan)
        t = pnn.init.kaiming_uniform_(pf.empty(shape), a=slope, mode=mode)
        assert float(t.abs().max()) <= math.sqrt(3) * std * (1 + 1e-6)
        check_moments(t, 0.0, std)
        check_moments(pnn.init.kaiming_normal_(pf.empty(shape), mode=mode, nonlinearity="relu"), 0.0,
                      math.sqrt(2.0 / fan))


def test_init_errors_match_torch():
    cases = [
        lambda lib: lib.nn.init.xavier_uniform_(lib.empty(5)),
        lambda lib: lib.nn.init.kaiming_normal_(lib.empty(3, 4), mode="fan_avg"),
        lambda lib: lib.nn.init.kaiming_uniform_(lib.empty(3, 4), nonlinearity="softmax"),
        lambda lib: lib.nn.init.eye_(lib.empty(3, 4, 5)),
        lambda lib: lib.nn.init.dirac_(lib.empty(3, 4)),
        lambda lib: lib.nn.init.dirac_(lib.empty(3, 4, 5), groups=2),
        lambda lib: lib.nn.init.orthogonal_(lib.empty(3)),
    ]
    for case in cases:
        expected_type, expected_msg = _error_of(lambda: case(torch))
        actual_type, actual_msg = _error_of(lambda: case(pf))
        assert (actual_type, actual_msg) == (expected_type, expected_msg)
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        pnn.init.kaiming_uniform_(pf.empty(0, 3))


def test_deterministic_initialisers(rng):
    for shape in [(3, 5), (4, 4), (6, 2)]:
        assert pnn.init.eye_(pf.empty(shape)).tolist() == torch.nn.init.eye_(torch.empty(shape)).tolist()
    for shape, groups in [((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((4, 4, 3, 3, 3), 4)]:
        assert pnn.init.dirac_(pf.empty(shape), groups).tolist() == \
            torch.nn.init.dirac_(torch.empty(shape), groups).tolist()
    value = float(rng.normal())
    assert pnn.init.constant_(pf.empty(2, 3, dtype=pf.float64), value).tolist() == [[value] * 3] * 2
    assert pnn.init.ones_(pf.empty(2)).tolist() == [1.0, 1.0]
    assert pnn.init.zeros_(pf.ones(2)).tolist() == [0.0, 0.0]


def test_init_runs_under_no_grad():
    w = pnn.Parameter(pf.empty(3, 4))
    for fn in (pnn.init.uniform_, pnn.init.normal_, pnn.init.xavier_uniform_, pnn.init.kaiming_normal_,
               pnn.init.zeros_, pnn.init.eye_, pnn.init.orthogonal_, pnn.init.trunc_normal_):
        assert fn(w) is w
        assert w.is_leaf and w.grad_fn is None and w.requires_grad


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 2, 3)])
def test_orthogonal(rng, shape):
    gain = rng.uniform(0.5, 2)
    w = pnn.init.orthogonal_(pf.empty(shape, dtype=pf.float64), gain).numpy().reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(min(rows, cols)), atol=1e-10)


@pytest.mark.parametrize("layer", ["Linear", "Conv2d", "Bilinear", "Embedding", "MultiheadAttention"])
def test_default_initialisation(rng, layer):
    """Layers start from PyTorch's reset_parameters distributions."""
    if layer == "Linear":
        m = pnn.Linear(200, 300)
        bound = 1 / math.sqrt(200)
        checks = [(m.weight, bound), (m.bias, bound)]
    elif layer == "Conv2d":
        m = pnn.Conv2d(8, 500, 3, groups=2)
        bound = 1 / math.sqrt(4 * 9)
        checks = [(m.weight, bound), (m.bias, bound)]
    elif layer == "Bilinear":
        m = pnn.Bilinear(20, 30, 40)
        bound = 1 / math.sqrt(20)
        checks = [(m.weight, bound), (m.bias, bound)]
    elif layer == "Embedding":
        m = pnn.Embedding(1000, 40, padding_idx=3)
        assert not bool(m.weight[3].any())
        values = m.weight.detach()[4:]
        check_moments(values, 0.0, 1.0)
        return
    else:
        m = pnn.MultiheadAttention(64, 4)
        bound = math.sqrt(6 / (64 + 3 * 64))  # xavier_uniform_ over the packed (3E, E) weight
        checks = [(m.in_proj_weight, bound), (m.out_proj.weight, 1 / 8)]
        assert not bool(m.in_proj_bias.any()) and not bool(m.out_proj.bias.any())
    for t, bound in checks:
        assert float(t.abs().max()) <= bound
        if t.numel() >= 300:
            check_moments(t, 0.0, bound / math.sqrt(3))


# ---- nn.utils --------------------------------------------------------------------------------------

def _params_with_grads(lib, shapes, grads):
    params = []
    for shape, g in zip(shapes, grads):
        p = lib.nn.Parameter(lib.zeros(shape, dtype=lib.float64))
        if g is not None:
            p.grad = lib.from_numpy(g.copy())
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, math.inf, 0.5])
def test_clip_grad_norm(rng, norm_type):
    shapes = [(3, 4), (5,), (2, 2, 2), (1,)]
    grads = [rng.normal(0, 2, size=s) for s in shapes]
    grads[3] = None  # parameters without a gradient are skipped
    for max_norm in (0.5, 1e3):  # clips / leaves alone
        params_t = _params_with_grads(torch, shapes, grads)
        params_p = _params_with_grads(pf, shapes, grads)
        total_t = torch.nn.utils.clip_grad_norm_(params_t, max_norm, norm_type)
        total_p = pnn.utils.clip_grad_norm_(iter(params_p), max_norm, norm_type)  # any iterable
        assert_matches(total_p, total_t, rtol=1e-10, atol=1e-12)
        for p, t in zip(params_p, params_t):
            assert (p.grad is None) == (t.grad is None)
            if t.grad is not None:
                assert_matches(p.grad, t.grad, rtol=1e-10, atol=1e-12)


def test_clip_grad_norm_edge_cases():
    assert pnn.utils.clip_grad_norm_([pnn.Parameter(pf.zeros(2))], 1.0).item() == 0.0
    p = pnn.Parameter(pf.zeros(2))
    p.grad = pf.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients from `parameters` is non-finite"):
        pnn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    single = pnn.Parameter(pf.zeros(2))
    single.grad = pf.tensor([3.0, 4.0])
    assert abs(pnn.utils.clip_grad_norm_(single, 1.0).item() - 5.0) < 1e-6  # a lone tensor works too
    np.testing.assert_allclose(single.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_clip_grad_value(rng):
    shapes = [(3, 4), (5,)]
    grads = [rng.normal(0, 2, size=s) for s in shapes]
    clip = rng.uniform(0.1, 1.5)
    params_t = _params_with_grads(torch, shapes, grads)
    params_p = _params_with_grads(pf, shapes, grads)
    torch.nn.utils.clip_grad_value_(params_t, clip)
    pnn.utils.clip_grad_value_(params_p, clip)
    for p, t in zip(params_p, params_t):
        assert_matches(p.grad, t.grad)


def test_parameters_vector_round_trip(rng):
    lin_t = torch.nn.Linear(3, 2)
    lin_p = pnn.Linear(3, 2)
    load_from_torch(lin_p, lin_t)
    vec_p = pnn.utils.parameters_to_vector(lin_p.parameters())
    assert_matches(vec_p, torch.nn.utils.parameters_to_vector(lin_t.parameters()).detach())
    new = rng.normal(size=8).astype(np.float32)
    pnn.utils.vector_to_parameters(pf.from_numpy(new), lin_p.parameters())
    np.testing.assert_array_equal(lin_p.weight.detach().numpy().ravel(), new[:6])
    np.testing.assert_array_equal(lin_p.bias.detach().numpy(), new[6:])
    assert isinstance(lin_p.weight, pnn.Parameter) and lin_p.weight.requires_grad
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        pnn.utils.vector_to_parameters([1.0], lin_p.parameters())


def test_deepcopy_module(models):
    net_p, _ = models
    clone = copy.deepcopy(net_p)
    assert list(clone.state_dict()) == list(net_p.state_dict())
    assert clone.shared is clone.stem  # sharing is preserved
    for (n, a), (_, b) in zip(clone.named_parameters(), net_p.named_parameters()):
        assert a is not b and bool((a == b).all()), n


def test_pickle_module(rng):
    lin = pnn.Linear(3, 4)
    net = pnn.Sequential(lin, pnn.GELU(), pnn.LayerNorm(4), lin.__class__(4, 2), pnn.ModuleList([lin]))
    clone = pickle.loads(pickle.dumps(net))
    assert repr(clone) == repr(net) and clone[0] is clone[4][0]  # sharing is preserved
    assert list(clone.state_dict()) == list(net.state_dict())
    for (name, a), (_, b) in zip(clone.state_dict().items(), net.state_dict().items()):
        assert bool((a == b).all()), name
    assert all(isinstance(p, pnn.Parameter) and p.requires_grad and p.is_leaf for p in clone.parameters())


def test_extra_state_and_state_dict_hooks():
    class WithExtra(pnn.Module):
        def __init__(self):
            super().__init__()
            self.lin = pnn.Linear(1, 1)
            self.step = 0

        def get_extra_state(self):
            return {"step": self.step}

        def set_extra_state(self, state):
            self.step = state["step"]

    src, dst = WithExtra(), WithExtra()
    src.step = 7
    sd = src.state_dict()
    assert list(sd) == ["_extra_state", "lin.weight", "lin.bias"]  # own state first, as PyTorch
    seen = []
    dst.register_load_state_dict_post_hook(lambda module, keys: seen.append((module, list(keys.missing_keys))))
    dst.load_state_dict(sd)
    assert dst.step == 7 and seen == [(dst, [])]
    del sd["_extra_state"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "_extra_state"'):
        dst.load_state_dict(sd)
    def drop_bias(module, state, prefix, local_metadata):
        del state[prefix + "lin.bias"]  # returns None: the state dict is edited in place

    handle = dst._register_state_dict_hook(drop_bias)
    assert "lin.bias" not in dst.state_dict()
    handle.remove()
    assert "lin.bias" in dst.state_dict()


@pytest.mark.parametrize("name", ["uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_",
                                  "kaiming_uniform_", "kaiming_normal_", "orthogonal_"])
def test_init_generator_reproducible(rng, name):
    fn = getattr(pnn.init, name)
    seed = int(rng.integers(0, 2**62))
    results = []
    for _ in range(2):
        gen = pf.Generator()
        gen.manual_seed(seed)
        results.append(fn(pf.empty(6, 5), generator=gen).tolist())
    assert results[0] == results[1]
    assert fn(pf.empty(6, 5)).tolist() != results[0]  # the default stream is another one


def test_sparse(rng):
    sparsity = rng.uniform(0.1, 0.9)
    w = pnn.init.sparse_(pf.empty(20, 7, dtype=pf.float64), sparsity, std=0.5).numpy()
    assert ((w == 0).sum(axis=0) == math.ceil(sparsity * 20)).all()
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        pnn.init.sparse_(pf.empty(3), 0.5)
