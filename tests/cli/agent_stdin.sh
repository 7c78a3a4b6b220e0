# `mlrun agent` over SSH takes its job as one line on stdin (docs/multinode.md "How a launch
# starts"). The head starts it right after its host's connect and hands the job over once every
# host is connected; when a host could not be, the head ends the agent's stdin first. So an agent
# whose stdin ends before the job's first byte exits 0 in silence, having started nothing; a job
# line that is cut short or is not a job is still a one-line error, exit code 2. A job whose
# program is missing on the agent's host aborts the job through its rendezvous.
source "$(dirname "$0")/common.sh"

# No job at all: stdin ends at once (/dev/null), or after the head held it open a while.
run_agent() {
  RC=0
  (cd "$T" && exec "$MLRUN" agent) >"$T/out" 2>"$T/err" || RC=$?
}
run_agent </dev/null
expect_rc 0
[ ! -s "$T/out" ] && [ ! -s "$T/err" ] || fail "agent with no job printed: $(cat "$T/out" "$T/err")"
run_agent < <(sleep 0.3)
expect_rc 0
[ ! -s "$T/out" ] && [ ! -s "$T/err" ] || fail "agent with no job printed: $(cat "$T/out" "$T/err")"

# A job cut short (no newline, then EOF) and a line that is not a job: errors, as before.
for input in '{"endpoint":' 'not a job'; do
  run_agent < <(printf '%s' "$input")
  expect_rc 2
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "'$input': expected one line on stderr, got: $(cat "$T/err")"
  grep -q '^mlrun: error: agent on .*: bad job description on stdin: ' "$T/err" ||
    fail "'$input': $(cat "$T/err")"
done

# mlrun rdzv serving a job of its own, for one agent: its endpoint in $endpoint, pid in $rdzv.
start_rdzv() {
  rm -f "$T/token"
  "$MLRUN" rdzv --host 127.0.0.1 --port 0 --new-token-file "$T/token" --job-id "$1" \
    >"$T/rdzv.out" 2>"$T/rdzv.err" &
  rdzv=$!
  wait_until 10 test -s "$T/rdzv.out" || fail "mlrun rdzv did not start: $(cat "$T/rdzv.err")"
  endpoint=$(head -n1 "$T/rdzv.out")
}
# job_line JOB NNODES NODE_RANK ARGS_JSON: an agent's job line for that server.
job_line() {
  printf '{"endpoint":"%s","port":%s,"token":"%s","job_id":"%s","nnodes":%s,"cwd":"%s","env":{},"args":%s,"node_rank":%s,"nproc":1}\n' \
    "$endpoint" "${endpoint##*:}" "$(cat "$T/token")" "$1" "$2" "$T" "$4" "$3"
}

# A job whose program is missing on this host (a node-local path: the head has it): exit 2, and
# the job is aborted through its rendezvous with the cause, at once, so that the other nodes do
# not wait for this one's join until the head calls this agent lost.
start_rdzv agent-job
job_line agent-job 2 1 "[\"--no_python\",\"$T/missing-on-this-host\"]" >"$T/job"
run_agent <"$T/job"
kill "$rdzv"
wait "$rdzv" || true
expect_rc 2
expect_grep "$T/err" "^mlrun: error: .*missing-on-this-host"
expect_grep "$T/rdzv.err" "job aborted by 127\.0\.0\.1:[0-9]+: \"node 1 \(.*\) cannot start: .*missing-on-this-host"

# A job line its mlrun refuses an option of (another version's than the head's, which planned
# the same command line): exit 2, and the job is aborted with the cause, as above, instead of
# the others waiting until the head calls this agent lost (5 s after its exit).
start_rdzv flag-job
job_line flag-job 2 1 '["--no-such-flag","--no_python","/bin/true"]' >"$T/job"
run_agent <"$T/job"
kill "$rdzv"
wait "$rdzv" || true
expect_rc 2
expect_grep "$T/err" "^mlrun: error: this host's mlrun \($MLRUN\) refuses the head's command line: unknown option '--no-such-flag'"
expect_grep "$T/rdzv.err" "the job was aborted: node 1 \([^)]*\) cannot start: this host's mlrun \($MLRUN\) refuses the head's command line: unknown option '--no-such-flag'"

# A job whose worker exits 127 (a shell's "command not found"): the agent exits 1, since 126
# and 127 are what a host's shell exits with when it cannot run the agent at all, which the
# head reports at once as an agent that did not start (launcher/head.cc).
start_rdzv shell-job
job_line shell-job 1 0 '["--no_python","/bin/sh","-c","exit 127"]' >"$T/job"
run_agent <"$T/job"
kill "$rdzv"
wait "$rdzv" || true
expect_rc 1
assert_no_marker_left 5
echo "ok: no job -> exit 0, silent; a broken job -> one error line, exit 2; a missing program or an unknown option -> the job aborted; a worker's 127 -> the agent's 1"
