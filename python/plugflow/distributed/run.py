"""plugflow.distributed.run: torchrun for plugflow. Starts ``--nproc-per-node`` copies of a
training script on this node, each with the environment ``init_process_group("gloo")`` reads,
watches them, and tears the whole local group down when one fails.

    python -m plugflow.distributed.run --nproc-per-node 2 train.py --epochs 3
    # two machines: the same command on each, --node-rank 0 / 1
    python -m plugflow.distributed.run --nnodes 2 --node-rank 0 --nproc-per-node 2 \\
        --master-addr 10.0.0.1 --master-port 29500 --rdzv-id job42 train.py

Every worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
MASTER_ADDR, MASTER_PORT, PLUGFLOW_RUN_ID (also as TORCHELASTIC_RUN_ID),
TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS, and OMP_NUM_THREADS=1 unless it is
set (several workers share the cores). Flags take torchrun's spellings, with dashes or
underscores.

The run id identifies the job to the rendezvous (see docs/distributed.md): ``--rdzv-id``, else
PLUGFLOW_RUN_ID from the environment, else a fresh random token for a one-node job; a job of
several nodes needs ``--rdzv-id`` (every node must pass the same one).

When a worker exits non-zero or is killed, the others are sent SIGTERM (SIGKILL after
``--shutdown-timeout`` seconds) and the launcher prints which rank failed, how, and the last
lines it wrote to stderr; with ``--max-restarts N`` the group is started again, up to N times.
SIGINT, SIGTERM, SIGHUP and SIGQUIT received by the launcher are forwarded to every worker
(each runs in its own session, with everything it started), and a worker dies with the
launcher even when the launcher is killed with SIGKILL.
"""

import argparse
import collections
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

__all__ = ["main", "parse_args", "run"]

_PROG = "plugflow.distributed.run"
_TAIL_LINES = 20
_SETTLE_S = 1.0  # after a failure, how long the other workers get to fail before the teardown
# How plugflow's gloo errors say that a peer went away: such a failure follows another's.
_PEER_FAILED = "A peer closed its connections"
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_PR_SET_PDEATHSIG = 1


def _flag(parser, name, **kwargs):
    """A flag under torchrun's two spellings: --nproc-per-node and --nproc_per_node."""
    spellings = [name]
    if "-" in name[2:]:
        spellings.append("--" + name[2:].replace("-", "_"))
    parser.add_argument(*spellings, dest=name[2:].replace("-", "_"), **kwargs)


def _parser(prog=_PROG):
    parser = argparse.ArgumentParser(prog=prog, description="Start a plugflow data-parallel job on this node "
                                     "(torchrun's flags).")
    _flag(parser, "--nnodes", type=int, default=1, help="number of nodes (machines) of the job")
    _flag(parser, "--nproc-per-node", type=int, default=1, help="worker processes on this node")
    _flag(parser, "--node-rank", type=int, default=0, help="this node's rank, 0 .. nnodes-1")
    _flag(parser, "--master-addr", default="127.0.0.1", help="address of the node running rank 0")
    _flag(parser, "--master-port", type=int, default=29500, help="port of rank 0's rendezvous store")
    _flag(parser, "--rdzv-id", default=None, help="the job's run id, the same on every node")
    _flag(parser, "--max-restarts", type=int, default=0, help="restart the group this many times after a failure")
    _flag(parser, "--shutdown-timeout", type=float, default=10.0,
          help="seconds between SIGTERM and SIGKILL when stopping workers")
    parser.add_argument("--standalone", action="store_true",
                        help="one node: a free port on 127.0.0.1 and a fresh run id")
    parser.add_argument("-m", "--module", action="store_true", help="run the script as `python -m module`")
    _flag(parser, "--no-python", action="store_true", help="run the script as an executable, without python")
    parser.add_argument("training_script", help="the script (or module, or program) every worker runs")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def parse_args(args=None, parser=None):
    parser = parser or _parser()
    ns = parser.parse_args(args)
    if ns.nnodes < 1:
        parser.error(f"--nnodes must be >= 1, got {ns.nnodes}")
    if ns.nproc_per_node < 1:
        parser.error(f"--nproc-per-node must be >= 1, got {ns.nproc_per_node}")
    if not 0 <= ns.node_rank < ns.nnodes:
        parser.error(f"--node-rank must be in [0, {ns.nnodes}), got {ns.node_rank}")
    if not 0 <= ns.master_port < 65536:
        parser.error(f"--master-port must be a port number, got {ns.master_port}")
    if ns.max_restarts < 0:
        parser.error(f"--max-restarts must be >= 0, got {ns.max_restarts}")
    if ns.module and ns.no_python:
        parser.error("--module and --no-python cannot be given together")
    if ns.standalone:
        if ns.nnodes != 1:
            parser.error("--standalone runs one node; drop --nnodes")
        ns.master_addr = "127.0.0.1"
        ns.master_port = _free_port()
        ns.rdzv_id = ns.rdzv_id or uuid.uuid4().hex
    if ns.rdzv_id is None:
        ns.rdzv_id = os.environ.get("PLUGFLOW_RUN_ID")
    if not ns.rdzv_id:
        if ns.nnodes > 1:
            parser.error("a job of several nodes needs --rdzv-id: the same run id on every node, so that the "
                         "rendezvous admits their ranks and no other job's")
        ns.rdzv_id = uuid.uuid4().hex
    return ns


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Loaded before any fork: the child between fork and exec must not import or load anything.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


class _Worker:
    """One worker process. A thread copies its stderr through, keeps the last lines and notes
    when a Python traceback starts; another waits for the process and notes when it exited.
    The worker that failed first is the root cause: the others usually fail because it did
    (failure_order)."""

    def __init__(self, cmd, env, rank, local_rank):
        self.rank = rank
        self.local_rank = local_rank
        self.tail = collections.deque(maxlen=_TAIL_LINES)
        launcher_pid = os.getpid()

        def die_with_launcher():  # in the child, between fork and exec
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
                os._exit(1)

        # Its own session: a signal to the group reaches everything the worker starts.
        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=die_with_launcher)
        self.exited_at = None  # time.monotonic() at exit
        self.traceback_at = None  # time.monotonic() at its first traceback line
        self._reader = threading.Thread(target=self._copy_stderr, daemon=True)
        self._reader.start()
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self):
        self.proc.wait()
        self.exited_at = time.monotonic()

    def join(self, timeout):
        """True once the worker has exited (waits up to `timeout` seconds; None: forever)."""
        self._waiter.join(timeout)
        return self.exited_at is not None

    def _copy_stderr(self):
        out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        for line in iter(self.proc.stderr.readline, b""):
            if out is not None:
                out.write(line)
                out.flush()
            else:
                sys.stderr.write(line.decode(errors="replace"))
            self.tail.append(line.decode(errors="replace").rstrip("\n"))
            if self.traceback_at is None and line.startswith(b"Traceback (most recent call last)"):
                self.traceback_at = time.monotonic()
        self.proc.stderr.close()

    def failure_order(self):
        """Sorts root causes first: a worker whose error blames a peer comes after those whose
        errors do not; then the earliest to fail (the launcher's own reading times, which its
        threads take under load, so they only break ties)."""
        blames_peer = any(_PEER_FAILED in line for line in self.tail)
        return blames_peer, min(t for t in (self.traceback_at, self.exited_at) if t is not None)

    def signal(self, signum):
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def finish_output(self):
        self._reader.join(timeout=5)


def _describe_exit(code):
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _worker_command(ns, local_rank):
    args = list(ns.training_script_args)
    if not getattr(ns, "use_env", True):  # plugflow.distributed.launch without --use-env
        args.insert(0, f"--local_rank={local_rank}")
    if ns.no_python:
        return [ns.training_script, *args]
    if ns.module:
        return [sys.executable, "-u", "-m", ns.training_script, *args]
    return [sys.executable, "-u", ns.training_script, *args]


def _worker_env(ns, local_rank, restart_count):
    env = dict(os.environ)
    world_size = ns.nnodes * ns.nproc_per_node
    env.update({
        "RANK": str(ns.node_rank * ns.nproc_per_node + local_rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(ns.nproc_per_node),
        "GROUP_RANK": str(ns.node_rank),
        "ROLE_RANK": str(ns.node_rank * ns.nproc_per_node + local_rank),
        "MASTER_ADDR": ns.master_addr,
        "MASTER_PORT": str(ns.master_port),
        "PLUGFLOW_RUN_ID": ns.rdzv_id,
        "TORCHELASTIC_RUN_ID": ns.rdzv_id,
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(ns.max_restarts),
    })
    if ns.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    return env


def _stop(workers, signum, grace_s):
    """Send `signum` to every live worker, SIGKILL after grace_s, and reap them all."""
    for w in workers:
        if w.exited_at is None:
            w.signal(signum)
    deadline = time.monotonic() + grace_s
    for w in workers:
        if not w.join(max(0.0, deadline - time.monotonic())):
            w.signal(signal.SIGKILL)
            w.join(None)
        # Whatever the worker started in its session goes too.
        w.signal(signal.SIGKILL)
        w.finish_output()


def _run_group(ns, restart_count):
    """Runs one attempt; returns None when every worker exited 0, else the first failed worker."""
    workers = []
    try:
        for local_rank in range(ns.nproc_per_node):
            env = _worker_env(ns, local_rank, restart_count)
            workers.append(_Worker(_worker_command(ns, local_rank), env, int(env["RANK"]), local_rank))
        while True:
            exited = [w for w in workers if w.exited_at is not None]
            failed = [w for w in exited if w.proc.returncode != 0]
            if failed:
                # The others get a moment to fail too (a peer's error follows the root cause's
                # within milliseconds, but its exit can come first): then the earliest failure,
                # with every exited worker's stderr read to the end, is named.
                settle = time.monotonic() + _SETTLE_S
                while time.monotonic() < settle and any(w.exited_at is None for w in workers):
                    time.sleep(0.02)
                failed = [w for w in workers if w.exited_at is not None and w.proc.returncode != 0]
                for w in failed:
                    w.finish_output()
                first = min(failed, key=_Worker.failure_order)
                _stop(workers, signal.SIGTERM, ns.shutdown_timeout)
                return first
            if len(exited) == len(workers):
                for w in workers:
                    w.finish_output()
                return None
            time.sleep(0.05)
    except _Interrupted as e:
        _stop(workers, e.signum, ns.shutdown_timeout)
        raise
    except BaseException:
        _stop(workers, signal.SIGTERM, ns.shutdown_timeout)
        raise


def _report(ns, failed, attempts):
    bar = "=" * 72
    lines = [bar, f"{_PROG}: {ns.training_script} FAILED",
             f"rank {failed.rank} (local rank {failed.local_rank} on node {ns.node_rank}, pid {failed.proc.pid}) "
             f"{_describe_exit(failed.proc.returncode)}; the other workers on this node were stopped"]
    if attempts > 1:
        lines.append(f"after {attempts} attempts (--max-restarts {ns.max_restarts})")
    if failed.tail:
        lines.append(f"last lines of rank {failed.rank}'s stderr:")
        lines += ["  " + line for line in failed.tail]
    else:
        lines.append(f"rank {failed.rank} wrote nothing to stderr")
    lines.append(bar)
    print("\n".join(lines), file=sys.stderr, flush=True)


def run(ns):
    """Runs the job described by parse_args' namespace; returns the launcher's exit status."""

    def on_signal(signum, _frame):
        raise _Interrupted(signum)

    previous = {s: signal.signal(s, on_signal) for s in _FORWARDED_SIGNALS}
    try:
        for attempt in range(ns.max_restarts + 1):
            failed = _run_group(ns, attempt)
            if failed is None:
                return 0
            if attempt < ns.max_restarts:
                print(f"{_PROG}: rank {failed.rank} {_describe_exit(failed.proc.returncode)}; restarting the group "
                      f"({attempt + 1} of {ns.max_restarts})", file=sys.stderr, flush=True)
        _report(ns, failed, ns.max_restarts + 1)
        return 1
    except _Interrupted as e:
        print(f"{_PROG}: received {signal.Signals(e.signum).name}; forwarded it to the workers and stopped them",
              file=sys.stderr, flush=True)
        return 128 + e.signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(args=None):
    sys.exit(run(parse_args(args)))


if __name__ == "__main__":
    main()
