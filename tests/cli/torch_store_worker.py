"""A worker for the --store mlrun tests (torch 1.13, and torch 2.x in a chroot).

Attempt 0 (TORCHELASTIC_RESTART_COUNT=0) writes a key straight to MASTER_ADDR:MASTER_PORT with a
TCPStore client of its own (no PrefixStore: the key space must be fresh without the client's
prefix), every rank sees it, and rank 1 fails. Attempt 1 checks that the key is gone, then runs
a Gloo process group with a subgroup (new_group) and a small DDP step, and rank 0 checks that
nothing of the job listens on MASTER_PORT but mlrun. Prints "store ok" from rank 0.

Under --backend mpi (MLRUN_BACKEND=mpi) mpirun's ranks take RANK, LOCAL_RANK from Open MPI's
OMPI_COMM_WORLD_* (docs/backends.md), and mlrun is the grandparent (mpirun is the parent).
"""
import datetime
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

if os.environ.get("MLRUN_BACKEND") == "mpi":
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
ATTEMPT = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
ADDR, PORT = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
# Debian's torch 2.6 is built without libuv: every TCPStore needs use_libuv=False, also the one
# env:// init makes, so the test patches that in (and nothing else; torch 1.13 has no such
# argument).
STORE_KW = {"use_libuv": False} if torch.__version__ >= "2" else {}
if STORE_KW:
    import importlib

    # The module, not torch.distributed's function of the same name.
    _rendezvous = importlib.import_module("torch.distributed.rendezvous")

    _tcp_store = _rendezvous.TCPStore
    _rendezvous.TCPStore = lambda *a, **k: _tcp_store(*a, **{**k, **STORE_KW})


def check(cond, what):
    if not cond:
        print(f"rank {RANK} attempt {ATTEMPT}: FAILED: {what}", flush=True)
        sys.exit(3)


def raw_store():
    return dist.TCPStore(ADDR, PORT, None, False, datetime.timedelta(seconds=30), **STORE_KW)


def listeners(port):
    """pids listening on port, from ss (torch 1.13 host) or None where ss is missing."""
    try:
        out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {int(p.split("=")[1]) for p in out.replace(",", " ").replace(")", " ").split()
            if p.startswith("pid=")}


def main():
    check(os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
          "TORCHELASTIC_USE_AGENT_STORE is not True")
    store = raw_store()
    if ATTEMPT == 0:
        if RANK == 0:
            store.set("leak/attempt0", "stale")
        store.wait(["leak/attempt0"], datetime.timedelta(seconds=30))
        store.add("seen", 1)
        if RANK == 1:
            # Every rank has seen the key before this one fails.
            while int(store.add("seen", 0)) < WORLD:
                time.sleep(0.01)
            print("attempt 0: rank 1 fails on purpose", flush=True)
            sys.exit(1)
        store.wait(["never"], datetime.timedelta(seconds=60))  # stopped by the failure
        return
    try:
        store.wait(["leak/attempt0"], datetime.timedelta(seconds=1))
        check(False, "attempt 1 sees attempt 0's key leak/attempt0")
    except RuntimeError:
        pass
    check(int(store.add("seen", 0)) == 0, "attempt 1 sees attempt 0's counter")

    dist.init_process_group("gloo", init_method="env://")
    sub = dist.new_group([0, 1])
    t = torch.tensor([float(RANK + 1)])
    if RANK in (0, 1):
        dist.all_reduce(t, group=sub)
        check(t.item() == 3.0, f"subgroup all_reduce gave {t.item()}")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()
    dist.barrier()
    if RANK == 0:
        pids = listeners(PORT)
        if pids is not None:
            mlrun = os.getppid()
            if os.environ.get("MLRUN_BACKEND") == "mpi":
                with open(f"/proc/{mlrun}/stat") as f:
                    mlrun = int(f.read().rsplit(")", 1)[1].split()[1])
            check(pids == {mlrun},
                  f"MASTER_PORT {PORT} is listened on by {pids}, not only mlrun ({mlrun})")
        print(f"store ok: torch {torch.__version__}, {WORLD} ranks, attempt {ATTEMPT}, "
              f"MASTER_PORT {PORT} served by mlrun"
              f"{'' if pids is not None else ' (listener not checked: no ss)'}", flush=True)
    del model
    dist.destroy_process_group()


main()
