"""plugflow.profiler: kernels (eager and graph), ranges, shapes, allocations, tables, traces and
schedules, against the shape of torch.profiler's API."""
import json

import pytest
import torch

import plugflow as pf
import plugflow.nn as nn
from plugflow.profiler import profile, record_function, schedule


def small_model(fw):
    fw.manual_seed(0)
    return fw.nn.Sequential(fw.nn.Conv2d(3, 4, 3), fw.nn.ReLU(), fw.nn.Flatten(), fw.nn.Linear(4 * 6 * 6, 5))


def test_the_same_script_runs_on_torch_and_plugflow():
    for fw in (torch, pf):
        model = small_model(fw)
        x = fw.randn(2, 3, 8, 8)
        with fw.profiler.profile(activities=[fw.profiler.ProfilerActivity.CPU], record_shapes=True,
                                 profile_memory=True) as prof:
            with fw.profiler.record_function("step"):
                model(x).sum().backward()
        avgs = prof.key_averages()
        table = avgs.table(sort_by="self_cpu_time_total", row_limit=5)
        assert isinstance(table, str) and "step" in prof.key_averages().table(sort_by="cpu_time_total")
        step = [a for a in avgs if a.key == "step"]
        assert len(step) == 1 and step[0].count == 1 and step[0].cpu_time_total > 0
        assert all(a.self_cpu_time_total <= a.cpu_time_total + 1e-3 for a in avgs)


def test_every_kernel_is_recorded_with_its_provider_device_and_shapes():
    a, b = pf.randn(3, 5), pf.randn(5, 2)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            pf.mm(a, b)
        pf.relu(a)
    events = prof.events()
    mm = [e for e in events if e.name == "mm"]
    assert len(mm) == 3
    assert all(e.provider == "cpu" and e.device == "cpu" and e.input_shapes == [[3, 5], [5, 2]] for e in mm)
    assert [e.name for e in events if e.name == "relu"] == ["relu"]
    avg = {x.key: x for x in prof.key_averages()}
    assert avg["mm"].count == 3
    assert avg["mm"].cpu_time_total == pytest.approx(sum(e.cpu_time_total for e in mm))


def test_allocations_are_the_outputs_of_each_call():
    x = pf.ones(1000)
    with profile(profile_memory=True) as prof:
        pf.add(x, x)               # allocates its output
        x.add_(x)                  # writes into x
    adds = [e for e in prof.events() if e.name == "add"]
    assert [e.cpu_memory_usage for e in adds] == [4000, 0]
    assert "CPU Mem" in prof.key_averages().table()


def test_ranges_nest_and_own_the_kernels_inside_them():
    a = pf.randn(64, 64)
    with profile() as prof:
        with record_function("outer"):
            pf.mm(a, a)
            with record_function("inner"):
                pf.relu(a)
    ev = {e.name: e for e in prof.events()}
    assert ev["inner"].parent is ev["outer"] and ev["relu"].parent is ev["inner"] and ev["mm"].parent is ev["outer"]
    outer = ev["outer"]
    assert outer.self_cpu_time_total == pytest.approx(
        outer.cpu_time_total - ev["mm"].cpu_time_total - ev["inner"].cpu_time_total)
    top = prof.events().table(top_level_events_only=True)
    assert "outer" in top and "relu" not in top


def test_record_function_as_a_decorator_and_when_not_profiling():
    @record_function("helper")
    def helper(t):
        return t * 2

    assert helper(pf.ones(2)).tolist() == [2.0, 2.0]  # nothing is recording: a no-op
    with profile() as prof:
        helper(pf.ones(2))
    assert [e.name for e in prof.events() if e.kind == "range"] == ["helper"]


def test_graph_replays_are_recorded_as_graph_kernels():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    class G(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    g = G()
    x = pf.randn(4, 8)
    g(x)  # compiles
    with profile() as prof:
        g(x)
    graph_events = [e for e in prof.events() if e.kind == "graph_kernel"]
    # Linear + ReLU may run as one fused kernel (fuse_bias_act): whichever kernels the plan has.
    assert graph_events and all(e.provider == "cpu" and e.cpu_memory_usage == 0 for e in graph_events)
    assert not [e for e in prof.events() if e.kind == "kernel"]  # nothing ran eagerly
    assert any(a.provider == "cpu (graph)" for a in prof.key_averages())


def test_chrome_trace(tmp_path):
    a = pf.randn(4, 4)
    with profile(record_shapes=True) as prof:
        with record_function("r"):
            pf.mm(a, a)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    names = {e["name"]: e for e in trace}
    assert names["mm"]["ph"] == "X" and names["mm"]["args"]["provider"] == "cpu"
    assert names["mm"]["args"]["Input Dims"] == [[4, 4], [4, 4]]
    assert names["r"]["cat"] == "user_annotation"
    assert names["r"]["ts"] <= names["mm"]["ts"] and names["mm"]["dur"] <= names["r"]["dur"]


def test_schedule_records_only_the_active_steps():
    a = pf.randn(4, 4)
    traces = []
    sched = schedule(wait=1, warmup=1, active=2, repeat=1)
    with profile(schedule=sched, on_trace_ready=lambda p: traces.append(p.events())) as prof:
        for step in range(6):
            for _ in range(step + 1):  # step i runs i+1 mm calls
                pf.mm(a, a)
            prof.step()
    assert len(traces) == 1
    assert sum(1 for e in traces[0] if e.name == "mm") == 3 + 4  # steps 2 and 3
    # torch's schedule: the same actions step by step.
    tsched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    assert [sched(i).name for i in range(8)] == [tsched(i).name for i in range(8)]


def test_errors():
    with pytest.raises(NotImplementedError, match="with_stack"):
        profile(with_stack=True)
    with pytest.raises(TypeError):
        profile(activities=["cpu"])
    with pytest.raises(ValueError, match="active"):
        schedule(wait=0, warmup=0, active=0)
    with profile() as prof:
        with pytest.raises(RuntimeError, match="already recording"):
            with profile():
                pass
        with pytest.raises(RuntimeError, match="still recording"):
            prof.key_averages()
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="nonsense")
    with pytest.raises(RuntimeError, match="recorded nothing"):
        profile().key_averages()


def test_legacy_autograd_profiler():
    a = pf.randn(4, 4)
    with pf.autograd.profiler.profile() as prof:
        pf.mm(a, a)
    assert [e.name for e in prof.function_events()] == ["mm"]
    with pf.autograd.profiler.profile(enabled=False) as off:
        pf.mm(a, a)
    with pytest.raises(RuntimeError, match="recorded nothing"):
        off.key_averages()
