"""Bad input raises the exception a PyTorch user expects, with a message that says what is wrong."""

import os
import subprocess
import sys

import pytest

import plugflow as pf


def run_python(code, **env):
    """Runs code in a fresh interpreter (config errors happen at import, once per process)."""
    full_env = dict(os.environ)
    full_env.pop("PLUGFLOW_CONFIG", None)
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_exception_classes():
    assert issubclass(pf.ConfigError, RuntimeError)
    assert issubclass(pf.PluginError, RuntimeError)
    assert pf.ConfigError.__module__ == "plugflow" and pf.PluginError.__module__ == "plugflow"
    assert pf.ConfigError is pf._C.ConfigError


def test_shape_mismatch_is_runtime_error():
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(2\) must match the size of tensor b \(3\)"):
        pf.ones(2) + pf.ones(3)
    with pytest.raises(RuntimeError, match="shape '\\[5\\]' is invalid for input of size 6"):
        pf.ones(2, 3).reshape(5)


def test_index_out_of_range_is_index_error():
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        pf.ones(3)[5]
    with pytest.raises(IndexError, match="Dimension out of range"):
        pf.ones(3).unsqueeze(3)


def test_bad_dtype_is_type_error():
    with pytest.raises(TypeError, match="unknown dtype 'float31'"):
        pf.ones(2, dtype="float31")
    with pytest.raises(TypeError):
        pf.ones(2).to(dtype=42)
    with pytest.raises(AttributeError):
        pf.float31  # noqa: B018


def test_bad_device_strings():
    with pytest.raises(ValueError):
        pf.device("tpu")
    with pytest.raises((ValueError, RuntimeError)):
        pf.device("cuda:x")
    with pytest.raises(ValueError):
        pf.device("cuda:0", 1)
    with pytest.raises(ValueError, match="must not be negative"):
        pf.device("cuda", -1)
    assert pf.device(pf.device("cuda:1")) == pf.device("cuda", 1)
    assert pf.device(0) == pf.device("cuda:0")
    assert hash(pf.device("cuda:1")) == hash(pf.device("cuda", 1))
    assert pf.device("cuda") != pf.device("cuda:0")  # "cuda" means the current device


@pytest.mark.skipif(pf.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_cuda_without_gpu_says_no_cuda_device():
    assert pf.cuda.device_count() == 0
    with pytest.raises(RuntimeError, match="no CUDA device"):
        pf.ones(2).cuda()
    with pytest.raises(RuntimeError, match="no CUDA device"):
        pf.zeros(2, device="cuda")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        pf.tensor([1.0], device="cuda:0")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        pf.ones(2).to("cuda")


def test_cuda_rejects_non_cuda_device():
    with pytest.raises(ValueError, match="must be cuda device"):
        pf.ones(2).cuda("cpu")


def test_scalar_conversion_errors():
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        float(pf.ones(3))
    with pytest.raises(RuntimeError, match="a Tensor with 3 elements cannot be converted to Scalar"):
        pf.ones(3).item()
    with pytest.raises(TypeError, match="must be Number"):
        pf.full((2,), "x")
    with pytest.raises(TypeError, match="fill_\\(\\): argument 'value' must be Number"):
        pf.ones(2).fill_("x")
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        pf.ones(2).fill_(pf.ones(2))


def test_bad_config_raises_config_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: [cpu]\nthreadz: 2\n")
    r = run_python("import plugflow", PLUGFLOW_CONFIG=str(bad))
    assert r.returncode != 0
    assert "plugflow.ConfigError" in r.stderr
    assert f"{bad}:2" in r.stderr and "threadz" in r.stderr
    code = ("import plugflow\n"
            "try:\n"
            f"    plugflow.init({str(bad)!r})\n"
            "except plugflow.ConfigError as e:\n"
            "    print('caught', isinstance(e, RuntimeError))\n")
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "caught True"


def test_missing_config_file_raises_config_error(tmp_path):
    with pytest.raises(pf.ConfigError, match="does not exist"):
        pf.init(str(tmp_path / "nowhere.yaml"))


def test_missing_required_plugin_raises_plugin_error(tmp_path):
    cfg = tmp_path / "missing.yaml"
    cfg.write_text("plugins: [cpu, nosuchplugin]\n")
    r = run_python("import plugflow", PLUGFLOW_CONFIG=str(cfg))
    assert r.returncode != 0
    assert "plugflow.PluginError" in r.stderr
    assert "nosuchplugin" in r.stderr
    with pytest.raises(pf.PluginError, match="nosuchplugin"):
        pf._C.load_plugin("nosuchplugin")


def test_optional_plugin_failure_is_recorded_not_raised(tmp_path):
    cfg = tmp_path / "optional.yaml"
    cfg.write_text("plugins: [cpu, {name: nosuch, optional: true}]\n")
    r = run_python("import plugflow\n"
                   "print([f.name for f in plugflow._C.plugin_failures()])\n"
                   "print((plugflow.ones(2) * 3).tolist())",
                   PLUGFLOW_CONFIG=str(cfg))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["['nosuch']", "[3.0, 3.0]"]


def test_set_num_threads_rejects_non_positive():
    with pytest.raises(RuntimeError, match="positive integer"):
        pf.set_num_threads(0)
