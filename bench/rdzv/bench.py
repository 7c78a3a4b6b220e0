#!/usr/bin/python3
"""Rendezvous benchmark (issue 3): mlrun's server, PyTorch's TCPStore and a bare TCP floor.

W ranks, each its own connection: join, rank 0 publishes a 128-byte ID, every rank fetches it,
barrier. For each W the three systems run interleaved (the order rotates every repetition), each
with a fresh server process and the same client shape: CLIENT_PROCS client processes of
W / CLIENT_PROCS threads, one connection per thread (TCPStore: Python threads, each its own
TCPStore client). Client process p connects to 127.0.0.(p+1); every server listens on all
addresses (TCPStore 1.13 opens two connections per client: 32,768 at W = 16,384 would not fit the
28,232 ephemeral ports towards one address).

Wall: from the first connect to the last barrier exit (CLOCK_MONOTONIC stamps taken by the
clients). Server memory: the server process's VmHWM (peak RSS) from /proc, and its VmRSS just
before the clients start (the idle baseline). Standard library only; run by bench/rdzv/run.sh.
"""

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.environ.get("PYTHON", "/usr/bin/python3")
TOKEN = "bench-token-0123456789abcdef0123"  # 32 bytes, as the echo floor's frame sizes assume
SYSTEMS = ("mlrun", "tcpstore", "floor", "floor8")


def proc_status(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])  # kB
    except OSError:
        pass
    return None


class Lines:
    """Reads a child's stdout lines on a thread, so that every wait for one is bounded."""

    def __init__(self, proc):
        self.q = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self.q.put(line.decode(errors="replace").strip())
        self.q.put(None)

    def expect(self, prefix, deadline):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no '{prefix}' line in time")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                raise TimeoutError(f"no '{prefix}' line in time") from None
            if line is None:
                raise RuntimeError(f"exited before printing '{prefix}'")
            if line.startswith(prefix):
                return line


LIVE = set()  # child processes to kill if this harness is interrupted


def on_signal(signum, frame):
    for p in list(LIVE):
        kill(p)
    sys.exit(128 + signum)


def proc_cpu_s(pid):
    """User + system CPU seconds the process has used so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def reap(proc, timeout=10):
    """Waits (bounded) for a client that printed its result; returns its CPU seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, _, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = 0  # reaped here: Popen must not wait or signal it again
            return ru.ru_utime + ru.ru_stime
        time.sleep(0.01)
    return 0.0


def kill(proc):
    if proc.returncode is None and proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def server_argv(system, args, world):
    if system == "mlrun":
        return [os.path.join(args.bin_dir, "rdzv_server"), TOKEN, "0.0.0.0"]
    if system == "floor":
        return [os.path.join(args.bin_dir, "echo_server"), "0.0.0.0"]
    if system == "floor8":  # the floor listening as mlrun's server does: 8 SO_REUSEPORT queues
        return [os.path.join(args.bin_dir, "echo_server"), "0.0.0.0", "8"]
    return [PY, os.path.join(HERE, "tcpstore_bench.py"), "server", str(world)]


def client_argv(system, args, host, port, world, nthreads, first):
    if system == "tcpstore":
        return [PY, os.path.join(HERE, "tcpstore_bench.py"), "client", host, str(port), str(world),
                str(nthreads), str(args.tcpstore_threads or nthreads)]
    mode = "mlrun" if system == "mlrun" else "echo"
    return [os.path.join(args.bin_dir, "rdzv_clients"), mode, host, str(port), TOKEN, str(world),
            str(nthreads), str(first)]


def run_one(system, world, args, cap):
    """One run. Returns a dict; 'wall' is None when it failed or passed `cap` seconds."""
    log = open(os.path.join(args.log_dir, f"{system}-{world}.log"), "ab")
    procs = []
    out = {"system": system, "world": world, "wall": None, "errors": 0, "note": ""}
    try:
        server = subprocess.Popen(server_argv(system, args, world), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log)
        procs.append(server)
        LIVE.add(server)
        port = int(Lines(server).expect("port", time.monotonic() + 60).split()[1])
        time.sleep(0.2)
        out["server_base_kib"] = proc_status(server.pid, "VmRSS")
        n = args.client_procs
        clients, readers = [], []
        for p in range(n):
            lo, hi = world * p // n, world * (p + 1) // n
            c = subprocess.Popen(client_argv(system, args, f"127.0.0.{p + 1}", port, world, hi - lo,
                                             lo), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=log)
            procs.append(c)
            LIVE.add(c)
            clients.append(c)
            readers.append(Lines(c))
        for r in readers:
            r.expect("ready", time.monotonic() + 120)
        for c in clients:  # every thread is parked on its latch; release them all
            c.stdin.write(b"go\n")
            c.stdin.flush()
        deadline = time.monotonic() + cap
        results = []
        for r in readers:
            f = r.expect("result", deadline).split()[1:]
            results.append([int(x) for x in f])
        out["server_peak_kib"] = proc_status(server.pid, "VmHWM")
        out["server_cpu_s"] = proc_cpu_s(server.pid)
        out["clients_cpu_s"] = sum(reap(c) for c in clients)
        out["errors"] = sum(r[5] for r in results)
        start = min(r[0] for r in results if r[0] > 0)
        phase = lambda k: (max(r[k] for r in results) - start) / 1e9  # noqa: E731
        out["phases"] = {"connected": phase(2), "joined": phase(3), "got": phase(4)}
        if out["errors"] == 0:
            out["wall"] = phase(1)
        else:
            out["note"] = f"{out['errors']} ranks failed (log: {log.name})"
    except (TimeoutError, RuntimeError, ValueError) as e:
        out["server_peak_kib"] = proc_status(procs[0].pid, "VmHWM") if procs else None
        out["note"] = f"{e} (cap {cap:.0f} s)"
    finally:
        if procs:
            try:
                procs[0].stdin.write(b"quit\n")
                procs[0].stdin.flush()
                procs[0].wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for p in reversed(procs):
            kill(p)
            LIVE.discard(p)
        log.close()
    return out


def busy_cores(seconds=1.0):
    """Cores' worth of CPU busy machine-wide over `seconds` (others' load, between runs)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return (1 - (i1 - i0) / max(1, t1 - t0)) * os.cpu_count()


def fmt_s(x):
    return "—" if x is None else (f"{x:.3f} s" if x < 10 else f"{x:.1f} s")


def fmt_mib(kib):
    return "—" if kib is None else f"{kib / 1024:.1f} MiB"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True, help="rdzv_server, rdzv_clients, echo_server")
    ap.add_argument("--worlds", default="1024,4096,16384")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--client-procs", type=int, default=4)
    ap.add_argument("--only", default=",".join(SYSTEMS), help="comma list of " + "/".join(SYSTEMS))
    ap.add_argument("--cap", type=float, default=120, help="seconds a run may take (TCPStore: x3)")
    ap.add_argument("--tcpstore-reps-max-world", type=int, default=4096,
                    help="above this W, TCPStore runs once (it takes minutes there)")
    ap.add_argument("--tcpstore-threads", type=int, default=32,
                    help="Python threads per TCPStore client process, each driving its share of "
                    "the ranks phase by phase (the issue's reference setup); 0: a thread per rank")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--log-dir", default="/tmp/mlrun-bench-rdzv")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    os.makedirs(args.log_dir, exist_ok=True)
    systems = [s for s in SYSTEMS if s in args.only.split(",")]
    runs = []
    for world in [int(w) for w in args.worlds.split(",")]:
        print(f"# W={world}: load {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)
        for rep in range(args.reps):
            order = systems[rep % len(systems):] + systems[:rep % len(systems)]
            for system in order:
                if system == "tcpstore" and world > args.tcpstore_reps_max_world and rep > 0:
                    continue
                cap = args.cap * (3 if system == "tcpstore" else 1)
                before = busy_cores()  # what the rest of the machine uses just before
                r = run_one(system, world, args, cap)
                r["busy_before"] = round(before, 2)
                runs.append(r)
                ph = r.get("phases") or {}
                print(f"#   {system:8s} W={world:6d} rep {rep}: wall {fmt_s(r['wall'])}, "
                      f"connected {fmt_s(ph.get('connected'))}, joined {fmt_s(ph.get('joined'))}, "
                      f"got {fmt_s(ph.get('got'))}; server peak {fmt_mib(r.get('server_peak_kib'))}"
                      f" (idle {fmt_mib(r.get('server_base_kib'))}), CPU server "
                      f"{fmt_s(r.get('server_cpu_s'))} clients {fmt_s(r.get('clients_cpu_s'))}; "
                      f"others busy before: {r['busy_before']:.2f} cores {r['note']}",
                      file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)

    def med(system, world, key):
        return median([r.get(key) for r in runs if r["system"] == system and r["world"] == world])

    def count(system, world):
        ok = [r for r in runs if r["system"] == system and r["world"] == world]
        return f"{sum(r['wall'] is not None for r in ok)}/{len(ok)}"

    worlds = sorted({r["world"] for r in runs})
    print("| W | mlrun | TCPStore | floor | floor, 8 queues | TCPStore / mlrun | mlrun / floor "
          "| mlrun / floor, 8 queues | server peak RSS: mlrun | TCPStore | floor |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdicts = []
    for w in worlds:
        m, t, f, f8 = (med(s, w, "wall") for s in SYSTEMS)
        rt = f"{t / m:.1f}x" if m and t else "—"
        rf = f"{m / f:.2f}x" if m and f else "—"
        rf8 = f"{m / f8:.2f}x" if m and f8 else "—"
        mem = [fmt_mib(med(s, w, "server_peak_kib")) for s in SYSTEMS]
        print(f"| {w:,} | {fmt_s(m)} ({count('mlrun', w)}) | {fmt_s(t)} ({count('tcpstore', w)}) "
              f"| {fmt_s(f)} ({count('floor', w)}) | {fmt_s(f8)} ({count('floor8', w)}) | {rt} "
              f"| {rf} | {rf8} | {mem[0]} | {mem[1]} | {mem[2]} |")
        if w == 4096 and m and t:
            verdicts.append(f"target >= 10x faster than TCPStore at 4,096: {t / m:.1f}x -> "
                            f"{'MET' if t / m >= 10 else 'MISSED'}")
        if w == 16384 and m and f:
            verdicts.append(f"target within 1.5x of the floor at 16,384: {m / f:.2f}x -> "
                            f"{'MET' if m / f <= 1.5 else 'MISSED'}")
        if w == 16384 and m and f8:
            verdicts.append(f"for reference (not the target): {m / f8:.2f}x the floor that also "
                            "listens on 8 SO_REUSEPORT queues")
    print("\n| W | server CPU: mlrun | TCPStore | floor | floor8 | client CPU: mlrun | TCPStore "
          "| floor | floor8 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in worlds:
        cells = [fmt_s(med(s, w, "server_cpu_s")) for s in SYSTEMS]
        cells += [fmt_s(med(s, w, "clients_cpu_s")) for s in SYSTEMS]
        print(f"| {w:,} | " + " | ".join(cells) + " |")
    print("\nMedians of (successful runs/runs). Idle server RSS (before the clients): " + ", ".join(
        f"{s} {fmt_mib(median([r.get('server_base_kib') for r in runs if r['system'] == s]))}"
        for s in systems))
    print(f"Cores busy with other work in the second before each run ({os.cpu_count()} cores): median "
          f"{median([r['busy_before'] for r in runs]):.2f}, max {max(r['busy_before'] for r in runs):.2f}")
    for v in verdicts:
        print(v)


if __name__ == "__main__":
    main()
