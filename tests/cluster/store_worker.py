"""A TCPStore client worker for the cluster tests of mlrun's store (--store mlrun).

Every rank sets its key and waits for every other's at MASTER_ADDR:MASTER_PORT; rank 0 writes
"ADDR PORT" to DIR/master, then every rank waits (at most 60 s) for DIR/go and prints
"worker RANK on HOST served by the store". RANK is OMPI_COMM_WORLD_RANK under --backend mpi.
Usage: store_worker.py DIR
"""
import datetime
import os
import sys
import time

from torch.distributed import TCPStore

assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True", "not mlrun's store"
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
rank = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))
s = TCPStore(addr, port, None, False, datetime.timedelta(seconds=30))
s.set(f"worker/{rank}", "here")
s.wait([f"worker/{r}" for r in range(int(os.environ["WORLD_SIZE"]))])
if rank == "0":
    with open(os.path.join(sys.argv[1], "master.tmp"), "w") as f:
        f.write(f"{addr} {port}\n")
    os.rename(os.path.join(sys.argv[1], "master.tmp"), os.path.join(sys.argv[1], "master"))
deadline = time.time() + 60
while not os.path.exists(os.path.join(sys.argv[1], "go")) and time.time() < deadline:
    time.sleep(0.05)
print(f"worker {rank} on {os.uname().nodename} served by the store", flush=True)
