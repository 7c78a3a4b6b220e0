# The GPUs a node is given become its workers' CUDA_VISIBLE_DEVICES, so LOCAL_RANK i uses the i-th
# of them (DeepSpeed's --include host:1,3, --num_gpus; an inherited CUDA_VISIBLE_DEVICES as Slurm
# sets it narrows what the indices mean); torchrun's --virtual_local_rank gives each worker its own
# GPU as device 0 with LOCAL_RANK=0.
source "$(dirname "$0")/common.sh"
write_worker report.sh 'echo "rank=$RANK local=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES" >"$T/gpu.$RANK"'
seen() { cat "$T/gpu.$1" 2>/dev/null; }

run_mlrun -H localhost:4 --include localhost:1,3 "$T/report.sh"
expect_rc 0
[ "$(seen 0)" = "rank=0 local=0 cvd=1,3" ] || fail "--include localhost:1,3: rank 0 saw '$(seen 0)'"
[ "$(seen 1)" = "rank=1 local=1 cvd=1,3" ] || fail "--include localhost:1,3: rank 1 saw '$(seen 1)'"
[ ! -e "$T/gpu.2" ] || fail "--include localhost:1,3 started a third worker"

# Slurm gave this node GPUs 4-7: index 1 and 3 are its second and fourth.
rm -f "$T"/gpu.*
CUDA_VISIBLE_DEVICES=4,5,6,7 run_mlrun -H localhost:4 --include localhost:1,3 "$T/report.sh"
expect_rc 0
[ "$(seen 1)" = "rank=1 local=1 cvd=5,7" ] || fail "inherited list: rank 1 saw '$(seen 1)'"
CUDA_VISIBLE_DEVICES=4,5 run_mlrun -H localhost:4 --include localhost:1,3 "$T/report.sh"
expect_rc 2
expect_grep "$T/err" "GPU 3 was asked for, but CUDA_VISIBLE_DEVICES=4,5 leaves this node 2 GPUs"

# --virtual_local_rank: each worker sees its GPU alone, as device 0.
rm -f "$T"/gpu.*
run_mlrun -H localhost:4 --include localhost:1,3 --virtual_local_rank "$T/report.sh"
expect_rc 0
[ "$(seen 0)" = "rank=0 local=0 cvd=1" ] || fail "virtual: rank 0 saw '$(seen 0)'"
[ "$(seen 1)" = "rank=1 local=0 cvd=3" ] || fail "virtual: rank 1 saw '$(seen 1)'"
rm -f "$T"/gpu.*
CUDA_VISIBLE_DEVICES=6,7 run_mlrun --nproc_per_node=2 --virtual-local-rank "$T/report.sh"
expect_rc 0
[ "$(seen 1)" = "rank=1 local=0 cvd=7" ] || fail "virtual, inherited: rank 1 saw '$(seen 1)'"

# DeepSpeed's --num_gpus: that many workers on GPUs 0..N-1; refused with --include, as there.
rm -f "$T"/gpu.*
run_mlrun --num_gpus=2 "$T/report.sh"
expect_rc 0
[ "$(seen 1)" = "rank=1 local=1 cvd=0,1" ] || fail "--num_gpus=2: rank 1 saw '$(seen 1)'"
run_mlrun -H localhost:4 --num_gpus=2 --include localhost:1 "$T/report.sh"
expect_rc 2
expect_grep "$T/err" "--num_nodes/--num_gpus and --include/--exclude both choose GPUs"
run_mlrun -H localhost:4 --include localhost:1,3 --nproc_per_node=3 "$T/report.sh"
expect_rc 2
expect_grep "$T/err" "3 workers but GPUs 1,3 only"
assert_no_marker_left 5
echo PASS
