#!/usr/bin/env bash
# A host whose sshd is down: mlrun names that host, exits non-zero, and starts nothing anywhere
# (no worker on any host, no agent), since every host is connected before anything starts.
source "$(dirname "$0")/multinode_lib.sh"
trap '"$CLUSTER" start-sshd 2 >/dev/null 2>&1; cleanup' EXIT
write_worker w.sh '
touch "$T/started.$RANK.$(hostname)"
exec "$T/sleep" 1000'

"$CLUSTER" stop-sshd 2
for form in hosts hostfile; do
  rm -f "$T"/started.*
  if [ $form = hosts ]; then
    run_mlrun -H host1:2,host2:2,host3:2 "$T/w.sh"
  else
    printf '%s slots=2\n' "$NET.11" "$NET.12" "$NET.13" >"$T/hostfile"
    run_mlrun --hostfile "$T/hostfile" "$T/w.sh"
  fi
  expect_rc_nonzero
  # The error names the host (its name or address) and not the others.
  if [ $form = hosts ]; then
    expect_grep "$T/err" 'host2'
    expect_no_grep "$T/err" 'host[13]'
  else
    expect_grep "$T/err" "$NET_RE\\.12"
    expect_no_grep "$T/err" "$NET_RE\\.1[13]"
  fi
  [ "$(count_files "$T/started.*")" -eq 0 ] || fail "$form: workers started: $(ls "$T"/started.*)"
  [ -z "$(agent_pids)" ] || fail "$form: an agent is running: $(describe_pids $(agent_pids))"
  assert_no_job_left 5
  echo "ok ($form): $(grep -m1 -i error "$T/err")"
done

# Two hosts down: both are reported, at once.
"$CLUSTER" stop-sshd 3
run_mlrun -H host1:1,host2:1,host3:1 "$T/w.sh"
expect_rc_nonzero
expect_grep "$T/err" 'host2'
expect_grep "$T/err" 'host3'
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "workers started with two hosts down"
assert_no_job_left 5
"$CLUSTER" start-sshd 3
echo "ok: two hosts down, both named"
