# `mlrun agent` over SSH takes its job as one line on stdin (docs/multinode.md "How a launch
# starts"). The head starts it right after its host's connect and hands the job over once every
# host is connected; when a host could not be, the head ends the agent's stdin first. So an agent
# whose stdin ends before the job's first byte exits 0 in silence, having started nothing; a job
# line that is cut short or is not a job is still a one-line error, exit code 2.
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
assert_no_marker_left 5
echo "ok: no job -> exit 0, silent; a broken job -> one error line, exit 2"
