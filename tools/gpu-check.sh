#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, which the development machine lacks: run this on a machine
# with a GPU, the CUDA runtime and NCCL (a device session). It builds mlrun, then runs with one
# rank (NCCL allows a 1-rank communicator):
#   1. examples/nccl_allreduce: NCCL unique ID through mlrun's rendezvous, a real all-reduce;
#   2. mlrun doctor --bandwidth --backend nccl: the sweep's GPU path, every value checked;
#   3. the same with 2 ranks where the host has 2 GPUs or more;
#   4. where a python with PyTorch and CUDA is found (PYTHON, default python3): the plan of
#      --nproc_per_node gpu (one worker a GPU, backend nccl chosen), examples/torch_ddp.py with
#      NCCL on every GPU and with Gloo on 4 ranks, both through mlrun's store (--store mlrun),
#      and the store test's worker (a restart sees none of the first attempt's keys).
# Every check runs even when one before it failed (a device machine's time is scarce); the exit
# status is 1 when any failed, and the last line says which. Every command has a timeout. BUILD=DIR picks the build
# directory (default build-gpu); an existing one is reused. Where .devrt/ exists (made here by
# tools/gpu-device-prep.sh and carried to a device machine, which cannot install packages), its
# prebuilt binaries and libraries are used and nothing is built.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/mlrun-gpu-check.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
step() { echo "== $*"; }
failed=()
fail() { echo "FAIL: $*"; failed+=("$*"); }

# lib_dir NAME: a directory holding NAME when the dynamic linker's cache has none (CUDA images
# often carry NCCL in a Python wheel), else nothing.
lib_dir() {
  ldconfig -p | grep "$1" >/dev/null && return 0
  local f
  f=$(timeout 60 find /usr /opt -name "$1" -print -quit 2>/dev/null || true)
  [ -n "$f" ] && dirname "$f"
  return 0
}

step "GPUs"
timeout 30 nvidia-smi -L || echo "(nvidia-smi did not answer; going on)"
if [ -x .devrt/bin/mlrun ]; then
  step "prebuilt binaries from .devrt/"
  MLRUN=$PWD/.devrt/bin/mlrun
  NCCL_EXAMPLE=$PWD/.devrt/bin/nccl_allreduce
  extra=$PWD/.devrt/root/usr/lib/x86_64-linux-gnu:$PWD/.devrt/root/usr/lib:$PWD/.devrt/root/lib/x86_64-linux-gnu
  for name in libnccl.so.2 libcudart.so.13; do
    d=$(lib_dir "$name")
    [ -n "$d" ] && extra=$extra:$d
  done
  export LD_LIBRARY_PATH=$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
else
  step "build ($BUILD)"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  timeout 300 cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  timeout 900 cmake --build "$BUILD" --parallel --target mlrun mlrun_allreduce_sweep nccl_allreduce
  MLRUN=$BUILD/mlrun
  NCCL_EXAMPLE=$BUILD/examples/nccl_allreduce/nccl_allreduce
fi

step "examples/nccl_allreduce, 1 rank"
timeout 120 "$MLRUN" --nproc_per_node 1 --no_python "$NCCL_EXAMPLE" || fail "nccl_allreduce, 1 rank"

sweep() {  # sweep RANKS: the NCCL sweep on RANKS local ranks; checks the table's verdict
  timeout 300 "$MLRUN" doctor --bandwidth --backend nccl --nproc_per_node "$1" --op-timeout 60 \
    >"$OUT/sweep" 2>&1 || fail "sweep, $1 rank(s): exit $?"
  cat "$OUT/sweep"
  grep -q '^# mlrun doctor --bandwidth: NCCL ' "$OUT/sweep" || fail "sweep, $1 rank(s): no NCCL title"
  grep -qx '# Out of bounds values : 0 OK' "$OUT/sweep" || fail "sweep, $1 rank(s): wrong values"
  local rows
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum ' "$OUT/sweep" || true)
  [ "$rows" -eq 25 ] || fail "sweep, $1 rank(s): $rows table rows, expected 25 (8 B .. 128 MiB)"
}
step "mlrun doctor --bandwidth --backend nccl, 1 rank"
sweep 1
gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -ge 2 ]; then
  step "mlrun doctor --bandwidth --backend nccl, 2 ranks"
  sweep 2
fi
step "mlrun doctor (this host's report)"
timeout 60 "$MLRUN" doctor || fail "mlrun doctor: exit $?"

py=${PYTHON:-python3}
if torch_info=$(timeout 120 "$py" -c 'import torch; print(torch.__version__, torch.cuda.device_count())' 2>&1); then
  read -r torch_version torch_gpus <<<"$(tail -n 1 <<<"$torch_info")"
  step "PyTorch $torch_version ($py) sees $torch_gpus GPU(s); nvidia-smi lists ${gpus:-0}"
  step "mlrun --dry-run --nproc_per_node gpu: one worker a GPU, NCCL"
  timeout 60 "$MLRUN" --dry-run --nproc_per_node gpu examples/torch_ddp.py >"$OUT/plan" 2>&1 ||
    fail "dry run: exit $?"
  head -n 12 "$OUT/plan"
  grep -qE "^mlrun: dry run: 1 node, $torch_gpus workers?, world size $torch_gpus, backend nccl" \
    "$OUT/plan" || fail "dry run: not $torch_gpus workers on nccl"
  step "examples/torch_ddp.py --backend nccl, one rank a GPU, through mlrun's store"
  PYTHON=$py timeout 300 "$MLRUN" --nproc_per_node gpu examples/torch_ddp.py --backend nccl \
    >"$OUT/ddp" 2>&1 || fail "torch ddp nccl: exit $?"
  cat "$OUT/ddp"
  grep -q "^\[0\] ddp ok: $torch_gpus ranks" "$OUT/ddp" || fail "torch ddp nccl: no ddp ok line"
  step "examples/torch_ddp.py, Gloo, 4 ranks, through mlrun's store"
  PYTHON=$py timeout 300 "$MLRUN" --nproc_per_node 4 examples/torch_ddp.py >"$OUT/ddp" 2>&1 ||
    fail "torch ddp gloo: exit $?"
  cat "$OUT/ddp"
  grep -q '^\[0\] ddp ok: 4 ranks' "$OUT/ddp" || fail "torch ddp gloo: no ddp ok line"
  step "tests/cli/torch_store_worker.py: a fresh key space after a restart, with this PyTorch"
  PYTHON=$py timeout 300 "$MLRUN" --nproc_per_node 3 --max_restarts 1 \
    tests/cli/torch_store_worker.py >"$OUT/store" 2>&1 || fail "store worker: exit $?"
  grep -v -e 'Warning: Environment variable' "$OUT/store" | tail -n 8
  grep -qE '^\[0\] store ok: torch .*, 3 ranks, attempt 1, MASTER_PORT [0-9]+ served by mlrun' \
    "$OUT/store" || fail "store worker: no store ok line"
else
  echo "(no PyTorch in $py: the torch steps are skipped: $torch_info)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu-check: FAILED: $(IFS=';'; echo "${failed[*]}")"
  exit 1
fi
echo "gpu-check: OK"
