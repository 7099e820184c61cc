"""plugflow.profiler: where the time of a step goes (torch.profiler's API).

    with plugflow.profiler.profile(record_shapes=True, profile_memory=True) as prof:
        with plugflow.profiler.record_function("forward"):
            loss = model(x).sum()
        loss.backward()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")        # chrome://tracing or ui.perfetto.dev

What is recorded: every kernel the dispatcher runs, eager or inside an nn.Graph replay, with the
plugin ("provider") whose kernel ran, the device, the input shapes (record_shapes) and the bytes
of the outputs the call allocated (profile_memory; graph kernels write into the plan's arena and
allocate nothing); and the ranges of record_function. A kernel's time is measured around it on
the calling thread; on an accelerator the device is synchronized after each kernel while
recording, so the time is the kernel's own. Recording off costs the dispatcher one relaxed atomic
load per kernel.
"""
import collections
import enum
import functools
import json
import os
import socket
import time

from . import _C

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule",
           "tensorboard_trace_handler"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """torch.profiler.schedule: skip `skip_first` steps, then cycles of `wait` idle, `warmup`
    (not recorded) and `active` recorded steps, `repeat` times (0: for ever)."""
    for name, v in (("wait", wait), ("warmup", warmup), ("active", active), ("repeat", repeat),
                    ("skip_first", skip_first)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"schedule: {name} must be a non-negative int, got {v!r}")
    if active < 1:
        raise ValueError("schedule: active must be at least 1")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if pos == cycle - 1 else ProfilerAction.RECORD
    return action


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An on_trace_ready handler writing each recorded cycle as a Chrome trace into dir_name
    (the file name layout of torch.profiler's, which TensorBoard's profiler plugin reads)."""
    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{name}.{time.time_ns() // 1000000}.pt.trace.json")
        if use_gzip:
            path += ".gz"
        prof.export_chrome_trace(path)
    return handler


class FunctionEvent:
    """One recorded kernel call or range. Times in microseconds from the profiler's start."""
    __slots__ = ("kind", "name", "provider", "device", "time_range_start", "time_range_end", "thread", "input_shapes",
                 "cpu_memory_usage", "children", "parent")

    def __init__(self, kind, name, provider, device, start_ns, end_ns, thread, shapes, allocated):
        self.kind, self.name, self.provider, self.device = kind, name, provider, device
        self.time_range_start, self.time_range_end = start_ns / 1000.0, end_ns / 1000.0
        self.thread, self.input_shapes, self.cpu_memory_usage = thread, [list(s) for s in shapes], allocated
        self.children, self.parent = [], None

    key = property(lambda self: self.name)
    cpu_time_total = property(lambda self: self.time_range_end - self.time_range_start)
    self_cpu_time_total = property(lambda self: self.cpu_time_total - sum(c.cpu_time_total for c in self.children))
    self_cpu_memory_usage = property(lambda self: self.cpu_memory_usage if self.kind != "range" else 0)
    is_graph = property(lambda self: self.kind == "graph_kernel")

    def __repr__(self):
        return (f"<FunctionEvent {self.kind} name={self.name} provider={self.provider!r} device={self.device} "
                f"start={self.time_range_start:.1f}us dur={self.cpu_time_total:.1f}us>")


class FunctionEventAvg:
    """Events of one key summed (key_averages)."""

    def __init__(self, key, provider, input_shapes):
        self.key, self.provider, self.input_shapes = key, provider, input_shapes
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0

    def add(self, e):
        self.count += 1
        self.cpu_time_total += e.cpu_time_total
        self.self_cpu_time_total += e.self_cpu_time_total
        self.cpu_memory_usage += e.cpu_memory_usage
        self.self_cpu_memory_usage += e.self_cpu_memory_usage

    @property
    def cpu_time(self):
        return self.cpu_time_total / max(self.count, 1)

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} provider={self.provider!r} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.1f}us self={self.self_cpu_time_total:.1f}us>")


_SORT_KEYS = ("cpu_time_total", "self_cpu_time_total", "cpu_time", "count", "cpu_memory_usage",
              "self_cpu_memory_usage")


def _fmt_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _fmt_bytes(n):
    for unit, size in (("Gb", 1 << 30), ("Mb", 1 << 20), ("Kb", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} b"


class EventList(list):
    """A list of FunctionEvent or FunctionEventAvg with torch's table()."""

    def __init__(self, items=(), profile_memory=False, record_shapes=False):
        super().__init__(items)
        self._profile_memory, self._record_shapes = profile_memory, record_shapes

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, header=None, top_level_events_only=False):
        rows = list(self)
        if top_level_events_only:
            rows = [r for r in rows if getattr(r, "parent", None) is None]
        if sort_by is not None:
            key = sort_by.replace("cuda", "cpu").replace("device", "cpu")
            if key not in _SORT_KEYS:
                raise ValueError(f"table: sort_by must be one of {', '.join(_SORT_KEYS)}, got {sort_by!r}")
            rows.sort(key=lambda r: getattr(r, key), reverse=True)
        if row_limit is not None and row_limit > 0:
            rows = rows[:row_limit]
        # Percentages of the wall time covered: top-level time, ranges counting once.
        total = sum(r.self_cpu_time_total for r in self) or 1.0
        cols = ["Name", "Provider", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
        if self._profile_memory:
            cols += ["CPU Mem", "Self CPU Mem"]
        cols.append("# of Calls")
        if self._record_shapes:
            cols.append("Input Shapes")
        lines = []
        for r in rows:
            name = r.key if len(r.key) <= max_name_column_width else r.key[:max_name_column_width - 3] + "..."
            avg = r.cpu_time if isinstance(r, FunctionEventAvg) else r.cpu_time_total
            cells = [name, r.provider or "-", f"{100 * r.self_cpu_time_total / total:.2f}%",
                     _fmt_time(r.self_cpu_time_total), f"{100 * r.cpu_time_total / total:.2f}%",
                     _fmt_time(r.cpu_time_total), _fmt_time(avg)]
            if self._profile_memory:
                cells += [_fmt_bytes(r.cpu_memory_usage), _fmt_bytes(r.self_cpu_memory_usage)]
            cells.append(str(getattr(r, "count", 1)))
            if self._record_shapes:
                cells.append(str(r.input_shapes))
            lines.append(cells)
        widths = [max(len(c), *(len(l[i]) for l in lines)) if lines else len(c) for i, c in enumerate(cols)]
        sep = "  ".join("-" * w for w in widths)

        def fmt(cells):
            return "  ".join(c.ljust(w) if i == 0 or i == 1 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths)))
        out = ([header] if header else []) + [sep, fmt(cols), sep] + [fmt(l) for l in lines] + [sep]
        out.append(f"Self CPU time total: {_fmt_time(total)}")
        return "\n".join(out)

    def __str__(self):
        return self.table()


class profile:
    """torch.profiler.profile. Records between __enter__ and __exit__ (or start()/stop()); with a
    `schedule`, only the steps it marks (advance with step()), handing each finished cycle to
    `on_trace_ready`."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None):
        for name, v in (("with_stack", with_stack), ("with_flops", with_flops), ("with_modules", with_modules)):
            if v:
                raise NotImplementedError(f"plugflow.profiler.profile({name}=True): plugflow's profiler records kernels, "
                                          f"ranges, shapes and allocations, not Python stacks, FLOPs or modules")
        if experimental_config is not None:
            raise NotImplementedError("plugflow.profiler.profile: experimental_config is not supported")
        if activities is not None:
            activities = set(activities)
            bad = [a for a in activities if not isinstance(a, ProfilerActivity)]
            if bad:
                raise TypeError(f"profile: activities must be ProfilerActivity values, got {bad}")
        self.activities = activities or {ProfilerActivity.CPU}
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.step_num = 0
        self._recording = False
        self._events = None
        self._action = ProfilerAction.RECORD if schedule is None else schedule(0)

    # Recording.
    def _start_recording(self):
        if not self._recording:
            _C._profiler_start(self.record_shapes)
            self._recording = True

    def _stop_recording(self):
        if self._recording:
            self._recording = False
            self._events = self._build(_C._profiler_stop())

    def start(self):
        if self._action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._start_recording()
        return self

    def stop(self):
        was = self._recording
        self._stop_recording()
        if was and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def step(self):
        """Ends a step: the schedule decides whether the next one is recorded."""
        if self.schedule is None:
            self.step_num += 1
            return
        prev = self._action
        self.step_num += 1
        self._action = self.schedule(self.step_num)
        recording_next = self._action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        if prev == ProfilerAction.RECORD_AND_SAVE or (self._recording and not recording_next):
            self._stop_recording()
            if prev == ProfilerAction.RECORD_AND_SAVE and self.on_trace_ready is not None:
                self.on_trace_ready(self)
        if recording_next:
            self._start_recording()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # Results.
    @staticmethod
    def _build(raw):
        events = [FunctionEvent(*r) for r in raw]
        # Nesting per thread: an event inside a range (both on one thread) is its child.
        by_thread = collections.defaultdict(list)
        for e in events:
            by_thread[e.thread].append(e)
        for evs in by_thread.values():
            evs.sort(key=lambda e: (e.time_range_start, -e.time_range_end))
            stack = []
            for e in evs:
                while stack and stack[-1].time_range_end <= e.time_range_start:
                    stack.pop()
                if stack and e.time_range_end <= stack[-1].time_range_end:
                    e.parent = stack[-1]
                    stack[-1].children.append(e)
                if e.kind == "range":
                    stack.append(e)
        events.sort(key=lambda e: (e.time_range_start, e.thread))
        return events

    def _require_events(self):
        if self._recording:
            raise RuntimeError("the profiler is still recording: read its results after the `with` block or stop()")
        if self._events is None:
            raise RuntimeError("the profiler has recorded nothing yet")
        return self._events

    def events(self):
        return EventList(self._require_events(), self.profile_memory, self.record_shapes)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        if group_by_stack_n:
            raise NotImplementedError("key_averages(group_by_stack_n=...): plugflow's profiler records no stacks")
        groups = {}
        for e in self._require_events():
            where = e.provider + (" (graph)" if e.is_graph else "")
            k = (e.name, where, str(e.input_shapes) if group_by_input_shape else "")
            if k not in groups:
                groups[k] = FunctionEventAvg(e.name, where, e.input_shapes if group_by_input_shape else [])
            groups[k].add(e)
        return EventList(groups.values(), self.profile_memory, self.record_shapes and group_by_input_shape)

    def export_chrome_trace(self, path):
        pid = os.getpid()
        trace = []
        for e in self._require_events():
            args = {"device": e.device} if e.kind != "range" else {}
            if e.provider:
                args["provider"] = e.provider
            if e.input_shapes:
                args["Input Dims"] = e.input_shapes
            if e.cpu_memory_usage:
                args["allocated bytes"] = e.cpu_memory_usage
            trace.append({"name": e.name, "cat": "user_annotation" if e.kind == "range" else e.kind, "ph": "X",
                          "ts": e.time_range_start, "dur": e.cpu_time_total, "pid": pid, "tid": e.thread,
                          "args": args})
        data = json.dumps({"traceEvents": trace, "displayTimeUnit": "ms"})
        if path.endswith(".gz"):
            import gzip
            with gzip.open(path, "wt") as f:
                f.write(data)
        else:
            with open(path, "w") as f:
                f.write(data)


class record_function:
    """A named range in the profile (a context manager or a decorator); free when not recording."""

    def __init__(self, name, args=None):
        if not isinstance(name, str):
            raise TypeError(f"record_function: name must be a str, got {type(name).__name__}")
        self.name = name if args is None else f"{name}({args})"
        self._handle = None

    def __enter__(self):
        self._handle = _C._profiler_range_begin()
        return self

    def __exit__(self, *exc):
        _C._profiler_range_end(self.name, self._handle)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*a, **k):
            with record_function(self.name):
                return fn(*a, **k)
        return wrapped
