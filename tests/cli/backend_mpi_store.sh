# --backend mpi with --store mlrun (the default) and real torch 1.13 (Debian's python3-torch):
# mlrun serves mpirun's ranks their TCPStore. Two ranks, --max_restarts 1: attempt 0 writes a key
# straight to MASTER_ADDR:MASTER_PORT and fails; attempt 1 sees none of attempt 0's keys, runs
# Gloo (env://) with new_group and DDP, and finds nothing but mlrun listening on MASTER_PORT
# (tests/cli/torch_store_worker.py). --store torch keeps PyTorch's store in rank 0.
source "$(dirname "$0")/common.sh"

command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
torch_store_setup

# 1. --dry-run says which store, and starts nothing.
run_mlrun --dry-run --backend mpi -np 2 --no_python "$PY" "$T/worker.py"
[ "$RC" -eq 0 ] || fail "--dry-run: exit code $RC"
expect_grep "$T/out" "^store: --store mlrun: mlrun's rendezvous server is PyTorch's TCPStore .*; served by this launcher, passed to every rank with mpirun -x$"

# 2. A host whose name does not resolve cannot be let into the store: a clear error, nothing runs.
run_mlrun --backend mpi -H nosuchhost.invalid:1 --no_python /bin/true
[ "$RC" -eq 1 ] || fail "an unresolvable host: exit code $RC, want 1"
expect_grep "$T/err" "^mlrun: error: --backend mpi: cannot serve the ranks' TCPStore \(--store mlrun\): host nosuchhost\.invalid does not resolve here"

# 3. The store is mlrun's: fresh keys per attempt, nobody of the job on MASTER_PORT.
run_mlrun --backend mpi -np 2 --max_restarts 1 --no_python "$PY" "$T/worker.py"
[ "$RC" -eq 0 ] || fail "exit code $RC: $(tail -n 20 "$T/err")"
expect_grep "$T/out" '^\[1\] attempt 0: rank 1 fails on purpose$'
expect_grep "$T/err" '^mlrun: restarting mpirun \(1 of 1 restarts\)$'
expect_grep "$T/out" '^\[0\] store ok: torch 1\.13.*, 2 ranks, attempt 1, MASTER_PORT [0-9]+ served by mlrun$'

# 4. --store torch: rank 0 serves PyTorch's own store; the DDP example still trains.
cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
cat >"$T/ddp.sh" <<'SH'
[ "$TORCHELASTIC_USE_AGENT_STORE" = False ] || { echo "agent store: $TORCHELASTIC_USE_AGENT_STORE"; exit 3; }
export RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK
exec "$@"
SH
run_mlrun --store torch --backend mpi -np 2 --no_python /bin/sh "$T/ddp.sh" "$PY" "$T/torch_ddp.py" --steps 3
[ "$RC" -eq 0 ] || fail "--store torch: exit code $RC: $(tail -n 20 "$T/err")"
expect_grep "$T/out" '^\[0\] ddp ok: 2 ranks'
assert_no_marker_left 10
echo PASS
