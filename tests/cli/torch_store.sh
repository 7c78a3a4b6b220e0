# --store mlrun with real torch 1.13 (Debian's python3-torch): mlrun's server is the TCPStore.
# Three workers, --max_restarts 1: attempt 0 writes a key straight to MASTER_ADDR:MASTER_PORT
# and fails; attempt 1 sees none of attempt 0's keys, runs Gloo with new_group and DDP, and finds
# nothing but mlrun listening on MASTER_PORT (tests/cli/torch_store_worker.py).
source "$(dirname "$0")/common.sh"

torch_store_setup
PYTHON=$PY run_mlrun --nproc_per_node=3 --max_restarts=1 "$T/worker.py"
[ "$RC" -eq 0 ] || fail "exit code $RC: $(tail -n 20 "$T/err")"
expect_grep "$T/out" '^\[1\] attempt 0: rank 1 fails on purpose$'
expect_grep "$T/out" '^\[0\] store ok: torch 1\.13.*, 3 ranks, attempt 1, MASTER_PORT [0-9]+ served by mlrun$'
# --store torch keeps PyTorch's own store on rank 0: the DDP example still trains.
cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
PYTHON=$PY run_mlrun --store torch --nproc_per_node=2 "$T/torch_ddp.py" --steps 3
[ "$RC" -eq 0 ] || fail "--store torch: exit code $RC: $(tail -n 20 "$T/err")"
expect_grep "$T/out" '^\[0\] ddp ok: 2 ranks'
assert_no_marker_left 10
echo PASS
