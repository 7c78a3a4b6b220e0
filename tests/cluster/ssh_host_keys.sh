#!/usr/bin/env bash
# Unknown and changed host keys are per-host errors that name the fix; nothing is accepted.
source "$(dirname "$0")/lib.sh"
need_probe
home=$(private_home)
trap 'rm -rf "$home"' EXIT
known="$home/.ssh/known_hosts"

# host1 unknown; host2's entry holds another ed25519 key; host3's another type (RSA).
ssh-keygen -q -t ed25519 -N '' -C other -f "$home/other_ed25519"
ssh-keygen -q -t rsa -b 2048 -N '' -C other -f "$home/other_rsa"
{
  printf 'host2,%s %s\n' "$NET.12" "$(cut -d' ' -f1,2 "$home/other_ed25519.pub")"
  printf 'host3,%s %s\n' "$NET.13" "$(cut -d' ' -f1,2 "$home/other_rsa.pub")"
} >"$known"
out=$(HOME=$home "$PROBE" connect host1 host2 host3 </dev/null) && fail "accepted bad host keys"
expect_in "$out" "host1: host key unknown: $NET.11 is not in $known"
expect_in "$out" "ssh-keyscan $NET.11 >> ~/.ssh/known_hosts"
expect_in "$out" "host2: HOST KEY CHANGED"
expect_in "$out" "ssh-keygen -R $NET.12"
expect_in "$out" "host3: host key changed type"
expect_in "$out" "ssh-keygen -R $NET.13"
# The fingerprint shown is the server's real one.
fp=$(ssh-keygen -lf "$MLRUN_CLUSTER_DIR/host1/ssh_host_ed25519_key.pub" | awk '{print $2}')
expect_in "$out" "$fp"
# Nothing was written to known_hosts.
[ "$(wc -l <"$known")" -eq 2 ] || fail "known_hosts changed"

# The fix the message names works.
ssh-keyscan -t ed25519 $NET.11 2>/dev/null >>"$known"
expect_in "$(HOME=$home "$PROBE" connect host1)" "host1: ok"
echo "ok: unknown / changed / other-type host keys"
