#!/usr/bin/env bash
# stdin stays open after the payload until close_stdin(); stop() closes the connection and the
# remote command sees EOF on stdin (its lifeline: closing a channel kills nothing by itself).
source "$(dirname "$0")/lib.sh"
need_probe
marks=$(mktemp -d "${TMPDIR:-/tmp}/mlrt-marks.XXXXXX")
trap 'rm -rf "$marks"' EXIT

# close_stdin: cat echoes the payload and ends at EOF.
out=$(echo payload | "$PROBE" --close-stdin run cat host1 host2)
expect_in "$out" "host1 out: payload"
expect_in "$out" "host2 status: exit=0"

# Without close_stdin the command keeps running until stop(); then its stdin reaches EOF.
start=$(now_ms)
out=$(echo payload | "$PROBE" --stop-after 700 run \
  "cat >/dev/null; touch $marks/\$(hostname)" host1 host2 host3) && fail "stopped commands succeeded"
elapsed=$(($(now_ms) - start))
[ $elapsed -ge 600 ] || fail "the commands ended after $elapsed ms, before stop()"
[ $elapsed -lt 5000 ] || fail "stop() took $elapsed ms"
expect_in "$out" "host2 status: exit=-1 error=stopped by the launcher"
for i in 1 2 3; do
  for ((t = 0; t < 50; t++)); do
    [ -e "$marks/host$i" ] && break
    sleep 0.1
  done
  [ -e "$marks/host$i" ] || fail "host$i: the remote command did not see stdin EOF after stop()"
done

# The head SIGKILLed: the kernel closes its connections, sshd closes the command's stdin.
rm -f "$marks"/host*
echo payload | "$PROBE" run \
  "touch $marks/started-\$(hostname); cat >/dev/null; touch $marks/\$(hostname)" \
  host1 host2 host3 >/dev/null &
probe_pid=$!
for ((t = 0; t < 100; t++)); do  # until all three commands run
  [ "$(find "$marks" -name 'started-*' | wc -l)" -ge 3 ] && break
  sleep 0.1
done
sleep 0.5
kill -KILL $probe_pid
wait $probe_pid 2>/dev/null || true
for i in 1 2 3; do
  for ((t = 0; t < 50; t++)); do
    [ -e "$marks/host$i" ] && break
    sleep 0.1
  done
  [ -e "$marks/host$i" ] || fail "host$i: the remote command outlived a SIGKILLed head"
done
echo "ok: stdin stays open; close_stdin, stop and a killed head reach the remote command"

# A host that vanishes mid-command (its link goes down: no FIN, no RST) ends the command with
# "connection lost" within the keepalive bound (1 s idle: about 1 + 3 x 1 s), not never.
trap 'rm -rf "$marks"; "$CLUSTER" link-up 3' EXIT
start=$(now_ms)
echo payload | "$PROBE" --keepalive 1 run 'cat >/dev/null' host3 >"$marks/out" &
probe_pid=$!
sleep 1
"$CLUSTER" link-down 3
wait $probe_pid && fail "a vanished host's command succeeded"
out=$(cat "$marks/out")
elapsed=$(($(now_ms) - start))
"$CLUSTER" link-up 3
expect_in "$out" "host3 status: exit=-1 error=connection to $NET.13 lost"
[ $elapsed -lt 15000 ] || fail "a vanished host was noticed after $elapsed ms"
echo "ok: a vanished host is noticed in $elapsed ms"
