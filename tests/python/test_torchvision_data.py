"""torchvision under plugflow.mock_torch beyond the models: the tensor transforms, the pure-Python
parts of torchvision.ops, ImageFolder and MNIST on local files (tv_data_recipe.py, run by PyTorch
here and by plugflow in a subprocess, compared result by result), pretrained weights from the hub
cache, and the clear errors for what needs torchvision's C++ operators."""

import os
import pickle
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

import tv_data_recipe

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = {np.dtype("float32"): (1e-5, 1e-5), np.dtype("float64"): (1e-12, 1e-12)}  # (rtol, atol)


def run_under_mock(code, env=None, timeout=300):
    """Runs code in a fresh interpreter with mock_torch enabled; returns its stdout."""
    script = "import sys\nimport plugflow.mock_torch\nplugflow.mock_torch.enable()\n" \
             f"sys.path.insert(0, {TESTS_DIR!r})\n" + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                            env=None if env is None else dict(os.environ, **env))
    assert result.returncode == 0, result.stderr[-5000:]
    return result.stdout


def write_idx(path, array):
    """An IDX file as MNIST ships them (big-endian header, unsigned bytes)."""
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape))
        f.write(array.astype(np.uint8).tobytes())


@pytest.fixture
def data_root(tmp_path):
    rng = np.random.default_rng(1234)
    for cls, count in (("cat", 3), ("dog", 2), ("emu", 2)):
        os.makedirs(tmp_path / "images" / cls)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (10, 10, 3), dtype=np.uint8)).save(
                tmp_path / "images" / cls / f"{i}.png")
    raw = tmp_path / "MNIST" / "raw"
    os.makedirs(raw)
    for split, n in (("train", 12), ("t10k", 5)):
        write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, (n,)))
    return tmp_path


def test_transforms_ops_and_datasets_match_pytorch(data_root):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"recipe seed: {seed}")
    expected = tv_data_recipe.run(str(data_root), seed)
    out = data_root / "plugflow.pkl"
    run_under_mock(f'''
        import pickle
        import tv_data_recipe
        with open({str(out)!r}, "wb") as f:
            pickle.dump(tv_data_recipe.run({str(data_root)!r}, {seed}), f)
    ''')
    with open(out, "rb") as f:
        actual = pickle.load(f)
    assert sorted(actual) == sorted(expected)
    for key, want in expected.items():
        got = actual[key]
        assert got.dtype == want.dtype and got.shape == want.shape, (key, got.dtype, want.dtype, got.shape, want.shape)
        if want.dtype in TOLERANCE:
            rtol, atol = TOLERANCE[want.dtype]
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=key)
        else:
            np.testing.assert_array_equal(got, want, err_msg=key)
    assert actual["transforms.random_crop_is_a_window"]


def test_pretrained_weights_come_from_the_hub_cache(tmp_path):
    weights = torchvision.models.ResNet18_Weights.IMAGENET1K_V1
    torch.manual_seed(0)
    reference = torchvision.models.resnet18().eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = reference(x)
    env = {"TORCH_HOME": str(tmp_path)}
    code = f'''
        import numpy as np
        import torch, torchvision
        x = torch.from_numpy(np.load({str(tmp_path / "x.npy")!r}))
        try:
            torchvision.models.resnet18(weights="DEFAULT")
        except RuntimeError as e:
            print("refused:", e)
        else:
            model = torchvision.models.resnet18(weights="DEFAULT").eval()
            with torch.no_grad():
                np.save({str(tmp_path / "out.npy")!r}, model(x).numpy())
            print("loaded")
    '''
    np.save(tmp_path / "x.npy", x.numpy())
    out = run_under_mock(code, env)
    cached = tmp_path / "hub" / "checkpoints" / os.path.basename(weights.url)
    assert "does not download" in out and str(cached) in out
    os.makedirs(cached.parent)
    torch.save(reference.state_dict(), cached)  # as if PyTorch had downloaded it
    assert run_under_mock(code, env).strip().endswith("loaded")
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_what_torchvision_cannot_run_fails_clearly():
    out = run_under_mock('''
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch, torchvision
        assert torchvision.extension._has_ops()  # its operators are plugflow's (test_torchvision_ops.py)
        print([str(w.message) for w in caught if "image Python extension" in str(w.message)])
        from torchvision.models.feature_extraction import create_feature_extractor
        try:
            create_feature_extractor(torchvision.models.resnet18(), ["layer1"])
        except NotImplementedError as e:
            assert "torch.fx.Tracer" in str(e), e
        else:
            raise AssertionError("traced")
        print("ok")
    ''')
    warning_line, ok = out.strip().splitlines()[-2:]
    assert "plugflow cannot load PyTorch C++ extensions" in warning_line and ok == "ok"
