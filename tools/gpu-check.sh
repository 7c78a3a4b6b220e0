#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, which the development machine lacks: run this on a machine
# with a GPU, the CUDA runtime and NCCL (a device session). It builds mlrun, then runs with one
# rank (NCCL allows a 1-rank communicator):
#   1. examples/nccl_allreduce: NCCL unique ID through mlrun's rendezvous, a real all-reduce;
#   2. mlrun doctor --bandwidth --backend nccl: the sweep's GPU path, every value checked;
#   3. the same with 2 ranks where the host has 2 GPUs or more.
# Exits non-zero at the first failure; every command has a timeout. BUILD=DIR picks the build
# directory (default build-gpu); an existing one is reused. Where .devrt/ exists (made here by
# tools/gpu-device-prep.sh and carried to a device machine, which cannot install packages), its
# prebuilt binaries and libraries are used and nothing is built.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/mlrun-gpu-check.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
step() { echo "== $*"; }

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
timeout 120 "$MLRUN" --nproc_per_node 1 --no_python "$NCCL_EXAMPLE"

sweep() {  # sweep RANKS: the NCCL sweep on RANKS local ranks; checks the table's verdict
  timeout 300 "$MLRUN" doctor --bandwidth --backend nccl --nproc_per_node "$1" --op-timeout 60 \
    | tee "$OUT/sweep"
  grep -q '^# mlrun doctor --bandwidth: NCCL ' "$OUT/sweep" || { echo "FAIL: no NCCL title"; exit 1; }
  grep -qx '# Out of bounds values : 0 OK' "$OUT/sweep" || { echo "FAIL: wrong values"; exit 1; }
  local rows
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum ' "$OUT/sweep" || true)
  [ "$rows" -eq 25 ] || { echo "FAIL: $rows table rows, expected 25 (8 B .. 128 MiB)"; exit 1; }
}
step "mlrun doctor --bandwidth --backend nccl, 1 rank"
sweep 1
gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -ge 2 ]; then
  step "mlrun doctor --bandwidth --backend nccl, 2 ranks"
  sweep 2
fi
echo "gpu-check: OK"
