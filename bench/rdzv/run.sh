#!/usr/bin/env bash
# The rendezvous benchmark (bench/README.md, "Rendezvous"): builds what it needs, then runs mlrun's
# server, PyTorch's TCPStore and the bare TCP floor side by side and prints the table.
#   bash bench/rdzv/run.sh [bench.py options...]   e.g. --worlds 1024,4096 --reps 5 --only mlrun,floor
# Environment: BUILD_DIR (default build-rbench under the repository root), PYTHON (/usr/bin/python3,
# which has Debian's torch).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-rbench}
export PYTHON=${PYTHON:-/usr/bin/python3}

[ -f "$build/build.ninja" ] ||
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" mlrun_bench_rdzv_server mlrun_bench_rdzv_clients mlrun_bench_echo_server >/dev/null
bin=$build/bench/rdzv

echo "# mlrun $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- \
  rendezvous || echo ' + uncommitted changes in rendezvous/'); $(uptime)" >&2
exec "$PYTHON" "$root/bench/rdzv/bench.py" --bin-dir "$bin" "$@"
