#!/usr/bin/python3
"""Side-by-side launcher benchmarks for mlrun (issue 2): launch, teardown, memory.

Standard library only; run with /usr/bin/python3 (Debian's torch lives there). bench/run.sh builds
what this needs and calls it; see bench/README.md for what every number means.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TORCHRUN = ["/usr/bin/python3", "-m", "torch.distributed.run"]
# Debian's torch 1.13 under Python 3.11 crashes in to_map without these.
TORCH_FIX = ["--redirects", "1", "--tee", "1"]
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
# Open MPI 4.1 spawns local ranks from helper threads by default; on this machine, under load,
# that loses the exit of a quickly exiting rank now and then and mpirun hangs forever (see
# README). Spawning from the main thread does not; both are measured.
MPIRUN_NOTHREADS = MPIRUN + ["--mca", "odls_base_num_threads", "0"]
MPIRUN_NOTHREADS_NAME = "mpirun --mca odls_base_num_threads 0"
# Diagnostic: mlrun with its temporary run directory (per-rank error-file directories) on tmpfs.
# On this machine / is ext4 mounted with `discard`, and removing each directory block issues a
# synchronous discard; this row shows what that costs (see README).
MLRUN_SHM_NAME = "mlrun, TMPDIR=/dev/shm (diagnostic)"
EXTRA_ENV = {MLRUN_SHM_NAME: {"TMPDIR": "/dev/shm"}}


def env_prefix(name):
    return "".join("%s=%s " % kv for kv in EXTRA_ENV.get(name, {}).items())


def env_for(name):
    if name not in EXTRA_ENV:
        return None
    env = dict(os.environ)
    env.update(EXTRA_ENV[name])
    return env


class Hung(Exception):
    pass


def run_once(argv, stdout=None, stderr=None, env=None, timeout=None):
    """Starts argv, waits for it. Returns (wall seconds, exit status, ru_maxrss KiB, end time).

    The wall time is from just before posix_spawn to just after wait4 returns. A launcher still
    running after `timeout` seconds is killed (SIGKILL) and Hung is raised. (ru_maxrss is NOT
    the launcher's memory here: Python spawns with vfork, and exec charges the parent's -- this
    harness's -- RSS to the child. Memory is measured with GNU time, which forks, and /proc.)
    """
    out = open(stdout or os.devnull, "wb")
    err = open(stderr or os.devnull, "wb")
    devnull_in = open(os.devnull, "rb")
    try:
        exe = shutil.which(argv[0]) or argv[0]
        file_actions = [
            (os.POSIX_SPAWN_DUP2, devnull_in.fileno(), 0),
            (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
            (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
        ]
        t0 = time.perf_counter()
        pid = os.posix_spawn(exe, argv, env if env is not None else os.environ,
                             file_actions=file_actions)
        killed = []
        timer = None
        if timeout:
            # The launcher is our unreaped child until wait4 returns, so its pid cannot be reused.
            def kill():
                killed.append(True)
                os.kill(pid, 9)
            timer = threading.Timer(timeout, kill)
            timer.start()
        _, status, rusage = os.wait4(pid, 0)
        t1 = time.perf_counter()
        end_realtime = time.time()
        if timer:
            timer.cancel()
        if killed:
            raise Hung("%s: still running after %g s, killed" % (argv[0], timeout))
    finally:
        out.close()
        err.close()
        devnull_in.close()
    run_once.cpu = rusage.ru_utime + rusage.ru_stime
    return t1 - t0, os.waitstatus_to_exitcode(status), rusage.ru_maxrss, end_realtime


def timeout_for(args, name):
    """torchrun with its 5 s monitor needs far longer than the others to finish normally."""
    return args.timeout if name.startswith("torchrun") else args.fast_timeout


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def load():
    return "%.2f %.2f %.2f" % os.getloadavg()


def fmt_s(x):
    return "%.4f" % x if x < 1 else "%.3f" % x


def fmt_ratio(x):
    return "%.2fx" % x


class Results:
    def __init__(self):
        self.sections = {}

    def add(self, section, key, value):
        self.sections.setdefault(section, {}).setdefault(key, []).append(value)


# --------------------------------------------------------------------------------------------
# 1. Launch: N workers of /bin/true, wait for all.

def launch_tools(args):
    n = str(args.workers)
    tools = [
        ("raw posix_spawn", [args.raw_spawn, n, "/bin/true"], args.reps),
        ("mlrun", [args.mlrun, "--nproc_per_node=" + n, "--no_python", "/bin/true"], args.reps),
        (MLRUN_SHM_NAME, [args.mlrun, "--nproc_per_node=" + n, "--no_python", "/bin/true"],
         args.reps),
        ("mpirun", MPIRUN + ["-np", n, "/bin/true"], args.reps),
        (MPIRUN_NOTHREADS_NAME, MPIRUN_NOTHREADS + ["-np", n, "/bin/true"], args.reps),
    ]
    if not args.no_torch:
        tools.append(("torchrun --monitor_interval=0.1",
                      TORCHRUN + ["--nproc_per_node=" + n, "--monitor_interval=0.1", "--no_python"]
                      + TORCH_FIX + ["/bin/true"], args.torch_reps))
        tools.append(("torchrun (default 5 s monitor)",
                      TORCHRUN + ["--nproc_per_node=" + n, "--no_python"] + TORCH_FIX
                      + ["/bin/true"], args.torch_default_reps))
    return tools


def bench_launch(args, res, log):
    tools = launch_tools(args)
    for name, argv, _ in tools:  # one unmeasured warm-up each: page cache, Python bytecode
        try:
            wall, code, _, _ = run_once(argv, timeout=timeout_for(args, name),
                                        env=env_for(name))
        except Hung as e:
            log("launch warm-up: %s: %s" % (name, e))
            res.add("launch_hung", name, 1)
            continue
        if code != 0:
            sys.exit("launch warm-up failed: %s exited %d: %s" % (name, code, " ".join(argv)))
    log("launch: load before %s" % load())
    rounds = max(r for _, _, r in tools)
    for i in range(rounds):
        for name, argv, reps in tools:  # interleaved, so load drifts hit every tool alike
            if i >= reps:
                continue
            try:
                wall, code, _, _ = run_once(argv, timeout=timeout_for(args, name),
                                            env=env_for(name))
            except Hung as e:
                log("launch: %s: %s" % (name, e))
                res.add("launch_hung", name, 1)
                continue
            if code != 0:
                sys.exit("launch: %s exited %d" % (name, code))
            res.add("launch", name, wall)
            res.add("launch_cpu", name, run_once.cpu)
    log("launch: load after %s" % load())
    return [(name, argv) for name, argv, _ in tools]


# --------------------------------------------------------------------------------------------
# 2. Teardown: W workers; one (rank FAIL_RANK) exits 1 after a delay, the rest sleep and die on
#    SIGTERM. Latency = launcher's exit time - the failing worker's own timestamp of its exit.

def worker_script(rank_var, stamp_exit, stamp_file, fail_rank, delay):
    return ('if [ "${%s}" = "%d" ]; then sleep %s; exec %s %s 1; fi; exec sleep 60'
            % (rank_var, fail_rank, delay, stamp_exit, stamp_file))


def teardown_tools(args, stamp_file):
    w = str(args.teardown_workers)
    def script(var, delay):
        return worker_script(var, args.stamp_exit, stamp_file, args.fail_rank, delay)
    tools = [
        ("mlrun", [args.mlrun, "--nproc_per_node=" + w, "--no_python", "/bin/sh", "-c",
                   script("RANK", args.fail_delay)], args.reps, 1),
        (MLRUN_SHM_NAME, [args.mlrun, "--nproc_per_node=" + w, "--no_python", "/bin/sh", "-c",
                          script("RANK", args.fail_delay)], args.reps, 1),
        ("mpirun", MPIRUN + ["-np", w, "/bin/sh", "-c", script("OMPI_COMM_WORLD_RANK",
                                                               args.fail_delay)],
         args.reps, None),
        (MPIRUN_NOTHREADS_NAME, MPIRUN_NOTHREADS + [
            "-np", w, "/bin/sh", "-c", script("OMPI_COMM_WORLD_RANK", args.fail_delay)],
         args.reps, None),
    ]
    if not args.no_torch:
        # torchrun needs ~1.5 s before every worker is up; the failing rank waits longer there so
        # the whole group is running when it fails.
        delay = max(args.fail_delay, 1.0)
        tools.append(("torchrun --monitor_interval=0.1",
                      TORCHRUN + ["--nproc_per_node=" + w, "--monitor_interval=0.1",
                                  "--no_python"] + TORCH_FIX
                      + ["/bin/sh", "-c", script("RANK", delay)], args.torch_reps, None))
        tools.append(("torchrun (default 5 s monitor)",
                      TORCHRUN + ["--nproc_per_node=" + w, "--no_python"] + TORCH_FIX
                      + ["/bin/sh", "-c", script("RANK", delay)], args.torch_default_reps, None))
    return tools


def bench_teardown(args, res, log, workdir):
    stamp_file = os.path.join(workdir, "failed_at")
    tools = teardown_tools(args, stamp_file)
    log("teardown: load before %s" % load())
    rounds = max(r for _, _, r, _ in tools)
    for i in range(rounds):
        for name, argv, reps, want_code in tools:
            if i >= reps:
                continue
            if os.path.exists(stamp_file):
                os.unlink(stamp_file)
            errfile = os.path.join(workdir, "teardown-%s.err" % re.sub(r"\W+", "_", name))
            try:
                wall, code, _, end = run_once(argv, stdout=errfile + ".out", stderr=errfile,
                                              timeout=timeout_for(args, name),
                                              env=env_for(name))
            except Hung as e:
                log("teardown: %s: %s" % (name, e))
                res.add("teardown_hung", name, 1)
                continue
            try:
                with open(stamp_file) as f:
                    failed_at = float(f.read())
            except (OSError, ValueError):
                sys.exit("teardown: %s: the failing worker left no timestamp (exit %d; see %s)"
                         % (name, code, errfile))
            if code == 0 or (want_code is not None and code != want_code):
                sys.exit("teardown: %s exited %d (see %s)" % (name, code, errfile))
            res.add("teardown", name, end - failed_at)
            res.add("teardown_code", name, code)
            # Leftovers would distort the next run: every worker must be gone.
            left = subprocess.run(["pgrep", "-f", stamp_file], capture_output=True, text=True)
            if left.stdout.strip():
                log("teardown: %s left processes behind: %s" % (name, left.stdout.split()))
                for pid in left.stdout.split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
    log("teardown: load after %s" % load())
    return [(name, argv) for name, argv, _, _ in tools]


# --------------------------------------------------------------------------------------------
# 3. Memory: the launcher's own peak RSS (VmHWM in /proc), sampled while N workers of
#    `sleep HOLD` run, plus GNU time's %M for that run and for the /bin/true launch.

def proc_status(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def children_of(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def bench_memory(args, res, log):
    n = str(args.workers)
    hold = str(args.memory_hold)
    tools = [
        ("mlrun", [args.mlrun, "--nproc_per_node=" + n, "--no_python", "/bin/sleep", hold]),
        ("mpirun", MPIRUN + ["-np", n, "/bin/sleep", hold]),
        (MPIRUN_NOTHREADS_NAME, MPIRUN_NOTHREADS + ["-np", n, "/bin/sleep", hold]),
    ]
    if not args.no_torch:
        tools.append(("torchrun --monitor_interval=0.1",
                      TORCHRUN + ["--nproc_per_node=" + n, "--monitor_interval=0.1",
                                  "--no_python"] + TORCH_FIX + ["/bin/sleep", hold]))
    for _ in range(args.memory_reps):
        for name, argv in tools:
            devnull = open(os.devnull, "wb")
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=devnull, stderr=devnull)
            hwm = 0
            helpers = {}  # non-worker children of the launcher (mlrun's lifeline), pid -> VmHWM
            names = set()
            deadline = time.monotonic() + args.memory_hold + args.timeout
            while p.poll() is None:
                if time.monotonic() > deadline:
                    log("memory: %s: still running, killed" % name)
                    p.kill()
                    p.wait()
                    break
                v = proc_status(p.pid, "VmHWM")
                if v:
                    hwm = max(hwm, v)
                # Helpers (not workers) are looked for once every worker has long exec'd, so a
                # child caught between fork and exec does not count as one.
                settled = time.monotonic() > deadline - args.timeout - 0.2 * args.memory_hold
                own = comm(p.pid)
                for c in (children_of(p.pid) if settled else []):
                    cc = comm(c)
                    if cc and cc not in ("sleep", own):
                        h = proc_status(c, "VmHWM")
                        if h:
                            helpers[c] = max(helpers.get(c, 0), h)
                            names.add(cc)
                time.sleep(0.02)
            devnull.close()
            res.add("memory_vmhwm", name, hwm)
            res.add("memory_helpers", name, sum(helpers.values()))
            res.add("memory_helper_names", name, sorted(names))
    return tools


# --------------------------------------------------------------------------------------------

def gnu_time_maxrss(argv, timeout):
    """GNU time's %M (KiB) for argv: the largest peak RSS among the launcher and the descendants
    it waited for. None without GNU time, or when the launcher hung."""
    if not os.path.exists("/usr/bin/time"):
        return None
    p = subprocess.Popen(["/usr/bin/time", "-f", "MAXRSS=%M"] + argv, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        return None
    m = re.search(r"MAXRSS=(\d+)", err)
    return int(m.group(1)) if m else None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mlrun", required=True)
    ap.add_argument("--raw-spawn", required=True)
    ap.add_argument("--stamp-exit", required=True)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--torch-reps", type=int, default=5,
                    help="repetitions for torchrun --monitor_interval=0.1")
    ap.add_argument("--torch-default-reps", type=int, default=3,
                    help="repetitions for torchrun with its default 5 s monitor interval")
    ap.add_argument("--teardown-workers", type=int, default=8)
    ap.add_argument("--fail-rank", type=int, default=3)
    ap.add_argument("--fail-delay", type=float, default=0.5)
    ap.add_argument("--memory-reps", type=int, default=3)
    ap.add_argument("--memory-hold", type=float, default=3.0,
                    help="seconds each worker sleeps in the memory run")
    ap.add_argument("--timeout", type=float, default=30,
                    help="torchrun still running after this many seconds is killed, counted as hung")
    ap.add_argument("--fast-timeout", type=float, default=5,
                    help="the same for mlrun, mpirun and the raw loop")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--only", choices=["launch", "teardown", "memory"], action="append")
    ap.add_argument("--json", help="write raw samples here")
    args = ap.parse_args()
    args.mlrun = os.path.abspath(args.mlrun)
    args.raw_spawn = os.path.abspath(args.raw_spawn)
    args.stamp_exit = os.path.abspath(args.stamp_exit)
    if not args.no_torch:
        probe = subprocess.run(TORCHRUN[:1] + ["-c", "import torch.distributed.run"],
                               capture_output=True)
        if probe.returncode != 0:
            print("note: torch not importable by /usr/bin/python3; skipping torchrun",
                  file=sys.stderr)
            args.no_torch = True
    only = set(args.only or ["launch", "teardown", "memory"])

    def log(msg):
        print("# " + msg, file=sys.stderr, flush=True)

    res = Results()
    report = []
    def out(line=""):
        report.append(line)
        print(line, flush=True)

    cpus = os.cpu_count()
    out("Machine: %s, %d CPUs, kernel %s; load at start %s; %s" % (
        platform.node() or "?", cpus, platform.release(), load(),
        time.strftime("%Y-%m-%d %H:%M:%S %Z")))
    out()

    with tempfile.TemporaryDirectory(prefix="mlrun-bench-") as workdir:
        if "launch" in only:
            tools = bench_launch(args, res, log)
            L = res.sections["launch"]
            raw = median(L["raw posix_spawn"])
            # The ratio baseline is plain mpirun unless it hung in more than a fifth of its runs;
            # then it is the variant that does not hang.
            done_n = len(L.get("mpirun", []))
            hung_n = len(res.sections.get("launch_hung", {}).get("mpirun", []))
            base = "mpirun" if done_n and hung_n * 5 <= done_n + hung_n else MPIRUN_NOTHREADS_NAME
            mpi = median(L.get(base, []))
            out("## Launch: %d x /bin/true, wall seconds from spawn to exit (median of n)"
                % args.workers)
            out()
            out("| launcher | n | median s | min s | max s | vs raw | vs mpirun | hung "
                "| CPU s, launcher + workers |")
            out("|---|---|---|---|---|---|---|---|---|")
            hung = res.sections.get("launch_hung", {})
            for name, _ in tools:
                xs = L.get(name, [])
                m = median(xs)
                cpu = median(res.sections.get("launch_cpu", {}).get(name, []))
                out("| %s | %d | %s | %s | %s | %s | %s | %d | %.3f |" % (
                    name, len(xs), fmt_s(m), fmt_s(min(xs, default=m)), fmt_s(max(xs, default=m)),
                    fmt_ratio(m / raw), fmt_ratio(m / mpi), len(hung.get(name, [])), cpu))
            out()
            out("\"vs mpirun\" is relative to: %s." % base)
            out()
            out("Commands:")
            for name, argv in tools:
                out("- %s: `%s%s`" % (name, env_prefix(name), " ".join(argv)))
            out()
        if "teardown" in only:
            tools = bench_teardown(args, res, log, workdir)
            T = res.sections["teardown"]
            out("## Teardown: %d workers, rank %d exits 1 after %.1f s, the rest `sleep 60`"
                % (args.teardown_workers, args.fail_rank, args.fail_delay))
            out()
            out("Latency = launcher's exit (harness clock after wait4) - failing worker's "
                "CLOCK_REALTIME stamp just before its exit.")
            out()
            out("| launcher | n | median ms | min ms | max ms | hung | exit code |")
            out("|---|---|---|---|---|---|---|")
            hung = res.sections.get("teardown_hung", {})
            for name, _ in tools:
                xs = [x * 1000 for x in T.get(name, [])]
                codes = sorted(set(res.sections["teardown_code"].get(name, [])))
                m = median(xs)
                out("| %s | %d | %.1f | %.1f | %.1f | %d | %s |" % (
                    name, len(xs), m, min(xs, default=m), max(xs, default=m),
                    len(hung.get(name, [])), ",".join(map(str, codes))))
            out()
            out("Commands (the worker script is shown once):")
            for name, argv in tools:
                out("- %s: `%s%s`" % (name, env_prefix(name),
                                       " ".join(a if " " not in a else "'" + a + "'"
                                                     for a in argv)))
            out()
        if "memory" in only:
            tools = bench_memory(args, res, log)
            V = res.sections["memory_vmhwm"]
            H = res.sections["memory_helpers"]
            out("## Memory: launcher with %d workers of `sleep %g`" % (args.workers,
                                                                       args.memory_hold))
            out()
            launch_argv = dict((name, argv) for name, argv, _ in launch_tools(args))
            out("| launcher | GNU time %%M, %d x /bin/true MiB | GNU time %%M, %d x sleep MiB "
                "| own VmHWM (/proc) MiB | helper processes, VmHWM MiB | vs mpirun |"
                % (args.workers, args.workers))
            out("|---|---|---|---|---|---|")
            rows = []
            for name, argv in tools:
                gt_true = [gnu_time_maxrss(launch_argv[name], timeout_for(args, name))
                           for _ in range(args.memory_reps)]
                gt_true = [x for x in gt_true if x]
                gt_sleep = gnu_time_maxrss(argv, args.memory_hold + args.timeout)
                names = res.sections["memory_helper_names"][name][-1]
                rows.append((name, median(gt_true) / 1024 if gt_true else float("nan"),
                             gt_sleep / 1024 if gt_sleep else float("nan"),
                             median(V[name]) / 1024,
                             ("%.1f (%s)" % (median(H[name]) / 1024, ", ".join(names)))
                             if names else "none"))
            mem = dict((r[0], r[1]) for r in rows)
            mpi_mem = mem["mpirun"] if mem["mpirun"] == mem["mpirun"] else mem[MPIRUN_NOTHREADS_NAME]
            for name, gt_true, gt_sleep, own, helpers in rows:
                out("| %s | %.1f | %.1f | %.1f | %s | %s |" % (
                    name, gt_true, gt_sleep, own, helpers, fmt_ratio(gt_true / mpi_mem)))
            out()
        out("Load at end: %s" % load())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"report": report, "samples": res.sections}, f, indent=1)


if __name__ == "__main__":
    main()
