#!/usr/bin/env bash
# A host whose sshd is down: an error naming it, at once, while the others connect.
source "$(dirname "$0")/lib.sh"
need_probe
trap '"$CLUSTER" start-sshd 2' EXIT
"$CLUSTER" stop-sshd 2
start=$(now_ms)
out=$("$PROBE" --timeout 10000 connect host1 host2 host3) && fail "connected to a host without sshd"
elapsed=$(($(now_ms) - start))
expect_in "$out" "host1: ok"
expect_in "$out" "host3: ok"
expect_in "$out" "host2: cannot connect to $NET.12: Connection refused"
[ $elapsed -lt 3000 ] || fail "a refused connection took $elapsed ms to report"
echo "ok: refused in $elapsed ms: $(grep host2 <<<"$out")"
