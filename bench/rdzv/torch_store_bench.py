#!/usr/bin/python3
"""bench/rdzv: real torch 1.13 TCPStore clients doing Gloo's init pattern against PyTorch's own
TCPStore server and against mlrun's server (`mlrun rdzv --torch-store`), same clients, same run.

  torch_store_bench.py --mlrun BUILD/mlrun [--gloo-clients BUILD/bench/rdzv/gloo_clients]
                       [--mlrun-old OLD/mlrun] [--systems torch,mlrun,...]
                       [--worlds 1024,4096] [--reps 3] [--procs 4] [--threads 32]
                       [--barrier torch1.13|torch2] [--json FILE]
  torch_store_bench.py client HOST PORT WORLD FIRST NRANKS NTHREADS BARRIER   (one client process)

Each rank is its own TCPStore client (torch 1.13 opens two connections per client). Its part:
  1. SET its own key (136 bytes, the size of a Gloo address);
  2. WAIT + GET the keys of its two ring neighbours (r-1, r+1);
  3. a store barrier, as torch 1.13's _store_based_barrier does it (--barrier torch1.13, the
     default): ADD(key, 1), then ADD(key, 0) polled every 10 ms until it reaches WORLD; or as
     torch 2.x's does it (--barrier torch2): ADD(key, 1), ADD(key, 0), the rank that reads WORLD
     SETs key:last_worker, and every rank WAITs for that key (no polling).
NTHREADS Python threads per process each drive their ranks phase by phase (a blocking WAIT only
waits for ranks already past the SET phase). Wall: first connect to last barrier exit
(CLOCK_MONOTONIC stamps from the clients). Each run of the Python clients also prints when the
last rank left each phase (connect, SET, WAIT+GET, ADD 1; the rest to the wall is the polling
barrier), to show where the time goes. The systems alternate per repetition; each run gets a
fresh server process. Client process p connects to 127.0.0.(p+1) (both servers listen on every
address), as bench/rdzv/bench.py does.

With --gloo-clients, two more systems run the same pattern against mlrun's server from C++
clients (bench/rdzv/gloo_clients.cc, a thread per rank), to compare the wire protocols with the
client language taken out: "tcpstore-c++" (torch 1.13's TCPStore protocol, both connections) and
"mlrun-own" (mlrun's own protocol through its client library).
"""
import argparse
import datetime
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 120
VALUE = bytes(136)


def raise_nofile():
    want = 1 << 17
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def client(host, port, world, first, nranks, nthreads, barrier):
    import torch.distributed as dist

    raise_nofile()
    threading.stack_size(256 * 1024)
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    go = threading.Event()
    stamps, errors, lock = [], [], threading.Lock()

    def run(ranks):
        go.wait(300)
        try:
            t0 = time.monotonic_ns()
            stores = [dist.TCPStore(host, port, world, False, timeout, wait_for_workers=False)
                      for _ in ranks]
            t_conn = time.monotonic_ns()
            for s, r in zip(stores, ranks):
                s.set(f"gloo/{r}", VALUE)
            t_set = time.monotonic_ns()
            for s, r in zip(stores, ranks):
                for peer in ((r - 1) % world, (r + 1) % world):
                    s.wait([f"gloo/{peer}"])
                    if len(s.get(f"gloo/{peer}")) != len(VALUE):
                        raise RuntimeError("wrong value")
            t_wait = time.monotonic_ns()
            for s in stores:
                s.add("barrier", 1)
            t_add = time.monotonic_ns()
            if barrier == "torch2":
                for s in stores:
                    if s.add("barrier", 0) == world:
                        s.set("barrier:last_worker", "1")
                for s in stores:
                    s.wait(["barrier:last_worker"])
            else:
                left = list(stores)
                while left:
                    left = [s for s in left if s.add("barrier", 0) < world]
                    if left:
                        time.sleep(0.01)
            t1 = time.monotonic_ns()
            with lock:
                stamps.append((t0, t1, len(ranks), t_conn, t_set, t_wait, t_add))
            del stores
        except Exception as e:  # noqa: BLE001 -- counted and reported
            with lock:
                errors.append(repr(e))

    threads = []
    for i in range(nthreads):
        lo, hi = first + nranks * i // nthreads, first + nranks * (i + 1) // nthreads
        t = threading.Thread(target=run, args=(list(range(lo, hi)),), daemon=True)
        t.start()
        threads.append(t)
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    deadline = time.monotonic() + 600
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if errors:
        print(f"torch_store_bench: {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    start = min((s[0] for s in stamps), default=0)
    end = max((s[1] for s in stamps), default=0)
    failed = nranks - sum(s[2] for s in stamps)
    # When this process's last thread finished each phase (connect, SET, WAIT+GET, ADD 1).
    phases = " ".join(str(max((s[i] for s in stamps), default=0)) for i in range(3, 7))
    print(f"result {start} {end} {failed} {phases}", flush=True)
    os._exit(0 if failed == 0 else 1)


def start_server(kind, mlrun, world, token):
    """(process, port) of a fresh server: "torch" (PyTorch's, is_master) or mlrun's (the binary
    mlrun)."""
    if kind == "torch":
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "tcpstore_bench.py"), "server",
                              str(world)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().split()
        return p, int(line[1])
    env = dict(os.environ, MLRUN_RDZV_TOKEN=token)
    p = subprocess.Popen([mlrun, "rdzv", "--torch-store", "--host", "0.0.0.0", "--port", "0"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, text=True)
    return p, int(p.stdout.readline().strip().rsplit(":", 1)[1])


def stop_server(kind, p):
    if kind == "torch":
        p.stdin.write("quit\n")
        p.stdin.close()
    else:
        p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def one_run(kind, args, world):
    token = secrets.token_hex(16)
    binary = args.mlrun_old if kind == "mlrun-old" else args.mlrun
    server, port = start_server("torch" if kind == "torch" else "mlrun", binary, world, token)
    try:
        clients = []
        for i in range(args.procs):
            lo, hi = world * i // args.procs, world * (i + 1) // args.procs
            if kind in ("torch", "mlrun", "mlrun-old"):
                argv = [sys.executable, os.path.abspath(__file__), "client", f"127.0.0.{i + 1}",
                        str(port), str(world), str(lo), str(hi - lo), str(args.threads),
                        args.barrier]
            else:
                argv = [args.gloo_clients, "torch113" if kind == "tcpstore-c++" else "mlrun",
                        f"127.0.0.{i + 1}", str(port), token, str(world), str(hi - lo), str(lo)]
            clients.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True))
        for c in clients:
            if c.stdout.readline().strip() != "ready":
                raise RuntimeError("a client process did not start")
        for c in clients:
            c.stdin.write("go\n")
            c.stdin.flush()
        results = [c.stdout.readline().split() for c in clients]
        for c in clients:
            c.wait(60)
        good = [r for r in results if len(r) in (4, 8) and r[0] == "result"]
        failed = sum(int(r[3]) for r in good) + len(results) - len(good)
        start = min(int(r[1]) for r in good)
        end = max(int(r[2]) for r in good)
        # Python clients: seconds from the start until the last rank left each phase.
        phases = ([round((max(int(r[i]) for r in good) - start) / 1e9, 3) for i in range(4, 8)]
                  if all(len(r) == 8 for r in good) else None)
        return (end - start) / 1e9, failed, phases
    finally:
        stop_server(kind, server)


def main():
    if len(sys.argv) == 9 and sys.argv[1] == "client":
        a = sys.argv[2:]
        client(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]), a[6])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlrun", required=True)
    ap.add_argument("--worlds", default="1024,4096")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--barrier", choices=("torch1.13", "torch2"), default="torch1.13",
                    help="the store barrier's form: torch 1.13's polling ADD (default) or torch "
                    "2.x's ADD then WAIT for the last worker's key")
    ap.add_argument("--gloo-clients")
    ap.add_argument("--mlrun-old", help="a second mlrun binary (e.g. main's), run as system "
                    "mlrun-old with the same Python clients: old and new server side by side")
    ap.add_argument("--systems", help="comma-separated subset of the systems to run")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.gloo_clients and args.barrier != "torch1.13":
        ap.error("--gloo-clients: the C++ clients do torch 1.13's polling barrier only")
    raise_nofile()
    kinds = (["torch", "mlrun"] + (["mlrun-old"] if args.mlrun_old else []) +
             (["tcpstore-c++", "mlrun-own"] if args.gloo_clients else []))
    if args.systems:
        wanted = args.systems.split(",")
        unknown = [k for k in wanted if k not in kinds]
        if unknown:
            ap.error(f"--systems: {','.join(unknown)} not among {','.join(kinds)} (mlrun-old "
                     "needs --mlrun-old, the C++ systems --gloo-clients)")
        kinds = [k for k in kinds if k in wanted]
    out = {}
    for world in (int(w) for w in args.worlds.split(",")):
        times = {k: [] for k in kinds}
        for rep in range(args.reps):
            for kind in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:
                wall, failed, phases = one_run(kind, args, world)
                split = (" (last rank connected {}, SET {}, WAIT+GET {}, ADD 1 {} s)"
                         .format(*phases) if phases else "")
                print(f"W={world} {kind} rep {rep}: {wall:.3f} s, {failed} failed{split}",
                      flush=True)
                if failed == 0:
                    times[kind].append(wall)
        med = {k: statistics.median(v) if v else None for k, v in times.items()}

        def ratio(a, b):
            return round(med[a] / med[b], 2) if med.get(a) and med.get(b) else None

        ratios = {"torch/mlrun": ratio("torch", "mlrun"),
                  "torch/mlrun-old": ratio("torch", "mlrun-old"),
                  "mlrun-old/mlrun": ratio("mlrun-old", "mlrun"),
                  "tcpstore-c++/mlrun-own": ratio("tcpstore-c++", "mlrun-own")}
        print(f"W={world}: medians {med}; ratios {ratios}", flush=True)
        out[world] = {"runs": times, "median": med, "ratios": ratios}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
