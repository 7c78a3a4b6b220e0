#!/usr/bin/env bash
# PyTorch DDP (Gloo, CPU) under --nnodes=1:2 --max_restarts=1 on 2 hosts: the job checkpoints
# every step to a file both hosts see; rank 1 dies once; every node restarts, the job resumes
# from the checkpoint and ends at exactly STEPS steps, no step done twice after its checkpoint.
source "$(dirname "$0")/elastic_lib.sh"
"${PYTHON:-python3}" -c 'import torch' 2>/dev/null || { echo "SKIP: no torch"; exit 77; }
cp "$SRC/tests/cluster/elastic_ddp_train.py" "$T/train.py"
export STEPS=12 FAIL_AT=5 CKPT="$T/ckpt.pt"
start_node 1 1:2 --nproc_per_node=1 --max_restarts=1 "$T/train.py"
start_node 2 1:2 --nproc_per_node=1 --max_restarts=1 "$T/train.py"
for i in 1 2; do
  wait_node "$i" 200
  [ "$RC" -eq 0 ] || fail "the node on host$i exited $RC"
done
gather
expect_grep "$T/out" 'restarting every node.s workers \(1 of 1 restarts\)'
expect_grep "$T/out" '"final_step": 12, "restart": 1, "world": 2, "resumed_from": 5'
# The checkpoint log: steps 0-4 in attempt 0, 5-11 in attempt 1, each once.
want=$(for s in 0 1 2 3 4; do echo "0 $s"; done; for s in 5 6 7 8 9 10 11; do echo "1 $s"; done)
[ "$(cat "$T/ckpt.pt.log")" = "$want" ] || fail "checkpointed steps: $(paste -sd, "$T/ckpt.pt.log")"
assert_no_job_left 15
echo "ok: DDP resumed from its checkpoint after a restart and ended at step 12"
