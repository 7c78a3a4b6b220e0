#!/usr/bin/env bash
# Installs what the tests need, builds everything and runs every test. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
# Three at once: most tests wait (on timeouts, hosts, sshd) more than they compute, and the two
# namespace clusters (tests/cluster/CMakeLists.txt) each run their own tests one after another.
# Tests that keep both cores busy take two slots (PROCESSORS 2).
ctest --test-dir build --output-on-failure -j3 --timeout 600 "$@"
# The whole run (no ctest arguments) also runs the unit and rendezvous tests under ASan+UBSan and
# TSan (docs/coding-guidelines.md rule 13; the README's "Sanitizers" says what it costs).
if [ $# -eq 0 ]; then bash tools/sanitize.sh --ci; fi
