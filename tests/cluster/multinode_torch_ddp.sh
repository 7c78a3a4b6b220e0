#!/usr/bin/env bash
# The PyTorch DDP example (Gloo on CPU) across all 3 hosts from one command: 2 ranks per host,
# identical parameters on every rank ("ddp ok"), exit 0, nothing left on any host.
source "$(dirname "$0")/multinode_lib.sh"
need_torch
# The script under $T, so that its argv carries the marker.
cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
run_mlrun -H host1:2,host2:2,host3:2 "$T/torch_ddp.py" --steps 5
expect_rc 0
expect_grep "$T/out" '^\[0\] ddp ok: 6 ranks, 5 steps'
assert_no_job_left 15
echo "ok: $(grep -o 'ddp ok.*' "$T/out")"
