#!/usr/bin/env bash
# libssh's own logging never reaches stderr, even when ~/.ssh/config asks for LogLevel DEBUG3,
# on success and on every kind of failure.
source "$(dirname "$0")/lib.sh"
need_probe
home=$(private_home)
trap 'rm -rf "$home"; "$CLUSTER" start-sshd 2' EXIT
printf 'Host *\n  LogLevel DEBUG3\n' >>"$home/.ssh/config"
sed -i '/^host3,/d' "$home/.ssh/known_hosts"
"$CLUSTER" stop-sshd 2
err=$(HOME=$home "$PROBE" --timeout 2000 connect host1 host2 host3 2>&1 >/dev/null) || true
[ -z "$err" ] || fail "stderr was not empty:"$'\n'"$err"
err=$(echo hi | HOME=$home "$PROBE" --close-stdin run 'cat >/dev/null; echo ok' host1 2>&1 >/dev/null)
[ -z "$err" ] || fail "stderr was not empty:"$'\n'"$err"
echo "ok: nothing from libssh on stderr"
