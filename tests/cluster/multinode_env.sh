#!/usr/bin/env bash
# The environment reaches every node: -x VAR=VALUE, -x VAR (the head's value), PATH and the
# working directory reach every remote worker; the rendezvous token is in no process's argv on
# any host.
source "$(dirname "$0")/multinode_lib.sh"
mkdir -p "$T/bin" "$T/work dir"
printf '#!/bin/sh\necho from-head-path\n' >"$T/bin/mlrt_path_probe_$$"
chmod +x "$T/bin/mlrt_path_probe_$$"
write_worker worker.sh "
{
  echo \"host=\$(hostname)\"
  echo \"a=\$MLRT_A\"
  echo \"b=\$MLRT_B\"
  echo \"path_probe=\$(mlrt_path_probe_$$)\"
  echo \"pwd=\$(pwd)\"
} >\"\$T/env.\$RANK\"
printf '%s' \"\$MLRUN_RDZV_TOKEN\" >\"\$T/token.\$RANK\"
touch \"\$T/up.\$RANK\"
exec \"\$T/sleep\" 1000"

value="a value with spaces, 'quotes' and \$dollar $MARKER"
export MLRT_B="b from the head $MARKER"
export PATH="$T/bin:$PATH"
RC=0
set -m
(cd "$T/work dir" && exec "$MLRUN" -H host1:2,host2:2,host3:2 -x "MLRT_A=$value" -x MLRT_B \
  "$T/worker.sh") >"$T/out" 2>"$T/err" &
MLRUN_PID=$!
set +m
wait_until 120 files_at_least "$T/up.*" 6 || fail "the 6 workers did not start"
for r in 0 1 2 3 4 5; do
  h=host$((r / 2 + 1))
  want="host=$h"$'\n'"a=$value"$'\n'"b=$MLRT_B"$'\n'"path_probe=from-head-path"$'\n'"pwd=$T/work dir"
  [ "$(cat "$T/env.$r")" = "$want" ] || fail "rank $r saw"$'\n'"$(cat "$T/env.$r")"$'\n'"expected"$'\n'"$want"
done
echo "ok: -x VAR=VALUE, -x VAR, PATH and the working directory reached 6 workers on 3 hosts"

# The token: workers have it in their environment; no process on any host has it in its argv.
token=$(cat "$T/token.0")
[ ${#token} -ge 16 ] || fail "rank 0's MLRUN_RDZV_TOKEN is '$token'"
for r in 1 2 3 4 5; do [ "$(cat "$T/token.$r")" = "$token" ] || fail "rank $r has another token"; done
printf '%s\n' "$token" >"$T/token.pattern"  # grep reads it from a file: not in grep's own argv
hits=$(grep -l -a -F -f "$T/token.pattern" /proc/[0-9]*/cmdline 2>/dev/null || true)
[ -z "$hits" ] || fail "the token is in the argv of: $(describe_pids $(echo "$hits" | cut -d/ -f3))"
# and the scan does see every host's processes (the agents' and workers' argv are read).
[ "$(agent_pids | wc -l)" -ge 3 ] || fail "expected the 3 hosts' agents to be running"
echo "ok: the token ($((${#token})) characters) is in no process's argv, head or hosts"

kill -TERM "$MLRUN_PID"
wait_mlrun 60
expect_rc 143
# Cleanup matches on cwd under $T: the workers' cwd was "$T/work dir".
assert_no_job_left 15
