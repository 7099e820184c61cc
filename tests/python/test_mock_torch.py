"""plugflow.mock_torch: `import torch` in unmodified third-party code gets plugflow after
enable(), real PyTorch again after disable(). Each case runs in a fresh interpreter so that
sys.modules starts clean."""

import subprocess
import sys
import textwrap

# A third-party module written for PyTorch: it never mentions plugflow.
THIRD_PARTY = '''
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train_step(x, w):
    w = w.detach().requires_grad_()
    loss = F.relu(x @ w).sum()
    loss.backward()
    return loss, w.grad


def batches(x, y, batch_size):
    return [(bx.shape[0], by.sum().item()) for bx, by in DataLoader(TensorDataset(x, y), batch_size=batch_size)]


def module_names():
    return torch.__name__, nn.__name__, F.__name__, DataLoader.__module__
'''


def run(code, tmp_path):
    """Runs code in a fresh interpreter with the third-party module importable; returns stdout."""
    (tmp_path / "thirdparty.py").write_text(THIRD_PARTY)
    script = "import sys\nsys.path.insert(0, %r)\n" % str(tmp_path) + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_third_party_code_runs_on_plugflow(tmp_path):
    out = run('''
        import io
        import numpy as np
        import plugflow
        import plugflow.mock_torch as mock_torch

        mock_torch.enable()
        assert mock_torch.is_enabled()
        import thirdparty
        import torch
        import torch.utils.data as tud
        import importlib

        assert torch is plugflow and thirdparty.torch is plugflow
        assert tud is plugflow.utils.data and importlib.import_module("torch.nn.functional") is plugflow.nn.functional
        assert thirdparty.module_names() == ("plugflow", "plugflow.nn", "plugflow.nn.functional",
                                             "plugflow.utils.data.dataloader")
        rng = np.random.default_rng()
        x, w = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
        loss, grad = thirdparty.train_step(plugflow.from_numpy(x), plugflow.from_numpy(w))
        assert type(loss) is plugflow.Tensor and type(grad) is plugflow.Tensor
        expected = np.maximum(x @ w, 0).sum()
        assert abs(loss.item() - expected) < 1e-9 * max(1.0, abs(expected))
        np.testing.assert_allclose(grad.numpy(), x.T @ (x @ w > 0), rtol=1e-12)
        y = plugflow.arange(7)
        assert thirdparty.batches(plugflow.zeros(7, 2), y, 3) == [(3, 3), (3, 12), (1, 6)]
        buf = io.BytesIO()
        torch.save({"w": torch.ones(2)}, buf)
        buf.seek(0)
        assert torch.load(buf)["w"].tolist() == [1.0, 1.0]
        assert not any(getattr(m, "__name__", "").split(".")[0] == "torch" for m in list(sys.modules.values()))
        print("ok")
    ''', tmp_path)
    assert out.strip() == "ok"


def test_disable_restores_real_torch_and_context_manager(tmp_path):
    out = run('''
        import torch as real_torch
        import torch.nn as real_nn
        import plugflow
        from plugflow import mock_torch

        with mock_torch.enable():
            import torch
            import torch.nn
            assert torch is plugflow and torch.nn is plugflow.nn
            inner = mock_torch.enable()  # already on: a no-op that leaves it on
            with inner:
                pass
            assert mock_torch.is_enabled()
        assert not mock_torch.is_enabled()
        import torch
        import torch.nn
        assert torch is real_torch and torch.nn is real_nn and sys.modules["torch"] is real_torch

        mock_torch.enable()
        import torch
        assert torch is plugflow
        mock_torch.disable()
        mock_torch.disable()  # twice is harmless
        import torch
        assert torch is real_torch
        print("ok")
    ''', tmp_path)
    assert out.strip() == "ok"


def test_missing_submodules_fail_without_loading_real_torch(tmp_path):
    out = run('''
        import plugflow.mock_torch as mock_torch

        mock_torch.enable()
        for name in ("torch.fft", "torch.nn.no_such_module"):
            try:
                __import__(name)
            except ModuleNotFoundError as e:
                assert name in str(e) and "plugflow" in str(e), e
            else:
                raise AssertionError(name + " imported")
        import torch
        try:
            torch.no_such_function
        except AttributeError:
            pass
        else:
            raise AssertionError("attribute found")
        assert "torchvision" not in sys.modules
        assert not any(getattr(m, "__file__", None) and "/torch/" in m.__file__ for m in list(sys.modules.values()))
        print("ok")
    ''', tmp_path)
    assert out.strip() == "ok"


def test_distributions_map_to_plugflow(tmp_path):
    """torch.distributions (and `from torch.distributions import ...`) is plugflow.distributions, so
    RL and VAE code that draws and scores actions runs on plugflow."""
    out = run('''
        import plugflow
        import plugflow.mock_torch as mock_torch

        mock_torch.enable()
        import torch
        import torch.distributions as D
        from torch.distributions import Normal, kl_divergence
        from torch.distributions.transforms import TanhTransform
        assert D is plugflow.distributions and Normal is plugflow.distributions.Normal
        loc = torch.zeros(3, requires_grad=True)
        policy = D.TransformedDistribution(Normal(loc, torch.ones(3)), [TanhTransform(cache_size=1)])
        action = policy.rsample()
        (policy.log_prob(action).sum() + kl_divergence(Normal(loc, 1.0), Normal(0.0, 2.0)).sum()).backward()
        assert isinstance(loc.grad, plugflow.Tensor)
        assert not any(getattr(m, "__file__", None) and "/torch/" in m.__file__ for m in list(sys.modules.values()))
        print("ok")
    ''', tmp_path)
    assert out.strip() == "ok"
