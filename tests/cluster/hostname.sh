#!/usr/bin/env bash
# Every cluster host answers over real OpenSSH with its own hostname, from its own address.
source "$(dirname "$0")/lib.sh"
for ((i = 1; i <= MLRUN_CLUSTER_HOSTS; i++)); do
  got=$("${SSH[@]}" "host$i" 'echo "$(hostname) $(ip -4 -o addr show eth0 | awk "{print \$4}")"' \
    </dev/null)
  [ "$got" = "host$i $NET.$((10 + i))/24" ] || fail "host$i answered '$got'"
done
# The head (root namespace) keeps its own name.
[ "$(hostname)" != host1 ] || fail "the root namespace's hostname changed"
echo "ok: $MLRUN_CLUSTER_HOSTS hosts answer with their own names"
