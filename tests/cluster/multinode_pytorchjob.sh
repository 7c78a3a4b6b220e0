#!/usr/bin/env bash
# A Kubeflow PyTorchJob-style launch: each host runs `mlrun train.py` with nothing on the command
# line but the script, configured only by the PET_* variables the operator sets for torchrun
# (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT). The DDP
# example trains across the 3 hosts and every rank is where the node ranks put it.
source "$(dirname "$0")/multinode_lib.sh"
need_torch
cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
# train.py: records where each rank landed, then runs the DDP example.
cat >"$T/train.py" <<PY
import os, runpy, socket, sys
with open(os.path.join("$T", "rank." + os.environ["RANK"]), "w") as f:
    f.write("host=%s rank=%s local=%s world=%s group=%s\n" % (socket.gethostname(),
            os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"],
            os.environ["GROUP_RANK"]))
sys.argv = ["torch_ddp.py", "--steps", "3"]
runpy.run_path(os.path.join("$T", "torch_ddp.py"), run_name="__main__")
PY
port=$(random_port)
for i in 1 2 3; do
  PET_NNODES=3 PET_NPROC_PER_NODE=2 PET_NODE_RANK=$((i - 1)) PET_MASTER_ADDR=$NET.11 \
    PET_MASTER_PORT="$port" start_mlrun_on "$i" "$T/train.py"
done
wait_nodes "PET_* launch" 1 2 3
cat "$T"/node*.out >"$T/out"
expect_grep "$T/out" '^\[0\] ddp ok: 6 ranks, 3 steps'
for r in 0 1 2 3 4 5; do
  h=$((r / 2 + 1))
  want="host=host$h rank=$r local=$((r % 2)) world=6 group=$((h - 1))"
  [ "$(cat "$T/rank.$r" 2>/dev/null)" = "$want" ] || fail "rank $r: '$(cat "$T/rank.$r" 2>/dev/null)', want '$want'"
done
assert_no_job_left 15
echo "ok: PET_*-only launch on 3 hosts: $(grep -o 'ddp ok.*' "$T/out")"
