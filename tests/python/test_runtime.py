"""The runtime as Python sees it: config, plugins, kernels, devices, threads, and
`python -m plugflow.info`."""

import os
import subprocess
import sys

import pytest

import plugflow as pf


def run_module(*args, **env):
    full_env = dict(os.environ)
    full_env.pop("PLUGFLOW_CONFIG", None)
    full_env.update(env)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=120)


def test_current_config_has_every_key():
    c = pf._C.current_config()
    assert set(c) == {"source", "plugins", "plugin_path", "kernels", "threads", "optimizations", "collectives"}
    assert set(c["collectives"]) == {"cpu", "cuda", "timeout_s"}
    assert c["collectives"]["cpu"] == "gloo" and c["collectives"]["cuda"] == "nccl"
    assert isinstance(c["collectives"]["timeout_s"], float)
    assert set(c["optimizations"]) == {"conv_algo_search", "algo_cache", "fuse_pad_conv", "fuse_add_to_output",
                                       "fuse_conv_bn", "fuse_bias_act", "amp"}
    assert c["kernels"]["prefer"][0] == "cpu"
    assert {"name": "cpu", "optional": False} in c["plugins"]


def test_parse_config_round_trip():
    c = pf._C.parse_config(pf._C.default_config_text(), "<default>")
    assert c["source"] == "<default>"
    assert [p["name"] for p in c["plugins"]][:2] == ["cpu", "gloo"]
    with pytest.raises(pf.ConfigError, match="threads"):
        pf._C.parse_config("threads: many\n", "inline.yaml")


def test_loaded_plugins_and_kernels():
    plugins = {p.name: p for p in pf._C.loaded_plugins()}
    assert "cpu" in plugins
    cpu = plugins["cpu"]
    assert cpu.abi_major == 1 and cpu.abi == f"{cpu.abi_major}.{cpu.abi_minor}"
    assert os.path.isfile(cpu.path) and "libplugflow_cpu" in cpu.path
    assert "LoadedPlugin(name='cpu'" in repr(cpu)
    kernels = pf._C.registered_kernels()
    adds = [k for k in kernels if k.op == "add" and k.device == "cpu" and k.dtype is pf.float32]
    assert adds and adds[0].provider == "cpu" and adds[0].priority in ("fallback", "default", "optimized")
    assert pf._C.chosen_provider("add", "cpu", pf.float32) == "cpu"
    assert pf._C.chosen_provider("add", "cuda", pf.float32) in ("", "cuda")
    ops = pf._C.op_names()
    assert {"add", "sum", "mm", "copy"} <= set(ops)
    assert "add" in pf._C.op_signature("add")
    with pytest.raises(NotImplementedError):
        pf._C.op_signature("no_such_op")
    assert all(isinstance(d, str) for d in pf._C.plugin_search_path())


def test_device_info():
    info = {d["type"]: d for d in pf._C.device_info()}
    assert set(info) == {"cpu", "cuda"}
    assert info["cpu"]["plugin_loaded"] and info["cpu"]["device_count"] >= 1
    cuda = info["cuda"]
    assert cuda["device_count"] == pf.cuda.device_count()
    if cuda["device_count"] == 0:
        assert "no CUDA device" in cuda["unavailable_reason"]
        assert not pf.cuda.is_available()


def test_threads_round_trip():
    before = pf.get_num_threads()
    try:
        pf.set_num_threads(1)
        assert pf.get_num_threads() == 1
        assert (pf.ones(100, 100) @ pf.ones(100, 100)).sum().item() == 1e6
    finally:
        pf.set_num_threads(before)
    assert pf.get_num_threads() == before


def test_version():
    assert pf.__version__ == pf._C.version()
    assert pf.__version__.count(".") == 2


def test_public_functions_exported():
    for name in pf._C._public_functions:
        assert getattr(pf, name) is getattr(pf._C, name), name
    for name in ["add", "exp", "sum", "matmul", "from_numpy", "manual_seed", "reshape", "result_type"]:
        assert callable(getattr(pf, name))


def test_plugflow_config_env_selects_config(tmp_path):
    cfg = tmp_path / "one-thread.yaml"
    cfg.write_text("plugins: [cpu]\nkernels: {prefer: [cpu]}\nthreads: 1\n")
    r = run_module("-c", "import plugflow; c = plugflow._C.current_config(); "
                         "print(c['source']); print(plugflow.get_num_threads())", PLUGFLOW_CONFIG=str(cfg))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(cfg), "1"]


def test_info_lists_plugins_devices_and_kernels():
    r = run_module("-m", "plugflow.info")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"plugflow {pf.__version__}")
    assert "config: " in out
    loaded = out.split("loaded plugins")[1].split("\n\n")[0]
    assert "cpu" in loaded and "ABI 1." in loaded and "libplugflow_cpu" in loaded
    # The cuda plugin is in the default config: loaded (maybe without a GPU) or failed, with a reason.
    assert "cuda" in out
    devices = out.split("devices:")[1].split("\n\n")[0]
    assert "cpu: 1 device" in devices
    assert "cuda: " in devices
    if not pf.cuda.is_available():
        assert "no CUDA device" in devices
    assert "cpu: " in out.split("kernels (")[1]
    assert "registered kernels" not in out

    r = run_module("-m", "plugflow.info", "--kernels")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.split("registered kernels")[1].splitlines()[1:]]
    assert ["*", "add", "cpu", "float32", "cpu"] in [row[:5] for row in rows]

    r = run_module("-m", "plugflow")  # the package's __main__ gives the same report
    assert r.returncode == 0 and r.stdout.startswith("plugflow ")


def test_exact_smoke_command():
    r = run_module("-c", "import plugflow as t; print((t.ones(2,3)+t.arange(3)).sum().item())")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "12.0\n"  # (1+0 + 1+1 + 1+2) * 2 rows, as torch computes it


def test_cpu_memory_stats_track_tensors():
    import gc
    gc.collect()
    pf.reset_peak_memory_stats()
    before = pf.memory_allocated()
    t = pf.empty(1 << 20)  # 4 MiB of float32
    assert pf.memory_allocated() - before >= 4 << 20
    assert pf.max_memory_allocated() >= pf.memory_allocated()
    stats = pf.memory_stats("cpu")
    assert stats["allocated_bytes.all.current"] == pf.memory_allocated()
    del t
    assert pf.memory_allocated() == before
    assert pf.max_memory_allocated() >= before + (4 << 20)
    pf.empty_cache()
    with pytest.raises(RuntimeError):
        pf.memory_allocated("cuda:0") if not pf.cuda.is_available() else pf.memory_allocated("meta")
