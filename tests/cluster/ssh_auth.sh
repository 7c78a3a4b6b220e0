#!/usr/bin/env bash
# A key the host does not accept, or one locked by a passphrase: "permission denied" naming the
# host, promptly, and never a prompt (a terminal is attached to make a prompt possible).
source "$(dirname "$0")/lib.sh"
need_probe
home=$(private_home)
trap 'rm -rf "$home"' EXIT
rm -f "$home/.ssh/id_ed25519" "$home/.ssh/id_ed25519.pub"
ssh-keygen -q -t ed25519 -N '' -C stranger -f "$home/.ssh/id_ed25519"
out=$(HOME=$home "$PROBE" connect host1 </dev/null) && fail "a stranger's key was accepted"
expect_in "$out" "host1: permission denied for root@$NET.11"
expect_in "$out" "ssh-copy-id root@host1"

# The cluster's own key, but under a passphrase (PEM format: OpenSSL would prompt on the tty).
rm -f "$home/.ssh/id_ed25519" "$home/.ssh/id_ed25519.pub"
cp "$MLRUN_CLUSTER_HOME/.ssh/id_ed25519" "$home/.ssh/id_locked"
ssh-keygen -q -p -N secret -f "$home/.ssh/id_locked" >/dev/null
cp "$home/.ssh/id_locked" "$home/.ssh/id_ed25519"
cp "$MLRUN_CLUSTER_HOME/.ssh/id_ed25519.pub" "$home/.ssh/id_ed25519.pub"
if command -v script >/dev/null; then
  out=$(HOME=$home timeout 20 script -qec "$PROBE connect host1" /dev/null </dev/null) &&
    fail "a passphrase-locked key worked without its passphrase"
  [ $? -ne 124 ] || fail "the probe hung (a passphrase prompt?)"
else
  out=$(HOME=$home timeout 20 "$PROBE" connect host1 </dev/null) && fail "locked key worked"
fi
expect_in "$out" "host1: permission denied"
echo "ok: rejected keys are clear errors, and nothing prompts"
