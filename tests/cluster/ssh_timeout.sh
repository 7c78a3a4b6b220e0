#!/usr/bin/env bash
# A host that drops every packet is bounded by the connect timeout, and reported together with a
# refused host from one parallel connect.
source "$(dirname "$0")/lib.sh"
need_probe
trap '"$CLUSTER" undrop 3; "$CLUSTER" start-sshd 2' EXIT
"$CLUSTER" drop 3
"$CLUSTER" stop-sshd 2
start=$(now_ms)
out=$("$PROBE" --timeout 1500 connect host1 host2 host3) && fail "connected to a dropping host"
elapsed=$(($(now_ms) - start))
expect_in "$out" "host1: ok"
expect_in "$out" "host2: cannot connect"
expect_in "$out" "host3: no SSH answer from $NET.13 within 1500 ms"
[ $elapsed -ge 1400 ] || fail "gave up after $elapsed ms, before the 1500 ms timeout"
[ $elapsed -lt 4000 ] || fail "the 1500 ms connect timeout took $elapsed ms"
echo "ok: both failures reported at once in $elapsed ms"
