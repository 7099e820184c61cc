"""The out-of-tree vendor device (examples/vendor_device): a plugin that adds the device type
"vdev" to an installed plugflow. Built against the installed SDK, loaded through a config in a
fresh interpreter: the device is listed, tensors and modules move to "vdev", its kernels run,
a model trains on it with the CPU's numbers (ops it lacks fall back to the CPU where the config
says so, counted), and without the fallback a missing op raises naming the op and the device."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_vendor_plugin import MESON, NINJA, build_env, run

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "vendor_device"

pytestmark = pytest.mark.skipif(MESON is None or NINJA is None,
                                reason="building the out-of-tree device plugin needs meson and ninja on PATH")


@pytest.fixture(scope="module")
def vdev_build(tmp_path_factory):
    env = build_env()
    build_dir = tmp_path_factory.mktemp("vdev_build")
    run([MESON, "setup", str(build_dir), str(EXAMPLE_DIR), "--buildtype=release"], env)
    run([NINJA, "-C", str(build_dir), "-j", "2"], env)
    assert (build_dir / "libplugflow_vdev.so").is_file()
    return build_dir


def run_child(build_dir, tmp_path, code, fallback=True):
    config = tmp_path / "vdev.yaml"
    config.write_text("plugins: [cpu, gloo, vdev]\n"
                      f"plugin_path: [{build_dir}]\n"
                      + ("kernels: {cpu_fallback: [vdev]}\n" if fallback else ""))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                       env={**build_env(), "PLUGFLOW_CONFIG": str(config)})
    assert r.returncode == 0, f"child failed:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_model_trains_on_the_vendor_device_as_on_the_cpu(vdev_build, tmp_path):
    out = run_child(vdev_build, tmp_path, """
        import copy, ctypes, json
        import plugflow as pf, plugflow.nn as nn
        lib = ctypes.CDLL([p.path for p in pf._C.loaded_plugins() if p.name == "vdev"][0])
        lib.plugflow_vdev_stats.restype = ctypes.c_int64
        pf.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
        cpu_model = copy.deepcopy(model)
        model.to("vdev")
        x, y = pf.randn(8, 5), pf.randint(0, 3, (8,))
        losses = {}
        for m, dev in ((model, "vdev"), (cpu_model, "cpu")):
            opt = pf.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
            losses[dev] = []
            for _ in range(4):
                opt.zero_grad()
                loss = nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
                loss.backward()
                opt.step()
                losses[dev].append(loss.item())
        w = model[0].weight
        print(json.dumps({
            "devices": [d["type"] for d in pf._C.device_info()],
            "device": str(w.device), "grad_device": str(w.grad.device),
            "losses": losses,
            "max_diff": max((a.cpu() - b).abs().max().item() for a, b in zip(model.parameters(), cpu_model.parameters())),
            "vdev_kernel_calls": lib.plugflow_vdev_stats(b"kernel_calls"),
            "vdev_allocated": lib.plugflow_vdev_stats(b"allocated"),
            "fallback": pf._C.cpu_fallback_stats(),
            "relu_chosen": pf._C.chosen_provider("relu", "vdev", pf.float32),
            "parsed": str(pf.device("vdev:0")),
        }))
    """)
    assert "vdev" in out["devices"] and out["device"] == "vdev:0" and out["grad_device"] == "vdev:0"
    assert out["losses"]["vdev"] == out["losses"]["cpu"]
    assert out["max_diff"] == 0.0
    assert out["vdev_kernel_calls"] > 0 and out["vdev_allocated"] > 0  # its kernels ran, on its memory
    assert out["relu_chosen"] == "vdev" and out["parsed"] == "vdev:0"
    fb = out["fallback"]
    assert "mm" in fb or "addmm" in fb, fb  # what the device lacks ran on the CPU, counted
    assert "relu" not in fb and all(s["calls"] > 0 and s["bytes_to_cpu"] > 0 for s in fb.values())


def test_without_the_fallback_a_missing_op_names_itself(vdev_build, tmp_path):
    out = run_child(vdev_build, tmp_path, """
        import json
        import plugflow as pf
        x = pf.ones(3).to("vdev")
        ok = (x + x).relu().cpu().tolist()
        try:
            x.exp()
            err = None
        except NotImplementedError as e:
            err = str(e)
        try:
            pf.device("xpu")
            bad = None
        except ValueError as e:
            bad = str(e)
        print(json.dumps({"ok": ok, "err": err, "bad": bad, "fallback": pf._C.cpu_fallback_stats()}))
    """, fallback=False)
    assert out["ok"] == [2.0, 2.0, 2.0]
    assert "no kernel for op 'exp' on device type 'vdev'" in out["err"]
    assert "Expected one of cpu, cuda, vdev device type" in out["bad"]
    assert out["fallback"] == {}


def test_a_fallback_to_an_unknown_device_is_a_config_error(vdev_build, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("plugins: [cpu, gloo]\nkernels: {cpu_fallback: [vdevv]}\n")
    r = subprocess.run([sys.executable, "-c", "import plugflow as pf; pf.ones(1)"], capture_output=True, text=True,
                       timeout=120, env={**build_env(), "PLUGFLOW_CONFIG": str(config)})
    assert r.returncode != 0
    assert "kernels.cpu_fallback[0]" in r.stderr and "no loaded plugin registers a device type 'vdevv'" in r.stderr
