#!/usr/bin/env bash
# Builds mlrun with AddressSanitizer + UndefinedBehaviorSanitizer and with ThreadSanitizer, each in
# a tree of its own (build-asan, build-tsan), and runs the tests under each. Exits non-zero when a
# test fails or any process left a sanitizer report (suppressions: tools/sanitizers/, each entry
# with its reason). docs/coding-guidelines.md says when to run it.
#
#   tools/sanitize.sh [--ci] [asan] [tsan] [-- CTEST_ARGS...]
#
# Without --ci: every target, every test but the cluster's (and the libFuzzer target, built with
# its own sanitizers in every tree). With --ci: only the unit and rendezvous test binaries and
# their tests (labels unit and rendezvous), which is what tools/test.sh runs.
# Environment: CXX (default g++; clang++-14 works too), SANITIZE_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

ci=0
kinds=()
ctest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --ci) ci=1 ;;
    asan | tsan) kinds+=("$1") ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "usage: tools/sanitize.sh [--ci] [asan] [tsan] [-- CTEST_ARGS...]" >&2; exit 2 ;;
  esac
  shift
done
[ ${#kinds[@]} -gt 0 ] || kinds=(asan tsan)
cxx=${CXX:-g++}
jobs=${SANITIZE_JOBS:-2}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

status=0
for kind in "${kinds[@]}"; do
  case $kind in
    # UBSan stops at its first finding instead of printing and going on, so a test sees it too.
    asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" ;;
    # -Wno-tsan: GCC warns that TSan does not model atomic_thread_fence, which Boost.Asio's
    # handler invocation uses; its queue's mutex already orders what the fence would.
    tsan) flags="-fsanitize=thread -Wno-tsan" ;;
  esac
  dir=$root/build-$kind
  start=$(date +%s)
  # -O1: the level the sanitizers are usually run at, and quicker to compile than -O2; -g1: line
  # tables, all a report's stack needs.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    "${launcher[@]}" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
  if [ $ci = 1 ]; then
    cmake --build "$dir" -j "$jobs" --target mlrun_unit_tests mlrun rdzv_fault_test \
      rdzv_connections_test rdzv_job_tool custom_trainer gloo_allreduce nccl_unique_id
    select=(-L '^(unit|rendezvous)$')
  else
    cmake --build "$dir" -j "$jobs"
    select=(-LE '^cluster$' -E '^rdzv_protocol_fuzz$')
  fi
  built=$(date +%s)
  # Every process writes its report to a file of its own (log_path), so a report from a worker,
  # an agent or a child whose exit status a test does not check is still seen here.
  reports=$dir/sanitizer-reports
  rm -rf "$reports"
  mkdir -p "$reports"
  supp=$root/tools/sanitizers
  export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="log_path=$reports/tsan:suppressions=$supp/tsan.supp:print_suppressions=0:second_deadlock_stack=1"
  if ! ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600 "${select[@]}" \
    "${ctest_args[@]}"; then
    echo "sanitize.sh: $kind: tests failed" >&2
    status=1
  fi
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS
  shopt -s nullglob
  found=("$reports"/*)
  shopt -u nullglob
  if [ ${#found[@]} -gt 0 ]; then
    echo "sanitize.sh: $kind: ${#found[@]} report(s) in $reports:" >&2
    for f in "${found[@]}"; do
      echo "=== $f" >&2
      head -n 60 "$f" >&2
    done
    status=1
  fi
  echo "sanitize.sh: $kind: built in $((built - start)) s, tested in $(($(date +%s) - built)) s"
done
exit $status
