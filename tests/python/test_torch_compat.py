"""The torch APIs that real scripts and libraries (torchvision) reach for beyond the core: torch.hub,
torch.ops, torch.jit, torch.nn.modules.utils, torch.fx, torch.onnx, torch.utils.checkpoint,
torch.ao.quantization, torch._C's hooks, torch._assert, Tensor.type() and the legacy typed tensors,
the is_* predicates, torch.nn.parallel, torch.cuda.amp, torch.multiprocessing, torch.frombuffer and
the constants. What plugflow does is compared with PyTorch 1.13; what it refuses must raise a
clear error when used, and importing never fails."""

import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
import torch.nn.modules.utils as torch_module_utils
import torch.onnx.operators
import torch.utils.checkpoint as torch_checkpoint

import plugflow as pf
import plugflow.ao.quantization
import plugflow.cuda.amp
import plugflow.fx
import plugflow.fx.graph_module
import plugflow.hub
import plugflow.jit
import plugflow.jit.annotations
import plugflow.multiprocessing
import plugflow.nn.modules.utils as pf_module_utils
import plugflow.onnx
import plugflow.utils.checkpoint as pf_checkpoint
import plugflow.utils.model_zoo
from helpers import assert_matches, from_torch, load_from_torch, seeded_rng, to_torch

CPU_ONLY = pytest.mark.skipif(pf.cuda.is_available(), reason="checks the behaviour without a usable GPU")


# ---- torch.hub and torch.utils.model_zoo -----------------------------------------------------

def test_hub_paths_follow_pytorch(tmp_path, monkeypatch):
    for env in ({"TORCH_HOME": str(tmp_path / "th")}, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, {}):
        for key in ("TORCH_HOME", "XDG_CACHE_HOME"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        assert pf.hub.get_dir() == torch.hub.get_dir()
        assert pf.hub._get_torch_home() == torch.hub._get_torch_home()
    monkeypatch.setattr(pf.hub, "_hub_dir", None)
    pf.hub.set_dir(str(tmp_path / "mine"))
    assert pf.hub.get_dir() == str(tmp_path / "mine")


def test_hub_loads_a_cached_checkpoint_and_never_downloads(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(pf.hub, "_hub_dir", None)
    rng = seeded_rng()
    state = {"weight": torch.from_numpy(rng.standard_normal((3, 4))), "bias": torch.arange(3)}
    url = "https://download.pytorch.org/models/tiny-0123abcd.pth"
    cached = tmp_path / "hub" / "checkpoints" / "tiny-0123abcd.pth"
    with pytest.raises(RuntimeError, match="does not download") as info:
        pf.hub.load_state_dict_from_url(url)
    assert str(cached) in str(info.value) and url in str(info.value)
    cached.parent.mkdir(parents=True)
    torch.save(state, cached)  # what PyTorch's download would have left there
    for load in (pf.hub.load_state_dict_from_url, pf.utils.model_zoo.load_url):
        loaded = load(url, progress=False, check_hash=True)
        assert set(loaded) == {"weight", "bias"}
        assert_matches(loaded["weight"], state["weight"])
        assert_matches(loaded["bias"], state["bias"])
    loaded = pf.hub.load_state_dict_from_url("https://elsewhere/x.pth", model_dir=str(cached.parent),
                                             file_name=cached.name)
    assert_matches(loaded["bias"], state["bias"])
    with pytest.raises(RuntimeError, match="does not download"):
        pf.hub.download_url_to_file(url, str(tmp_path / "out.pth"))
    assert not (tmp_path / "out.pth").exists()


def test_hub_load_runs_a_local_hubconf_and_refuses_github(tmp_path):
    (tmp_path / "helper_mod_for_hub.py").write_text("SCALE = 3\n")
    (tmp_path / "hubconf.py").write_text(textwrap.dedent('''
        import helper_mod_for_hub

        def tripled(x, *, offset=0):
            """Triples x."""
            return x * helper_mod_for_hub.SCALE + offset

        def _private():
            pass
    '''))
    assert pf.hub.load(str(tmp_path), "tripled", 2, offset=1, source="local") == 7
    assert pf.hub.list(str(tmp_path)) == ["tripled"]
    assert pf.hub.help(str(tmp_path), "tripled") == "Triples x."
    with pytest.raises(RuntimeError, match="Cannot find callable _private"):
        pf.hub.load(str(tmp_path), "_private", source="local")
    with pytest.raises(RuntimeError, match="does not download"):
        pf.hub.load("pytorch/vision", "resnet18")
    with pytest.raises(ValueError, match="Unknown source"):
        pf.hub.load(str(tmp_path), "tripled", source="s3")


# ---- torch.ops ---------------------------------------------------------------------------------

def test_ops_refuses_pytorch_extensions_with_the_errors_libraries_catch():
    with pytest.raises(OSError, match=r"cannot load PyTorch C\+\+ extensions"):
        pf.ops.load_library("/usr/lib/python3/dist-packages/some_extension/_C.so")
    with pytest.raises(OSError, match=r"cannot load PyTorch C\+\+ extensions"):
        pf.ops.load_library("/usr/lib/python3/dist-packages/torchvision/image.so")
    with pytest.raises(AttributeError, match=r"torch.ops.some_extension.op: some_extension::op is a PyTorch C\+\+ "
                       "operator"):
        pf.ops.some_extension.op
    assert getattr(pf.ops.some_extension, "other_op", None) is None
    # torchvision's operator library registers plugflow's own operators (test_torchvision_ops.py)
    pf.ops.load_library("/usr/lib/python3/dist-packages/torchvision/_C.so")
    assert "/usr/lib/python3/dist-packages/torchvision/_C.so" in pf.ops.loaded_libraries
    assert callable(pf.ops.torchvision.nms)


# ---- torch.jit ---------------------------------------------------------------------------------

def test_jit_returns_code_unchanged_and_warns_once(monkeypatch):
    monkeypatch.setattr(pf.jit, "_warned", set())
    model = pf.nn.Linear(3, 2)

    def fn(x):
        return x * 2

    with pytest.warns(UserWarning, match="torch.jit.script: plugflow has no TorchScript compiler"):
        assert pf.jit.script(model) is model
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pf.jit.script(fn) is fn  # warned once already
        with pytest.warns(UserWarning, match="torch.jit.trace"):
            assert pf.jit.trace(fn, pf.ones(2)) is fn
        assert pf.jit.trace(model, pf.ones(1, 3)) is model
    assert pf.jit.is_scripting() is False and pf.jit.is_tracing() is False
    for decorator in (pf.jit.unused, pf.jit.export, pf.jit.ignore, pf.jit.ignore(True), pf.jit._overload_method,
                      pf.jit._script_if_tracing, pf.jit.interface):
        assert decorator(fn) is fn
    assert pf.jit.annotate(list, [1]) == [1]
    assert pf.jit.Attribute(3, int) == 3
    assert issubclass(pf.jit.ScriptModule, pf.nn.Module)
    assert not isinstance(fn, pf.jit.ScriptFunction)
    assert pf.jit.annotations.BroadcastingList2[int] is torch.jit.annotations.BroadcastingList2[int]
    for refused in (pf.jit.save, pf.jit.load):
        with pytest.raises(NotImplementedError, match="no TorchScript programs"):
            refused(model, "m.pt")


def test_jit_overloads_keep_the_last_definition():
    class Block(pf.nn.Module):
        @pf.jit._overload_method
        def forward(self, x: list):
            pass

        def forward(self, x):  # noqa: F811
            return x + 1

    assert Block()(pf.ones(2)).tolist() == [2.0, 2.0]


# ---- torch.nn.modules.utils ----------------------------------------------------------------------

def test_nn_modules_utils_match_pytorch():
    for name in ("_single", "_pair", "_triple", "_quadruple"):
        for value in (3, (1, 2), [4, 5, 6], range(2)):
            assert getattr(pf_module_utils, name)(value) == getattr(torch_module_utils, name)(value)
    assert pf_module_utils._reverse_repeat_tuple((1, 2, 3), 2) == torch_module_utils._reverse_repeat_tuple((1, 2, 3), 2)
    for out_size, defaults in ((5, [1, 2]), ([None, 3], [7, 8, 9]), ([2, None], [1, 4, 6])):
        assert pf_module_utils._list_with_default(out_size, defaults) == \
            torch_module_utils._list_with_default(out_size, defaults)
    with pytest.raises(ValueError, match="Input dimension should be at least 3"):
        pf_module_utils._list_with_default([1, 2], [5, 6])


def test_consume_prefix_loads_a_data_parallel_state_dict():
    wrapped = pf.nn.DataParallel(pf.nn.Sequential(pf.nn.Linear(2, 3), pf.nn.BatchNorm1d(3)))
    state = wrapped.state_dict()
    assert all(k.startswith("module.") for k in state)
    pf_module_utils.consume_prefix_in_state_dict_if_present(state, "module.")
    assert sorted(state) == sorted(wrapped.module.state_dict())
    assert "" in state._metadata and "0" in state._metadata
    pf.nn.Sequential(pf.nn.Linear(2, 3), pf.nn.BatchNorm1d(3)).load_state_dict(state)


# ---- torch.fx and torch.onnx ---------------------------------------------------------------------

def test_fx_imports_and_refuses_tracing():
    def leaf(x):
        return x

    assert pf.fx.wrap(leaf) is leaf and pf.fx.wrap("leaf") == "leaf"
    with pytest.raises(NotImplementedError, match="torch.fx.symbolic_trace: plugflow has no symbolic tracing"):
        pf.fx.symbolic_trace(pf.nn.Linear(2, 2))

    class LeafTracer(pf.fx.Tracer):  # as torchvision's feature extraction defines one
        def __init__(self, leaves):
            super().__init__()
            self.leaves = leaves

    for make, name in ((lambda: LeafTracer([]), "Tracer"), (pf.fx.Graph, "Graph"), (pf.fx.Proxy, "Proxy"),
                       (lambda: pf.fx.GraphModule(pf.nn.Linear(1, 1), None), "GraphModule")):
        with pytest.raises(NotImplementedError, match=f"torch.fx.{name}"):
            make()


def test_fx_copy_attr_matches_pytorch():
    def build(nn):
        root = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
        return root

    for target in ("0.weight", "1.running_mean", "1"):
        src_t, dst_t = build(torch.nn), torch.nn.Module()
        torch.fx.graph_module._copy_attr(src_t, dst_t, target)
        src_p, dst_p = build(pf.nn), pf.nn.Module()
        pf.fx.graph_module._copy_attr(src_p, dst_p, target)
        assert sorted(dict(dst_p.named_parameters())) == sorted(dict(dst_t.named_parameters()))
        assert sorted(dict(dst_p.named_buffers())) == sorted(dict(dst_t.named_buffers()))


def test_onnx_records_symbolics_and_refuses_export():
    with pytest.raises(NotImplementedError, match="torch.onnx.export: plugflow cannot export to ONNX"):
        pf.onnx.export(pf.nn.Linear(2, 2), pf.ones(1, 2), "model.onnx")
    assert pf.onnx.is_in_onnx_export() is False

    @pf.onnx.symbolic_helper.parse_args("v", "f")
    def symbolic(g, x, alpha):
        return pf.onnx.symbolic_opset11.unsqueeze(g, x, 0)

    pf.onnx.register_custom_op_symbolic("mylib::op", symbolic, 11)
    assert pf.onnx._custom_op_symbolics["mylib::op"] == {11: symbolic}
    pf.onnx.unregister_custom_op_symbolic("mylib::op", 11)
    assert pf.onnx._custom_op_symbolics["mylib::op"] == {}
    with pytest.raises(ValueError, match="domain::name"):
        pf.onnx.register_custom_op_symbolic("no_namespace", symbolic, 11)
    with pytest.raises(NotImplementedError, match="torch.onnx.symbolic_opset11.unsqueeze"):
        symbolic(None, None, 1.0)
    x = torch.zeros(2, 5, 3)
    assert_matches(pf.onnx.operators.shape_as_tensor(from_torch(x)), torch.onnx.operators.shape_as_tensor(x))


# ---- torch.utils.checkpoint --------------------------------------------------------------------

class Counted:
    """A block that counts its calls, with dropout (so the random state matters)."""

    def __init__(self, fw, layers):
        self.fw, self.layers, self.calls = fw, layers, 0

    def __call__(self, x, scale):
        self.calls += 1
        return self.fw.nn.functional.dropout(self.fw.tanh(self.layers(x)) * scale, 0.3, training=True)


def test_checkpoint_recomputes_in_backward_with_the_forward_random_state():
    rng = seeded_rng(seed_plugflow=True)
    layers = pf.nn.Sequential(pf.nn.Linear(6, 8), pf.nn.ReLU(), pf.nn.Linear(8, 5)).double()
    block = Counted(pf, layers)
    x = pf.from_numpy(rng.standard_normal((4, 6))).requires_grad_()
    g = pf.from_numpy(rng.standard_normal((4, 5)))

    state = pf.get_rng_state()
    out = block(x, 2.0)
    out.backward(g)
    plain = [x.grad.clone()] + [p.grad.clone() for p in layers.parameters()]
    x.grad = None
    layers.zero_grad()

    pf.set_rng_state(state)
    block.calls = 0
    out_ckpt = pf_checkpoint.checkpoint(block, x, 2.0)
    assert block.calls == 1 and out_ckpt.requires_grad
    np.testing.assert_array_equal(out_ckpt.detach().numpy(), out.detach().numpy())
    after_forward = pf.get_rng_state()
    out_ckpt.backward(g)
    assert block.calls == 2  # recomputed
    assert pf.get_rng_state().tolist() == after_forward.tolist()  # the recomputation's draws are undone
    for a, b in zip([x.grad] + [p.grad for p in layers.parameters()], plain):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_checkpoint_matches_pytorch_without_randomness():
    rng = seeded_rng()
    seq_t = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 3)).double()
    seq_p = pf.nn.Sequential(pf.nn.Linear(5, 7), pf.nn.GELU(), pf.nn.Linear(7, 7), pf.nn.Tanh(),
                             pf.nn.Linear(7, 3)).double()
    load_from_torch(seq_p, seq_t)
    data = rng.standard_normal((4, 5))
    x_t = torch.from_numpy(data).requires_grad_()
    x_p = pf.from_numpy(data.copy()).requires_grad_()
    torch_checkpoint.checkpoint_sequential(seq_t, 2, x_t).sum().backward()
    pf_checkpoint.checkpoint_sequential(seq_p, 2, x_p).sum().backward()
    assert_matches(x_p.grad, x_t.grad, rtol=1e-12, atol=1e-12)
    for p, t in zip(seq_p.parameters(), seq_t.parameters()):
        assert_matches(p.grad, t.grad, rtol=1e-12, atol=1e-12)


def test_checkpoint_refusals_and_warnings():
    layer = pf.nn.Linear(3, 3)
    x = pf.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="not compatible with .grad"):
        pf.autograd.grad(pf_checkpoint.checkpoint(layer, x).sum(), [x])
    with pytest.raises(RuntimeError, match="not compatible with .grad"):
        pf_checkpoint.checkpoint(layer, x).sum().backward(inputs=[x])
    with pytest.raises(NotImplementedError, match="use_reentrant=False"):
        pf_checkpoint.checkpoint(layer, x, use_reentrant=False)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        pf_checkpoint.checkpoint(layer, x, scale=2)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        out = pf_checkpoint.checkpoint(layer, pf.ones(2, 3))
    assert not out.requires_grad  # as in PyTorch: the parameters inside get no gradient this way


# ---- torch.ao.quantization, torch._C hooks, torch._assert, constants -----------------------------------

def test_quantization_stubs_are_identities_and_quantizing_is_refused():
    x = pf.randn(2, 3)
    assert pf.ao.quantization.QuantStub()(x) is x and pf.ao.quantization.DeQuantStub()(x) is x
    for name in ("prepare", "convert", "fuse_modules", "QConfig", "get_default_qat_qconfig", "quantize_dynamic"):
        with pytest.raises(NotImplementedError, match=f"torch.ao.quantization.{name}: plugflow has no quantized"):
            getattr(pf.ao.quantization, name)(pf.nn.Linear(1, 1))


def test_c_hooks_assert_and_constants():
    assert pf._C._log_api_usage_once("torchvision.models.resnet18") is None
    assert pf._C._get_tracing_state() is None and torch._C._get_tracing_state() is None
    pf._assert(True, "fine")
    for fn in (torch._assert, pf._assert):
        with pytest.raises(AssertionError, match="shape mismatch"):
            fn(False, "shape mismatch")
    for name in ("pi", "e", "inf", "nan"):
        assert repr(getattr(pf, name)) == repr(getattr(torch, name))
    assert pf._six.string_classes == torch._six.string_classes
    assert callable(pf.cuda.manual_seed_all) and callable(pf.cuda.manual_seed)


# ---- Tensor.type(), the legacy typed tensors, the is_* predicates -------------------------------

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_type_names_and_conversions(dtype):
    t_pf, t_torch = pf.zeros(2, dtype=getattr(pf, dtype)), torch.zeros(2, dtype=getattr(torch, dtype))
    assert t_pf.type() == t_torch.type()
    assert t_pf.type(t_torch.type()) is t_pf and t_pf.type(getattr(pf, dtype)) is t_pf
    for target in ("torch.DoubleTensor", "torch.ShortTensor"):
        converted = t_pf.type(target)
        assert converted.type() == t_torch.type(target).type() and converted.device.type == "cpu"
    legacy = getattr(pf, t_torch.type().split(".")[-1])
    assert legacy.dtype is getattr(pf, dtype) and isinstance(t_pf, legacy)
    assert pf.ones(3).type(legacy).dtype is getattr(pf, dtype)


def test_tensor_type_errors_match_pytorch():
    for spec in ("torch.Foo", "float"):
        for t in (pf.zeros(1), torch.zeros(1)):
            with pytest.raises(ValueError, match=f"invalid type: '{spec}'"):
                t.type(spec)


def test_legacy_constructors_match_pytorch():
    rng = seeded_rng()
    data = np.abs(rng.standard_normal((3, 2)) * 4)  # fits every dtype
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "ByteTensor", "BoolTensor", "HalfTensor"):
        pf_cls, torch_cls = getattr(pf, name), getattr(torch, name)
        assert pf_cls(2, 3).shape == torch_cls(2, 3).shape and pf_cls(2, 3).dtype is getattr(pf, str(
            torch_cls(1).dtype).split(".")[1])
        assert pf_cls().shape == torch_cls().shape == (0,)
        assert pf_cls(pf.Size([4, 1])).shape == (4, 1)
        assert_matches(pf_cls(data.tolist()), torch_cls(data.tolist()))
        assert_matches(pf_cls([[1, 2], [3, 4]]), torch_cls([[1, 2], [3, 4]]))
        assert repr(pf_cls) == repr(torch_cls)
    assert_matches(pf.LongTensor(np.array([1, 5, 7])), torch.LongTensor(np.array([1, 5, 7])))
    alias = pf.ones(3)
    shared = pf.FloatTensor(alias)
    shared[0] = 5
    assert alias[0].item() == 5.0
    with pytest.raises(TypeError, match=r"expected torch.FloatTensor \(got torch.LongTensor\)"):
        pf.FloatTensor(pf.ones(2, dtype=pf.int64))
    for fw in (pf, torch):
        with pytest.raises(TypeError, match="argument 'size' must be tuple of ints"):
            fw.FloatTensor(3, 2.5)
        with pytest.raises(TypeError):
            fw.FloatTensor(2.5)
        with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu"):
            fw.FloatTensor(2, device="cuda")
    assert isinstance(pf.zeros(2, dtype=pf.uint8), pf.ByteTensor) and not isinstance(pf.zeros(2), pf.ByteTensor)
    assert isinstance(pf.nn.Parameter(pf.zeros(2)), pf.FloatTensor)
    assert not isinstance(pf.zeros(2), pf.cuda.FloatTensor) and not isinstance(np.zeros(2), pf.FloatTensor)
    assert repr(pf.cuda.HalfTensor) == repr(torch.cuda.HalfTensor)


def test_device_and_layout_predicates_match_pytorch():
    t_pf, t_torch = pf.zeros(2), torch.zeros(2)
    names = ["is_cpu", "is_cuda", "is_xpu", "is_ipu", "is_mps", "is_meta", "is_vulkan", "is_ort", "is_sparse",
             "is_sparse_csr", "is_mkldnn", "is_quantized", "is_nested"]
    assert {n: getattr(t_pf, n) for n in names} == {n: getattr(t_torch, n) for n in names}
    assert t_pf.is_shared() is False


def test_in_place_view_methods_match_pytorch():
    rng = seeded_rng()
    data = rng.standard_normal((3, 1, 4))
    for method, args in (("unsqueeze_", (0,)), ("unsqueeze_", (-1,)), ("squeeze_", ()), ("squeeze_", (1,)),
                         ("transpose_", (0, 2))):
        t_pf, t_torch = pf.from_numpy(data.copy()), torch.from_numpy(data.copy())
        assert getattr(t_pf, method)(*args) is t_pf
        getattr(t_torch, method)(*args)
        assert_matches(t_pf, t_torch)
    m_pf, m_torch = pf.from_numpy(data[:, 0].copy()), torch.from_numpy(data[:, 0].copy())
    m_pf.t_()
    m_torch.t_()
    assert_matches(m_pf, m_torch)
    with pytest.raises(RuntimeError, match="unsqueeze_: plugflow does not record in-place view changes"):
        pf.ones(2, requires_grad=True).unsqueeze_(0)


def test_bernoulli_in_place():
    rng = seeded_rng(seed_plugflow=True)
    t = pf.empty(20000, dtype=pf.float64)
    assert t.bernoulli_(0.25) is t
    assert set(np.unique(t.numpy())) <= {0.0, 1.0} and abs(t.mean().item() - 0.25) < 0.02
    probs = pf.from_numpy(rng.choice([0.0, 1.0], 50))
    assert pf.zeros(50, dtype=pf.int64).bernoulli_(probs).tolist() == probs.long().tolist()
    for bad in (1.5, pf.tensor([0.5, -0.1])):
        with pytest.raises(RuntimeError):
            pf.empty(2).bernoulli_(bad)


# ---- torch.frombuffer --------------------------------------------------------------------------

def test_frombuffer_shares_memory_and_matches_pytorch():
    buffer = bytearray(np.arange(12, dtype=np.int16).tobytes())
    for kwargs in ({}, {"count": 3}, {"offset": 4}, {"count": 2, "offset": 6}):
        assert_matches(pf.frombuffer(buffer, dtype=pf.int16, **kwargs),
                       torch.frombuffer(bytearray(buffer), dtype=torch.int16, **kwargs))
    view = pf.frombuffer(buffer, dtype=pf.int16, count=2, offset=2)
    view[0] = 100
    assert np.frombuffer(buffer, np.int16)[1] == 100
    assert_matches(pf.frombuffer(bytes(8), dtype=pf.float64), torch.zeros(1, dtype=torch.float64))
    cases = [(bytearray(0), "uint8", {}), (bytearray(4), "int32", {"count": 2}), (bytearray(4), "int32", {"offset": 5}),
             (bytearray(5), "int32", {})]
    for buffer, dtype, kwargs in cases:
        messages = []
        for fw in (pf, torch):
            with pytest.raises(ValueError) as info:
                fw.frombuffer(buffer, dtype=getattr(fw, dtype), **kwargs)
            messages.append(str(info.value))
        assert messages[0] == messages[1]


# ---- torch.nn.parallel -------------------------------------------------------------------------

@CPU_ONLY
def test_data_parallel_without_cuda_is_the_module():
    rng = seeded_rng()
    inner_t = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    inner_p = pf.nn.Sequential(pf.nn.Linear(4, 3), pf.nn.BatchNorm1d(3))
    load_from_torch(inner_p, inner_t)
    dp_t, dp_p = torch.nn.DataParallel(inner_t), pf.nn.DataParallel(inner_p)
    assert dp_p.module is inner_p and dp_p.device_ids == dp_t.device_ids == []
    assert list(dp_p.state_dict()) == list(dp_t.state_dict())
    x = rng.standard_normal((5, 4)).astype(np.float32)
    assert_matches(dp_p(pf.from_numpy(x)), dp_t(torch.from_numpy(x)).detach())
    import plugflow.nn.parallel as parallel

    assert parallel.DataParallel is pf.nn.DataParallel
    # Without a process group both raise the same error (tests/python/test_ddp.py trains with one).
    for fw, inner in ((torch, inner_t), (pf, inner_p)):
        with pytest.raises(RuntimeError, match="Default process group has not been initialized"):
            fw.nn.parallel.DistributedDataParallel(inner)


def test_data_parallel_refuses_several_devices(monkeypatch):
    monkeypatch.setattr(pf.cuda, "is_available", lambda: True)
    with pytest.raises(NotImplementedError, match="DataParallel over 2 devices"):
        pf.nn.DataParallel(pf.nn.Linear(1, 1), device_ids=[0, 1])


# ---- torch.cuda.amp and torch.autocast ---------------------------------------------------------

@CPU_ONLY
def test_amp_disables_itself_without_cuda_as_pytorch_does():
    rng = seeded_rng()
    for fw in (torch, pf):
        with pytest.warns(UserWarning, match="CUDA is not available. +Disabling"):
            scaler = fw.cuda.amp.GradScaler()
        assert scaler.is_enabled() is False and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
        with pytest.warns(UserWarning, match="User provided device_type of 'cuda', but CUDA is not available"):
            ctx = fw.cuda.amp.autocast()
        layer = fw.nn.Linear(3, 1)
        optimizer = fw.optim.SGD(layer.parameters(), lr=0.1)
        with ctx:
            loss = layer(fw.from_numpy(rng.standard_normal((2, 3)).astype(np.float32))).sum()
        assert loss.dtype == fw.float32 and scaler.scale(loss) is loss
        scaler.scale(loss).backward()
        before = layer.weight.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        assert not fw.equal(before, layer.weight.detach())  # the step ran
        scaler.load_state_dict({})
    with pytest.warns(UserWarning, match="CPU Autocast only supports dtype of torch.bfloat16"):
        with pytest.raises(RuntimeError, match="AutocastCPU only support Bfloat16"):  # as PyTorch 1.13
            with pf.autocast("cpu", dtype=pf.float16):
                pass
    with pf.autocast("cpu", enabled=False), pf.cuda.amp.autocast(enabled=False):
        assert pf.is_autocast_cpu_enabled() is False
    with pytest.raises(RuntimeError, match="device_type must be 'cuda' or 'cpu'"):
        pf.autocast("tpu")
    assert pf.is_autocast_enabled() is False


def test_grad_scaler_scales_unscales_skips_and_adapts():
    scaler = pf.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)  # torch.amp.GradScaler("cpu") of later PyTorch
    layer = pf.nn.Linear(2, 1, bias=False).double()
    layer.weight.data = pf.tensor([[1.0, -2.0]], dtype=pf.float64)
    optimizer = pf.optim.SGD(layer.parameters(), lr=0.5)
    x = pf.tensor([[1.0, 3.0]], dtype=pf.float64)

    def iteration(poison=False):
        optimizer.zero_grad()
        loss = layer(x).sum()
        scaled = scaler.scale(loss)
        assert scaled.shape == (1,) and scaled.item() == loss.item() * scaler.get_scale()
        scaled.backward()
        if poison:
            layer.weight.grad[0, 0] = float("inf")
        return scaler.step(optimizer)

    iteration()  # grad (1, 3), unscaled from 8x
    assert layer.weight.tolist() == [[0.5, -3.5]]
    scaler.update()
    assert scaler.get_scale() == 8.0
    iteration()
    scaler.update()
    assert scaler.get_scale() == 16.0  # two clean steps in a row: grown
    assert iteration(poison=True) is None and layer.weight.tolist() == [[0.0, -5.0]]  # skipped
    scaler.update()
    assert scaler.get_scale() == 8.0  # backed off
    optimizer.zero_grad()
    scaler.scale(layer(x).sum()).backward()
    scaler.unscale_(optimizer)
    assert layer.weight.grad.tolist() == [[1.0, 3.0]]
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(optimizer)
    scaler.update()
    state = scaler.state_dict()
    assert state == {"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2,
                     "_growth_tracker": 1}
    other = pf.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.state_dict() == state
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        other.load_state_dict({})


# ---- torch.multiprocessing ---------------------------------------------------------------------

def _echo(queue_in, queue_out):
    t = queue_in.get()
    queue_out.put((t * 2, t.requires_grad, t.dtype))


def _rank_value(rank, queue):
    queue.put((rank, pf.full((2,), rank, dtype=pf.int64)))


def _fail(rank):
    if rank == 1:
        raise ValueError("rank 1 broke")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_sends_tensors_as_copies(method):
    ctx = pf.multiprocessing.get_context(method)
    queue_in, queue_out = ctx.Queue(), ctx.Queue()
    process = ctx.Process(target=_echo, args=(queue_in, queue_out))
    process.start()
    sent = pf.arange(6, dtype=pf.float64).reshape(2, 3).requires_grad_()
    queue_in.put(sent)
    doubled, requires_grad, dtype = queue_out.get(timeout=120)
    process.join(timeout=120)
    assert process.exitcode == 0
    assert doubled.tolist() == (sent * 2).tolist() and requires_grad and dtype is pf.float64
    assert pickle.loads(pickle.dumps(sent)).tolist() == sent.tolist()


def test_multiprocessing_spawn_runs_and_reports_failures():
    ctx = pf.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    pf.multiprocessing.spawn(_rank_value, args=(queue,), nprocs=2)
    results = sorted((rank, t.tolist()) for rank, t in (queue.get(), queue.get()))
    assert results == [(0, [0, 0]), (1, [1, 1])]
    with pytest.raises(pf.multiprocessing.ProcessRaisedException, match="ValueError: rank 1 broke"):
        pf.multiprocessing.spawn(_fail, nprocs=2)
    assert pf.multiprocessing.Queue is not None and pf.multiprocessing.cpu_count() >= 1
    pf.multiprocessing.set_sharing_strategy("file_system")
    assert pf.multiprocessing.get_sharing_strategy() == "file_system"
    assert pf.multiprocessing.get_all_sharing_strategies() == torch.multiprocessing.get_all_sharing_strategies()


def test_shared_memory_is_refused():
    with pytest.raises(NotImplementedError, match="cannot be shared between processes"):
        pf.ones(2).share_memory_()
    with pytest.raises(NotImplementedError, match="cannot be shared between processes"):
        pf.nn.Linear(2, 2).share_memory()
    assert pf.nn.ReLU().share_memory() is not None  # nothing to share


# ---- under mock_torch: everything above reached as `torch.X` -------------------------------------

def test_submodules_load_through_the_package_under_mock_torch():
    code = textwrap.dedent('''
        import plugflow, plugflow.mock_torch
        plugflow.mock_torch.enable()
        import torch
        assert torch.jit.is_scripting() is False and torch.hub.get_dir()
        assert torch.onnx.is_in_onnx_export() is False and torch.fx.wrap("f") == "f"
        assert torch.multiprocessing.cpu_count() >= 1 and torch.ao.quantization.QuantStub
        import torch.nn.parallel, torch.utils.checkpoint, torch.utils.model_zoo, torch.cuda.amp
        import torch.jit.annotations, torch.nn.modules.utils, torch.onnx.symbolic_opset9, torch.fx.graph_module
        from torch.nn.parallel import DistributedDataParallel, DataParallel
        from torch.cuda.amp import GradScaler, autocast
        assert torch.nn.parallel is plugflow.nn.parallel and torch.LongTensor is plugflow.LongTensor
        print("ok")
    ''')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
