#!/usr/bin/env bash
# The libssh wrapper runs one command on 3 hosts at once: stdin payload delivered, stdout and
# stderr kept apart and whole, each host's exit status right (also through SshSession::run).
# Each connection has TCP_NODELAY and keepalive set.
source "$(dirname "$0")/lib.sh"
need_probe
out=$(printf 'token-123\nsecond line\n' | "$PROBE" run \
  'read -r t; read -r u; echo "stdout of $(hostname): $t / $u"; echo "stderr of $(hostname)" >&2;
   exit $(( $(hostname | tr -dc 0-9) + 40 ))' host1 host2 host3) && fail "expected a non-zero exit"
for i in 1 2 3; do
  expect_in "$out" "host$i out: stdout of host$i: token-123 / second line"
  expect_in "$out" "host$i err: stderr of host$i"
  expect_in "$out" "host$i status: exit=$((40 + i))"
done
# The payload (where the token travels) appears in no process's argv, here or on any host
# (every namespace shares one PID space, so pgrep sees them all).
secret="secret-$$-$RANDOM"
echo "$secret" | "$PROBE" run 'read -r t; sleep 1.5; echo "got ${#t} bytes"' host1 host2 \
  >"${TMPDIR:-/tmp}/mlrt-secret.$$" &
probe=$!
sleep 0.8
if pgrep -af "$secret"; then
  kill $probe
  fail "the payload shows in a command line"
fi
wait $probe || fail "the secret run failed"
expect_in "$(cat "${TMPDIR:-/tmp}/mlrt-secret.$$")" "host2 out: got ${#secret} bytes"
rm -f "${TMPDIR:-/tmp}/mlrt-secret.$$"

# Many lines from 3 hosts at once, each whole (no lost or torn lines).
out=$("$PROBE" run 'seq 1 20000 | sed "s/^/$(hostname) line /"' host1 host2 host3 </dev/null)
for i in 1 2 3; do
  n=$(grep -c "^host$i out: host$i line [0-9]*$" <<<"$out")
  [ "$n" -eq 20000 ] || fail "host$i: $n of 20000 lines arrived whole"
done

# The synchronous path writes straight to the caller's fds and returns the remote status.
set +e
sync_out=$(echo payload | "$PROBE" run-sync 'cat; echo "on $(hostname)" >&2; exit 3' host2 2>&1)
rc=$?
set -e
[ $rc -eq 3 ] || fail "run-sync returned $rc, not 3"
expect_in "$sync_out" "payload"
expect_in "$sync_out" "on host2"

# A command killed by a signal reports the signal.
out=$("$PROBE" run 'kill -TERM $$' host3 </dev/null) && fail "a signalled command succeeded"
expect_in "$out" "host3 status: exit=-1 signal=TERM"

# Every connection has TCP_NODELAY (the handshake's and the hand-over's small writes must not
# wait for delayed ACKs: ~40 ms a launch under Nagle's algorithm) and TCP keepalive.
out=$("$PROBE" sockopts host1 host2)
expect_in "$out" "host1: nodelay=1 keepalive=1"
expect_in "$out" "host2: nodelay=1 keepalive=1"
echo "ok: output, payload and exit statuses on 3 hosts; TCP_NODELAY and keepalive set"
