# Shared by tests/cluster/multinode_lib.sh and tests/slurm/lib.sh: bounded waits, and the scan for
# what is left of a test's job on any host. The caller sets MARKER (in the argv of the job's
# scripts) and T (the job's working directory, named after the marker); the namespace hosts share
# the PID space and the file system, so one scan of /proc sees every host's processes.

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# no_leak_check_for_mpi: in an AddressSanitizer build (tools/sanitize.sh), no leak check in this
# test's processes (a build without ASan ignores ASAN_OPTIONS). Open MPI 4.1's ranks keep allocations of its plugins past
# MPI_Finalize, and it unloads those plugins first: their reports' frames are `<unknown
# module>`, which no entry of tools/sanitizers/lsan.supp can name. mlrun's own leaks are checked
# by every other test.
no_leak_check_for_mpi() {
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

# wait_until SECONDS COMMAND...: polls COMMAND every 50 ms; false if it never succeeded.
wait_until() {
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  while true; do
    "$@" && return 0
    [ "$(now_ms)" -ge "$deadline" ] && return 1
    sleep 0.05
  done
}

# job_pids: every process of this test's job on any host (argv has the marker, or cwd under $T).
job_pids() {
  {
    pgrep -f -- "$MARKER" || true
    find /proc -mindepth 2 -maxdepth 2 -name cwd \( -lname "$T" -o -lname "$T/*" \) 2>/dev/null |
      cut -d/ -f3
  } | sort -un | while read -r p; do
    # Not this test's own shells (their argv is the test script's).
    if [ "$p" != $$ ] && [ -e "/proc/$p" ]; then echo "$p"; fi
  done
  true
}

no_job_left() { [ -z "$(job_pids)" ]; }
