"""The out-of-tree vendor plugin (examples/vendor_plugin), end to end: build it against the
*installed* SDK (headers + plugflow.pc + libplugflow_core.so under sys.prefix, as `make build`
leaves them in .venv) with meson and ninja into a temporary directory, load it through a config
in a fresh interpreter, and check that the dispatcher runs its kernels exactly when the config
prefers it, with the same numbers as the cpu plugin."""

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "vendor_plugin"

MESON = shutil.which("meson")
NINJA = shutil.which("ninja") or shutil.which("ninja-build")

pytestmark = pytest.mark.skipif(
    MESON is None or NINJA is None,
    reason="building the out-of-tree vendor plugin needs meson and ninja on PATH "
           "(Debian packages meson, ninja-build; `make deps` installs them)")


def pkg_config_path():
    """Where the plugflow install under sys.prefix keeps plugflow.pc: <prefix>/lib/pkgconfig,
    and the multiarch libdir that older builds used."""
    prefix = Path(sys.prefix)
    dirs = [prefix / "lib" / "pkgconfig"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(prefix / "lib" / multiarch / "pkgconfig")
    return [d for d in dirs if (d / "plugflow.pc").is_file()]


def build_env():
    dirs = pkg_config_path()
    if not dirs:
        pytest.fail(f"plugflow.pc is not installed under {sys.prefix}/lib/pkgconfig: run `make build` "
                    "(core/meson.build installs the SDK and plugflow.pc with the package)")
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join([str(d) for d in dirs] + [p for p in [env.get("PKG_CONFIG_PATH")] if p])
    return env


def run(cmd, env, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def vendor_build(tmp_path_factory):
    """The build directory holding libplugflow_vendor.so, built out of tree."""
    env = build_env()
    build_dir = tmp_path_factory.mktemp("vendor_build")
    run([MESON, "setup", str(build_dir), str(EXAMPLE_DIR), "--buildtype=release"], env)
    run([NINJA, "-C", str(build_dir), "-j", "2"], env)
    lib = build_dir / "libplugflow_vendor.so"
    assert lib.is_file(), f"the example's build produced no {lib.name}: {sorted(os.listdir(build_dir))}"
    return build_dir


def test_pkg_config_file_is_usable():
    env = build_env()
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "plugflow"], env=env, capture_output=True, text=True)
    assert pc.returncode == 0, pc.stderr
    flags = pc.stdout.split()
    assert not any("BOOST" in f for f in flags), flags  # the SDK headers need no Boost
    inc = [f[2:] for f in flags if f.startswith("-I")]
    assert any((Path(d) / "plugflow" / "plugin.h").is_file() for d in inc), flags
    libdirs = [f[2:] for f in flags if f.startswith("-L")]
    assert any((Path(d) / "libplugflow_core.so").is_file() for d in libdirs), flags
    assert "-lplugflow_core" in flags and any(f.startswith("-Wl,-rpath,") for f in flags), flags
    # The rpath points at the very core library the installed Python package loads: a plugin
    # linked against another copy would fill another copy's registries.
    import plugflow
    pkg_lib = Path(plugflow.__file__).resolve().parent / "lib"
    assert any(Path(d).resolve() == pkg_lib for d in libdirs), (flags, pkg_lib)


# Runs in a fresh interpreter under the config given by PLUGFLOW_CONFIG; prints nothing on
# success, saves the results to argv[1] (an .npz).
CHILD = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import plugflow as pf

    vendor = [p for p in pf._C.loaded_plugins() if p.name == "vendor"]
    assert vendor, [p.name for p in pf._C.loaded_plugins()]
    lib = ctypes.CDLL(vendor[0].path)  # the already loaded library: same counters
    calls = lib.plugflow_vendor_calls
    calls.restype, calls.argtypes = ctypes.c_int64, [ctypes.c_char_p]

    kernels = [(k.op, k.device, k.priority) for k in pf._C.registered_kernels()
               if k.provider == "vendor" and k.dtype is pf.float32]
    assert sorted(kernels) == [("add", "cpu", "optimized"), ("relu", "cpu", "optimized")], kernels

    def counted(op, f):
        before = calls(op.encode())
        out = f()
        return out, calls(op.encode()) - before

    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 7)).astype(np.float32)
    a[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    b = rng.standard_normal((7, 6)).astype(np.float32)
    row = rng.standard_normal(7).astype(np.float32)
    x, y, r = pf.tensor(a), pf.tensor(b), pf.tensor(row)

    results, counts = {}, {}
    results["relu"], counts["relu"] = counted("relu", lambda: x.relu())
    results["relu_t"], counts["relu_t"] = counted("relu", lambda: x.t().relu())        # strided input
    results["add"], counts["add"] = counted("add", lambda: x + y.t())                  # strided operand
    results["add_bcast"], counts["add_bcast"] = counted("add", lambda: x + r)          # stride-0 operand
    z = x.clone()
    _, counts["add_inplace"] = counted("add", lambda: z.t().add_(y))                   # strided output
    results["add_inplace"] = z
    x64 = pf.tensor(a.astype(np.float64))
    results["relu_f64"], counts["relu_f64"] = counted("relu", lambda: x64.relu())      # vendor has no f64

    np.savez(sys.argv[1],
             **{k: v.numpy() for k, v in results.items()},
             counts=np.array([counts[k] for k in sorted(counts)]), count_names=np.array(sorted(counts)),
             providers=np.array([pf._C.chosen_provider(op, "cpu", dt) for op, dt in
                                 [("relu", pf.float32), ("add", pf.float32), ("relu", pf.float64)]]),
             inputs_a=a, inputs_b=b, inputs_row=row)
""")


def run_child(build_dir, tmp_path, prefer):
    config = tmp_path / f"vendor_{'_'.join(prefer)}.yaml"
    config.write_text(textwrap.dedent(f"""\
        plugins: [cpu, vendor]
        plugin_path: [{str(build_dir)!r}]
        kernels: {{prefer: [{', '.join(prefer)}]}}
        threads: 1
        """))
    out = tmp_path / f"out_{'_'.join(prefer)}.npz"
    env = dict(os.environ)
    env.pop("PLUGFLOW_PLUGIN_PATH", None)
    env.update(PLUGFLOW_CONFIG=str(config), PLUGFLOW_VENDOR_LOG="1")
    r = subprocess.run([sys.executable, "-c", CHILD, str(out)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"child under {config.name} failed:\n{r.stdout}\n{r.stderr}"
    data = dict(np.load(out))
    counts = dict(zip(data.pop("count_names").tolist(), data.pop("counts").tolist()))
    providers = data.pop("providers").tolist()
    return data, counts, providers, r.stderr


@pytest.fixture(scope="module")
def runs(vendor_build, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vendor_runs")
    return {"vendor": run_child(vendor_build, tmp, ["vendor", "cpu"]),
            "cpu": run_child(vendor_build, tmp, ["cpu", "vendor"])}


def test_prefer_vendor_runs_vendor_kernels(runs):
    data, counts, providers, stderr = runs["vendor"]
    assert providers == ["vendor", "vendor", "cpu"]
    # Each float32 relu/add ran the vendor kernel exactly once; float64 fell back to cpu.
    assert counts == {"relu": 1, "relu_t": 1, "add": 1, "add_bcast": 1, "add_inplace": 1, "relu_f64": 0}
    assert "plugflow_vendor: relu float32 numel=42" in stderr
    assert "plugflow_vendor: add float32 numel=42" in stderr


def test_prefer_cpu_runs_cpu_kernels(runs):
    data, counts, providers, stderr = runs["cpu"]
    assert providers == ["cpu", "cpu", "cpu"]
    assert set(counts.values()) == {0}, counts
    assert "plugflow_vendor:" not in stderr


def test_vendor_numbers_match_cpu_and_numpy(runs):
    vendor, cpu = runs["vendor"][0], runs["cpu"][0]
    assert set(vendor) == set(cpu)
    for name in vendor:
        np.testing.assert_array_equal(vendor[name], cpu[name], err_msg=name)  # bitwise, NaN == NaN
    a, b, row = vendor["inputs_a"], vendor["inputs_b"], vendor["inputs_row"]
    relu = np.where(a < 0, np.float32(0), a)  # keeps NaN and -0.0, like torch.relu
    np.testing.assert_array_equal(vendor["relu"], relu)
    assert np.signbit(vendor["relu"][0, 1])  # -0.0 stays -0.0
    np.testing.assert_array_equal(vendor["relu_t"], relu.T)
    np.testing.assert_array_equal(vendor["add"], a + b.T)
    np.testing.assert_array_equal(vendor["add_bcast"], a + row)
    np.testing.assert_array_equal(vendor["add_inplace"], a + b.T)
    np.testing.assert_array_equal(vendor["relu_f64"], relu.astype(np.float64))
