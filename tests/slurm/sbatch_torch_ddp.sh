#!/usr/bin/env bash
# The PyTorch DDP example (Gloo on CPU, /usr/bin/python3) in an `sbatch -N3` script whose one
# command is mlrun with no host flags: the batch script runs on sn01, mlrun starts an agent on
# each of the 3 nodes through srun, 2 ranks a node; identical parameters on all 6 ranks.
source "$(dirname "$0")/lib.sh"
PYTHON=/usr/bin/python3
"$PYTHON" -c 'import torch, torch.distributed' 2>/dev/null ||
  { echo "SKIP: $PYTHON cannot import torch (apt-get install python3-torch)"; exit 77; }
cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
cat >"$T/job.sh" <<SH
#!/bin/sh
export PYTHON=$PYTHON
exec "$MLRUN" --nproc_per_node=2 "$T/torch_ddp.py" --steps 5
SH
rc=0
in_t timeout 180 sbatch -N3 -J "$MARKER" -t 3 --wait -o "$T/out" -D "$T" "$T/job.sh" >/dev/null || rc=$?
[ $rc -eq 0 ] || fail "the batch job failed ($rc): $(cat "$T/out")"
expect_grep "$T/out" '^\[0\] ddp ok: 6 ranks, 5 steps'
assert_no_job_left 15
echo "ok: $(grep -o 'ddp ok.*' "$T/out")"
