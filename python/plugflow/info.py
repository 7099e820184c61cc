"""`python -m plugflow.info`: what this plugflow runtime is made of.

Prints the plugflow version, where the config came from, the loaded plugins (name, version,
ABI, file), the configured plugins that failed to load and why, the devices of each type (or
why there are none) and how many kernels each provider registered. `--kernels` lists every
registered kernel and marks the one the dispatcher picks for its (op, device, dtype). `--algos`
lists the algorithms the plugins chose so far in this process (conv algorithm search: problem
key -> algorithm, and whether it came from a search, the library's heuristic or the cache file);
`report(algos=True)` called at the end of a run shows that run's choices.
"""

import argparse
import os
import sys
from collections import Counter, defaultdict

from . import _C


def _write(out, line=""):
    out.write(line + "\n")


def report(out=sys.stdout, kernels=False, algos=False):
    """Write the report to `out`."""
    config = _C.current_config()
    _write(out, f"plugflow {_C.version()}")
    env = os.environ.get("PLUGFLOW_CONFIG")
    source = config["source"]
    _write(out, f"config: {source}" + (" (from PLUGFLOW_CONFIG)" if env else ""))
    _write(out, f"threads: {_C.get_num_threads()}")
    _write(out, "kernel preference: " + (", ".join(config["kernels"]["prefer"]) or "(none)"))

    _write(out)
    _write(out, "plugin search path:")
    for d in _C.plugin_search_path(config["plugin_path"]):
        _write(out, f"  {d}")

    _write(out)
    plugins = _C.loaded_plugins()
    _write(out, f"loaded plugins ({len(plugins)}):")
    width = max((len(p.name) for p in plugins), default=0)
    for p in plugins:
        dropped = "" if p.active else "  (not in the active config: its kernels, devices and communicators are unused)"
        _write(out, f"  {p.name:<{width}}  version {p.version}  ABI {p.abi}  {p.path}{dropped}")

    failures = _C.plugin_failures()
    if failures:
        _write(out)
        _write(out, f"plugins that failed to load ({len(failures)}):")
        for f in failures:
            reason = f.reason.replace("\n", "\n      ")
            _write(out, f"  {f.name}: {reason}")

    _write(out)
    _write(out, "devices:")
    for info in _C.device_info():
        if info["device_count"] > 0:
            n = info["device_count"]
            _write(out, f"  {info['type']}: {n} device{'s' if n != 1 else ''}")
        else:
            reason = info["unavailable_reason"] or "no device found"
            _write(out, f"  {info['type']}: none ({reason})")
    fallback = config["kernels"]["cpu_fallback"]
    if fallback:
        stats = _C.cpu_fallback_stats()
        _write(out, f"  ops without a kernel on {', '.join(fallback)} run on the CPU (kernels.cpu_fallback); "
                    f"so far: {len(stats)} ops, {sum(s['calls'] for s in stats.values())} calls, "
                    f"{sum(s['bytes_to_cpu'] + s['bytes_from_cpu'] for s in stats.values())} bytes copied")
        for op, s in sorted(stats.items()):
            _write(out, f"    {op}: {s['calls']} calls, {s['bytes_to_cpu']} bytes to the CPU, "
                        f"{s['bytes_from_cpu']} back")

    collectives = config["collectives"]
    _write(out)
    _write(out, f"collectives: cpu -> {collectives['cpu']}, cuda -> {collectives['cuda']} "
                f"(timeout {collectives['timeout_s']:g} s)")

    records = _C.registered_kernels()
    per_provider = Counter(k.provider for k in records)
    ops_per_provider = defaultdict(set)
    for k in records:
        ops_per_provider[k.provider].add(k.op)
    _write(out)
    _write(out, f"kernels ({len(records)} registered for {len({k.op for k in records})} of "
                f"{len(_C.op_names())} ops):")
    for provider, count in sorted(per_provider.items()):
        _write(out, f"  {provider}: {count} kernels for {len(ops_per_provider[provider])} ops")

    if kernels:
        _write(out)
        _write(out, "registered kernels (* = the dispatcher's choice):")
        rows = sorted(records, key=lambda k: (k.op, k.device, repr(k.dtype), k.provider))
        chosen_cache = {}
        for k in rows:
            key = (k.op, k.device, k.dtype)
            if key not in chosen_cache:
                chosen_cache[key] = _C.chosen_provider(k.op, k.device, k.dtype)
            mark = "*" if chosen_cache[key] == k.provider else " "
            dtype = repr(k.dtype).replace("plugflow.", "")
            _write(out, f"  {mark} {k.op:<20} {k.device:<5} {dtype:<9} {k.provider:<12} {k.priority}")

    if algos:
        choices = _C.algo_choices()
        config_opt = config["optimizations"]
        _write(out)
        _write(out, f"algorithm choices ({len(choices)}; conv_algo_search: {config_opt['conv_algo_search']}, "
                    f"algo_cache: {config_opt['algo_cache'] or '(none)'}):")
        if not choices:
            _write(out, "  (none yet in this process: call plugflow.info.report(algos=True) after the convolutions)")
        for c in choices:
            impl = f" [{c['implementation']}]" if c["implementation"] else ""
            _write(out, f"  {c['provider']} {c['op']} {c['key']} -> {c['algorithm']}{impl} ({c['source']})")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m plugflow.info",
                                     description="Show plugflow's plugins, devices and kernels.")
    parser.add_argument("--kernels", action="store_true", help="list every registered kernel")
    parser.add_argument("--algos", action="store_true",
                        help="list the algorithms chosen so far (problem key -> algorithm, and its source)")
    args = parser.parse_args(argv)
    try:
        report(sys.stdout, kernels=args.kernels, algos=args.algos)
        sys.stdout.flush()
    except BrokenPipeError:  # `python -m plugflow.info --kernels | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
