#!/usr/bin/env bash
# Early exec (docs/multinode.md "How a launch starts"): each host's agent starts right after that
# host's own connect and waits for its job, which the head hands over only once every host is
# connected. Here host3 never answers (its replies are dropped; the head's connect timeout is
# 10 s): while the head waits for it, host1's and host2's agents are already up, holding no job
# (they have not entered the job's directory). When host3's connect times out, mlrun names host3
# alone and exits non-zero; the early agents read the end of their stdin and exit, nothing
# started anywhere, and none of them is left by the time mlrun has exited.
source "$(dirname "$0")/multinode_lib.sh"
trap '"$CLUSTER" undrop 3 >/dev/null 2>&1; cleanup' EXIT
write_worker w.sh '
touch "$T/started.$RANK.$(hostname)"
exec "$T/sleep" 1000'

# The agents of this build of mlrun on host1 and host2 and their lifelines, job or not
# (agent_pids sees only those that entered $T, which a job's agent does first).
early_agents() {
  local p
  for p in $(pgrep -fx -- "$MLRUN agent|mlrun-lifeline" || true); do
    case "$(host_of_pid "$p")" in host1 | host2) echo "$p" ;; esac
  done
  true
}
# Each agent forks its lifeline first thing: count hosts, not processes.
two_early_agents() {
  [ "$(for p in $(early_agents); do host_of_pid "$p"; done | sort -u | wc -l)" -ge 2 ]
}

"$CLUSTER" drop 3
start_mlrun -H host1:2,host2:2,host3:2 "$T/w.sh"
wait_until 8 two_early_agents ||
  fail "no agent up on host1 and host2 while host3's connect was pending: $(early_agents)"
for p in $(early_agents); do
  case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in
    "$T" | "$T"/*) fail "agent $p on $(host_of_pid "$p") has its job before host3 is connected" ;;
  esac
done
mlrun_running || fail "mlrun ended before host3's connect timed out"
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "workers started: $(ls "$T"/started.*)"
wait_mlrun 40
expect_rc_nonzero
expect_grep "$T/err" 'host3'
expect_no_grep "$T/err" 'host[12]'
# Nothing of the early agents reached the terminal either.
[ "$(grep -c . "$T/err")" -eq 1 ] || fail "expected one line on stderr, got: $(cat "$T/err")"
[ -z "$(early_agents)" ] || fail "agents left after mlrun exited: $(describe_pids $(early_agents))"
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "workers started: $(ls "$T"/started.*)"
assert_no_job_left 5
echo "ok: agents up on host1 and host2 during host3's connect; $(cat "$T/err")"
