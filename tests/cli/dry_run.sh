# --dry-run prints the plan (ranks, command, environment) and starts nothing.
source "$(dirname "$0")/common.sh"

write_worker worker.sh 'touch "$T/started.$$"; "$T/sleep" 1000'

run_mlrun --dry-run --nproc_per_node=2 --role trainer -x DRY_VAR=yes "$T/worker.sh" --arg
expect_rc 0
expect_grep "$T/out" '^mlrun: dry run: 1 node, 2 workers, world size 2, backend (gloo|nccl)$'
expect_line "$T/out" "  rank 0 (local rank 0): $T/worker.sh --arg"
expect_line "$T/out" "  rank 1 (local rank 1): $T/worker.sh --arg"
for var in RANK=0 RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 ROLE_NAME=trainer \
  MASTER_ADDR=127.0.0.1 TORCHELASTIC_RESTART_COUNT=0 OMP_NUM_THREADS=1 DRY_VAR=yes; do
  expect_line "$T/out" "    $var"
done
expect_line "$T/out" '    MASTER_PORT=(chosen at launch)'
expect_grep "$T/out" '^    MLRUN_JOB_ID=.+$'
# Nothing started, and nothing is left.
sleep 0.5
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "--dry-run started a worker"
assert_no_marker_left 5

# The other spelling, and a .py under Python: the plan shows the interpreter.
printf 'print("hi")\n' >"$T/train.py"
PYTHON=/usr/bin/python3 run_mlrun --dry_run "$T/train.py"
expect_rc 0
expect_line "$T/out" "  rank 0 (local rank 0): /usr/bin/python3 -u $T/train.py"
! grep -q '^hi' "$T/out" || fail "--dry_run ran the program"

# torchrun's PET_<OPTION> variables fill what the command line leaves out (a PyTorchJob pod);
# flags win, and the plan says where each value came from.
PET_NNODES=2 PET_NODE_RANK=1 PET_NPROC_PER_NODE=8 PET_MASTER_ADDR=10.1.2.3 PET_ROLE=pet \
  run_mlrun --dry-run --nproc-per-node=2 "$T/worker.sh"
expect_rc 0
expect_grep "$T/out" '^  --nproc_per_node=2 +from command line$'
expect_grep "$T/out" '^  --nnodes=2 +from PET_NNODES$'
expect_grep "$T/out" '^  --node_rank=1 +from PET_NODE_RANK$'
expect_grep "$T/out" '^  --master_addr=10.1.2.3 +from PET_MASTER_ADDR$'
! grep -q 'PET_NPROC_PER_NODE' "$T/out" || fail "PET_NPROC_PER_NODE won over --nproc-per-node"
expect_grep "$T/out" '^node 1 \(.*\): ranks 2-3, '
for var in RANK=2 RANK=3 WORLD_SIZE=4 GROUP_RANK=1 MASTER_ADDR=10.1.2.3 ROLE_NAME=pet; do
  expect_line "$T/out" "    $var"
done
PET_MASTER_PORT=70000 run_mlrun --dry-run "$T/worker.sh"
expect_rc 2
expect_grep "$T/err" "^mlrun: error: --master_port=70000: .*\(from PET_MASTER_PORT\)$"

# torchrun 2.x's plugin options are accepted, with a note of what mlrun does instead.
run_mlrun --dry-run --logs-specs=mine --event_log_handler=console "$T/worker.sh"
expect_rc 0
expect_grep "$T/err" "^mlrun: note: --logs_specs=mine: .*--log_dir"
expect_grep "$T/err" "^mlrun: note: --event_log_handler=console: .*TORCHELASTIC_ERROR_FILE"

# Past --tree_width hosts over SSH the plan says which host starts each node's agent: a radix
# tree, node i starting nodes (i+1)*w .. (i+1)*w+w-1 (docs/multinode.md "The launch tree").
run_mlrun --dry-run --tree_width 2 -H n1,n2,n3,n4,n5 "$T/worker.sh"
expect_rc 0
expect_line "$T/out" "launch tree: 2 wide, 2 levels of agents"
expect_line "$T/out" "node 0 (n1): ranks 0-0, agent over SSH"
expect_line "$T/out" "node 1 (n2): ranks 1-1, agent over SSH"
expect_line "$T/out" "node 2 (n3): ranks 2-2, agent over SSH from n1"
expect_line "$T/out" "node 3 (n4): ranks 3-3, agent over SSH from n1"
expect_line "$T/out" "node 4 (n5): ranks 4-4, agent over SSH from n2"
# At most --tree_width hosts: flat, as before.
run_mlrun --dry-run --tree_width 5 -H n1,n2,n3,n4,n5 "$T/worker.sh"
expect_rc 0
! grep -q 'launch tree\|from n' "$T/out" || fail "5 hosts at --tree_width 5 made a tree"
run_mlrun --dry-run --tree_width 1 -H n1,n2 "$T/worker.sh"
expect_rc 2
expect_grep "$T/err" "tree_width"

# Planning loads NCCL (a dlopen of hundreds of MB, on every agent before it joins) only where it
# decides the backend: --backend auto on a node with a GPU. (Fails on the old code only where
# libnccl.so.2 is installed.)
for backend in gloo auto; do
  RC=0
  LD_DEBUG=files "$MLRUN" --dry-run --backend "$backend" --nproc_per_node 1 "$T/worker.sh" \
    >"$T/out" 2>"$T/err" || RC=$?
  expect_rc 0
  if [ "$backend" = gloo ] || ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    ! grep -q 'libnccl' "$T/err" || fail "--backend $backend: planning loaded $(grep -m1 libnccl "$T/err")"
  fi
done

# A hostfile's plan counts its nodes: one host named twice is one node with both lines' slots.
printf 'nodeA slots=2\n\n# a comment\nnodeA slots=2\n' >"$T/hosts1"
printf 'nodeA slots=1\nnodeB slots=1\n' >"$T/hosts2"
run_mlrun --dry-run --hostfile "$T/hosts1" "$T/worker.sh"
expect_rc 0
expect_grep "$T/out" '^mlrun: dry run: 1 node, world size 4, backend '
run_mlrun --dry-run --hostfile "$T/hosts2" "$T/worker.sh"
expect_rc 0
expect_grep "$T/out" '^mlrun: dry run: 2 nodes, world size 2, backend '

# Errors are still errors in a dry run.
run_mlrun --dry-run "$T/missing.sh"
expect_rc 2
expect_grep "$T/err" "^mlrun: error: .*missing.sh"
echo PASS
