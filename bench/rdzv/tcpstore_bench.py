#!/usr/bin/python3
"""bench/rdzv: PyTorch's TCPStore (torch 1.13, /usr/bin/python3) doing the rendezvous sequence.

  tcpstore_bench.py server WORLD
      The store's server (is_master=True) alone in this process. Prints "port N", serves until
      stdin closes or reads "quit".
  tcpstore_bench.py client HOST PORT WORLD NRANKS NTHREADS
      NRANKS ranks, each its own TCPStore client (its own connections), driven by NTHREADS Python
      threads (NTHREADS = NRANKS: a thread per rank; fewer: each thread advances its ranks phase
      by phase). On "go" (a line on stdin) every rank does: TCPStore(...) (connect), add("rank",
      1) for a rank, rank 0 set("bench/id", 128 bytes), get("bench/id"), then a barrier from
      add + wait: add("barrier", 1); the arrival that makes it WORLD sets "barrier/done"; every
      rank wait(["barrier/done"]).
      (torch 1.13's own _store_based_barrier polls get() with sleeps; add + wait is faster.)
      Prints "ready N", then "result START END CONNECTED JOINED GOT ERRORS" as rdzv_clients does
      (CLOCK_MONOTONIC nanoseconds).
Every blocking call is bounded (120 s).
"""

import datetime
import os
import resource
import sys
import threading
import time

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=120)
ID = bytes((i * 7 + 3) % 256 for i in range(128))


def raise_nofile():
    want = 1 << 17
    try:  # root may raise the hard limit too: TCPStore 1.13 holds two connections per client
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server(world):
    raise_nofile()
    store = dist.TCPStore("127.0.0.1", 0, world, True, TIMEOUT, wait_for_workers=False)
    print(f"port {store.port}", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
    del store


def client(host, port, world, nranks, nthreads):
    raise_nofile()
    threading.stack_size(256 * 1024)
    nthreads = max(1, min(nthreads, nranks))
    go = threading.Event()
    stamps = []
    errors = []
    lock = threading.Lock()

    def thread_main(k):
        # This thread's ranks, advanced phase by phase (connect all, add all, ...): a blocking
        # get or wait only waits for ranks that are already past the step it depends on.
        go.wait(300)
        try:
            t0 = time.monotonic_ns()
            stores = [dist.TCPStore(host, port, world, False, TIMEOUT, wait_for_workers=False)
                      for _ in range(k)]
            t1 = time.monotonic_ns()
            ranks = [s.add("rank", 1) - 1 for s in stores]
            t2 = time.monotonic_ns()
            for s, r in zip(stores, ranks):
                if r == 0:
                    s.set("bench/id", ID)
            for s in stores:
                if s.get("bench/id") != ID:
                    raise RuntimeError("wrong id bytes")
            t3 = time.monotonic_ns()
            for s in stores:
                if s.add("barrier", 1) == world:
                    s.set("barrier/done", b"1")
            for s in stores:
                s.wait(["barrier/done"])
            t4 = time.monotonic_ns()
            with lock:
                stamps.append((t0, t4, t1, t2, t3, k))
            del stores
        except Exception as e:  # noqa: BLE001 -- counted and reported
            with lock:
                errors.append(repr(e))

    threads = []
    for i in range(nthreads):
        k = nranks * (i + 1) // nthreads - nranks * i // nthreads
        t = threading.Thread(target=thread_main, args=(k,), daemon=True)
        try:
            t.start()
        except RuntimeError as e:
            errors.append(f"thread start: {e}")
            break
        threads.append(t)
    print(f"ready {len(threads)}", flush=True)
    sys.stdin.readline()
    go.set()
    deadline = time.monotonic() + 600
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        done = list(stamps)
        errs = list(errors)
    if errs:
        print(f"tcpstore_bench: {len(errs)} errors, first: {errs[0]}", file=sys.stderr)
    start = min((s[0] for s in done), default=0)
    end, conn, joined, got = (max((s[k] for s in done), default=0) for k in (1, 2, 3, 4))
    failed = nranks - sum(s[5] for s in done)
    print(f"result {start} {end} {conn} {joined} {got} {failed}", flush=True)
    # Daemon threads still inside TCPStore calls must not block the exit.
    os._exit(0 if failed == 0 else 1)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "server":
        server(int(sys.argv[2]))
    elif len(sys.argv) == 7 and sys.argv[1] == "client":
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
