"""The runtime as Python sees it: config, plugins, kernels, devices, threads, and
`python -m plugflow.info`."""

import io
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import plugflow as pf

REPO = Path(__file__).resolve().parents[2]


def run_module(*args, **env):
    full_env = dict(os.environ)
    full_env.pop("PLUGFLOW_CONFIG", None)
    full_env.update(env)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=120)


def run_child(code, *args, **env):
    """Runs code in a fresh interpreter (plugins loaded there stay out of this test process)."""
    r = run_module("-c", textwrap.dedent(code), *map(str, args), **env)
    assert r.returncode == 0, f"child failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_current_config_has_every_key():
    c = pf._C.current_config()
    assert set(c) == {"source", "plugins", "plugin_path", "kernels", "threads", "optimizations", "collectives"}
    assert set(c["collectives"]) == {"cpu", "cuda", "timeout_s"}
    assert c["collectives"]["cpu"] == "gloo" and c["collectives"]["cuda"] == "nccl"
    assert isinstance(c["collectives"]["timeout_s"], float)
    assert set(c["optimizations"]) == {"conv_algo_search", "algo_cache", "fuse_pad_conv", "fuse_add_to_output",
                                       "fuse_conv_bn", "fuse_bias_act", "fuse_model_update", "blocked_layout", "amp", "graph",
                                       "graph_memory_format"}
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
    assert cpu.abi_major == 4 and cpu.abi == f"{cpu.abi_major}.{cpu.abi_minor}"
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
        # the binding itself, or a Python wrapper of it (out= forms written in Python: max, sort, ...)
        exported = getattr(pf, name)
        assert exported is getattr(pf._C, name) or exported.__wrapped__ is getattr(pf._C, name), name
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
    assert "cpu" in loaded and "ABI 4.0" in loaded and "libplugflow_cpu" in loaded
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


# ---- config: partial files, names checked against the plugins, what init replaces ------------------

def write_config(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def test_plugins(tmp_path_factory):
    """tests/plugins' test_good (provider "test_good": its float32 add writes 4242 into every
    element) and test_throws (registers kernels, then throws), built against the installed SDK."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None or shutil.which("pkg-config") is None:
        pytest.skip("building the test plugins needs a C++ compiler and pkg-config (Debian: g++, pkg-config)")
    # The SDK of the plugflow under test: a staged package's own (tools/stage.py), else the
    # installed one's.
    staged = Path(pf.__file__).parent / "lib" / "pkgconfig"
    env = dict(os.environ, PKG_CONFIG_PATH=os.pathsep.join(
        [str(staged), str(Path(sys.prefix) / "lib" / "pkgconfig")] +
        [p for p in [os.environ.get("PKG_CONFIG_PATH")] if p]))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "plugflow"], env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    out = tmp_path_factory.mktemp("test_plugins")
    sources = {"test_good": ["-DTEST_PLUGIN_NAME=\"test_good\"", "-DTEST_PLUGIN_ADD_VALUE=4242.0f"],
               "test_throws": []}
    for name, defines in sources.items():
        lib = out / f"libplugflow_{name}.so"
        cmd = [cxx, "-shared", "-fPIC", *defines, str(REPO / "tests" / "plugins" / f"{name}.cpp"),
               "-o", str(lib), *flags]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return out


def test_a_partial_config_keeps_the_default_plugins(tmp_path):
    cfg = write_config(tmp_path, "partial.yaml", """\
        optimizations:
          amp: bf16
        """)
    out = run_child("""
        import json, plugflow as pf
        c = pf._C.current_config()
        print(json.dumps({"sum": (pf.ones(2, 3) + pf.arange(3)).sum().item(), "config": c,
                          "default": pf._C.parse_config(pf._C.default_config_text(), "<default>")}))
        """, PLUGFLOW_CONFIG=str(cfg))
    import json
    result = json.loads(out)
    config, default = result["config"], result["default"]
    assert result["sum"] == 12.0
    assert config["source"] == str(cfg)
    assert config["plugins"] == default["plugins"]
    assert config["kernels"] == default["kernels"]
    assert config["collectives"] == default["collectives"]
    assert config["optimizations"] == dict(default["optimizations"], amp="bf16")


def test_merge_rule_of_parse_config():
    default = pf._C.parse_config(pf._C.default_config_text(), "<default>")
    own = pf._C.parse_config("plugins: [cpu]\ncollectives: {timeout_s: 60}\n", "own.yaml")
    assert own["plugins"] == [{"name": "cpu", "optional": False}]
    assert own["kernels"]["prefer"] == []  # its own plugins, in order
    assert own["collectives"] == dict(default["collectives"], timeout_s=60.0)
    assert own["optimizations"] == default["optimizations"]
    assert pf._C.parse_config("kernels: {prefer: [cpu]}\n", "k.yaml")["plugins"] == default["plugins"]


def test_kernels_prefer_must_name_a_loaded_provider(tmp_path):
    cfg = write_config(tmp_path, "typo.yaml", """\
        plugins: [cpu, gloo]
        kernels:
          prefer: [cpux]
        """)
    before = pf._C.current_config()
    with pytest.raises(pf.ConfigError) as e:
        pf.init(str(cfg))
    msg = str(e.value)
    assert msg.startswith(f"{cfg}:3: key 'kernels.prefer[0]': no loaded plugin provides kernels under the name "
                          "'cpux'; kernel providers: cpu"), msg
    assert msg.endswith("did you mean 'cpu'?"), msg
    # The failed init left the previous config and its plugins in place.
    assert pf._C.current_config() == before
    assert all(p.active for p in pf._C.loaded_plugins() if p.name in ("cpu", "gloo"))
    assert (pf.ones(2) + 1).tolist() == [2.0, 2.0]

    cfg = write_config(tmp_path, "gloo.yaml", "plugins: [cpu, gloo]\nkernels: {prefer: [gloo, cpu]}\n")
    with pytest.raises(pf.ConfigError, match=r"gloo.yaml:2: key 'kernels.prefer\[0\]': plugin 'gloo' is loaded but "
                                             r"registers no kernels"):
        pf.init(str(cfg))


def test_collectives_must_name_a_communicator_for_the_device(tmp_path):
    cfg = write_config(tmp_path, "number.yaml", "collectives:\n  cpu: 5\n")
    with pytest.raises(pf.ConfigError, match=r"number.yaml:2: key 'collectives.cpu': expected a communicator backend "
                                             r"name \(e.g. gloo\), got 5"):
        pf.init(str(cfg))
    cfg = write_config(tmp_path, "device.yaml", "plugins: [cpu, gloo]\ncollectives: {cuda: gloo}\n")
    with pytest.raises(pf.ConfigError, match=r"device.yaml:2: key 'collectives.cuda': communicator 'gloo' \(plugin "
                                             r"'gloo'\) serves cpu tensors, not cuda"):
        pf.init(str(cfg))
    cfg = write_config(tmp_path, "typo.yaml", "plugins: [cpu, gloo]\ncollectives: {cpu: glo}\n")
    with pytest.raises(pf.ConfigError, match=r"typo.yaml:2: key 'collectives.cpu': no plugin of this config provides "
                                             r"a communicator named 'glo'.*did you mean 'gloo'\?"):
        pf.init(str(cfg))
    assert pf._C.current_config()["collectives"]["cpu"] == "gloo"


def test_a_name_that_differs_from_the_file_name_is_explained(test_plugins, tmp_path):
    renamed = tmp_path / "libplugflow_foo.so"
    shutil.copy(test_plugins / "libplugflow_test_good.so", renamed)
    cfg = write_config(tmp_path, "foo.yaml", f"""\
        plugins: [cpu, {renamed}]
        kernels: {{prefer: [foo, cpu]}}
        """)
    out = run_child("""
        import sys, plugflow as pf
        try:
            pf.init(sys.argv[1])
        except pf.ConfigError as e:
            print(e)
        """, cfg)
    assert out.startswith(f"{cfg}:2: key 'kernels.prefer[0]': no loaded plugin provides kernels under the name 'foo'; "
                          "kernel providers: cpu, test_good (libplugflow_foo.so declares itself 'test_good'); "
                          "did you mean 'test_good'?"), out


def test_init_replaces_the_active_config(test_plugins, tmp_path):
    good = write_config(tmp_path, "good.yaml", f"""\
        plugins: [cpu, {test_plugins / 'libplugflow_test_good.so'}]
        kernels: {{prefer: [test_good, cpu]}}
        """)
    cpu_only = write_config(tmp_path, "cpu_only.yaml", "plugins: [cpu]\n")
    out = run_child("""
        import io, sys
        import plugflow as pf
        import plugflow.info
        good, cpu_only = sys.argv[1:]
        def active():
            return {p.name: p.active for p in pf._C.loaded_plugins()}
        def test_good_kernels():
            return sum(k.provider == "test_good" for k in pf._C.registered_kernels())

        x = pf.arange(3.0)                      # made under the default config
        assert "gloo" in pf._C._communicator_backends()

        pf.init(good)
        assert (x + x).tolist() == [4242.0] * 3, (x + x).tolist()
        assert pf._C.chosen_provider("add", "cpu", pf.float32) == "test_good"
        assert active()["gloo"] is False and active()["test_good"] and active()["cpu"]
        assert "gloo" not in pf._C._communicator_backends()
        assert test_good_kernels() == 1

        pf.init(cpu_only)
        assert (x + x).tolist() == [0.0, 2.0, 4.0]
        assert pf._C.chosen_provider("add", "cpu", pf.float32) == "cpu"
        assert test_good_kernels() == 0 and active()["test_good"] is False
        report = io.StringIO()
        plugflow.info.report(report)
        line = next(row for row in report.getvalue().splitlines() if row.startswith("  test_good "))
        assert line.endswith("(not in the active config: its kernels, devices and communicators are unused)")

        loaded = len(pf._C.loaded_plugins())
        pf.init(good)                           # reused, not loaded or registered again
        assert len(pf._C.loaded_plugins()) == loaded and test_good_kernels() == 1
        assert (x + x).tolist() == [4242.0] * 3
        print("ok")
        """, good, cpu_only)
    assert out == "ok\n"


def test_a_throwing_plugin_leaves_nothing_and_info_reports_it(test_plugins, tmp_path):
    cfg = write_config(tmp_path, "throws.yaml", f"""\
        plugins:
          - cpu
          - {{name: {test_plugins / 'libplugflow_test_throws.so'}, optional: true}}
        """)
    out = run_child("""
        import plugflow as pf
        import plugflow.info
        # It registered an optimized float32/float64 add (which aborts) before throwing.
        assert not any(k.provider == "test_throws" for k in pf._C.registered_kernels())
        assert pf._C.chosen_provider("add", "cpu", pf.float32) == "cpu"
        assert (pf.ones(2) + pf.ones(2)).tolist() == [2.0, 2.0]
        assert "test_throws_ccl" not in pf._C._communicator_backends()
        plugflow.info.report()
        """, PLUGFLOW_CONFIG=str(cfg))
    failed = out.split("plugins that failed to load (1):")[1]
    assert "libplugflow_test_throws.so" in failed
    assert "plugin 'test_throws' failed to register: boom from test plugin" in failed


def test_cuda_yaml_runs_where_cuda_is_not_available():
    # cuda and nccl are optional in configs/cuda.yaml: the file applies whether they are built
    # or not, and without a GPU tensors stay on the CPU.
    out = run_child("""
        import plugflow as pf
        c = pf._C.current_config()
        assert c["kernels"]["prefer"] == ["cuda", "cpu"]
        print((pf.ones(2, 3) + pf.arange(3)).sum().item(), pf.cuda.is_available())
        """, PLUGFLOW_CONFIG=str(REPO / "configs" / "cuda.yaml"))
    total, available = out.split()
    assert float(total) == 12.0
    assert available == str(pf.cuda.is_available())
