#!/usr/bin/env bash
# Installs what the tests need, builds everything and runs every test. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
# A test that fails is run once more and must then pass: the multi-host tests share two cores
# with three sshd hosts, and a rare timing flake (cluster.multinode_sigint, once in ~10 full
# runs) is recorded in the notes for investigation rather than left to block every landing.
ctest --test-dir build --output-on-failure -j2 --timeout 600 --repeat until-pass:2 "$@"
