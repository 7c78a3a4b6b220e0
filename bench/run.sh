#!/usr/bin/env bash
# Builds mlrun and the bench helpers, then runs every benchmark side by side (bench/README.md).
#   bash bench/run.sh [bench.py options...]      e.g. --reps 5 --no-torch --only launch
# Environment: BUILD_DIR (default build-bench under the repository root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench}

need=()
command -v mpirun >/dev/null || need+=(openmpi-bin)
[ -x /usr/bin/time ] || need+=(time)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v cc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench: installing ${need[*]}" >&2
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! { [ -f "$build/build.ninja" ] ||
        cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null; } ||
   ! ninja -C "$build" -j2 mlrun >"$build/bench-build.log" 2>&1; then
  # The tree is shared and may be mid-edit; an mlrun built earlier still measures something real.
  [ -x "$build/mlrun" ] || { cat "$build/bench-build.log" >&2; exit 1; }
  echo "bench: WARNING: building mlrun failed (see $build/bench-build.log);" \
       "measuring the existing $build/mlrun from $(date -r "$build/mlrun" '+%F %T')" >&2
fi
# The helpers: through CMake once the top-level CMakeLists adds bench/, else compiled directly.
if ninja -C "$build" -t targets all 2>/dev/null | grep -q '^mlrun_bench_raw_spawn:' &&
   ninja -C "$build" -j2 mlrun_bench_raw_spawn mlrun_bench_stamp_exit >/dev/null 2>&1; then
  :
else
  mkdir -p "$build/bench"
  cc -O2 -o "$build/bench/raw_spawn" "$root/bench/raw_spawn.c"
  cc -O2 -o "$build/bench/stamp_exit" "$root/bench/stamp_exit.c"
fi

echo "# mlrun $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- \
  launcher worker rendezvous || echo ' + uncommitted changes'); $(uptime)" >&2
exec /usr/bin/python3 "$root/bench/bench.py" --mlrun "$build/mlrun" \
  --raw-spawn "$build/bench/raw_spawn" --stamp-exit "$build/bench/stamp_exit" "$@"
