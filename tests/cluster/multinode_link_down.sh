#!/usr/bin/env bash
# A node that vanishes without a word (its link cut: no FIN, no RST) is noticed within the stated
# bound (docs/multinode.md): the head's SSH keepalive (10 s idle, 3 probes 5 s apart) reports it
# lost within about 25 s and the other nodes stop; the cut-off node's agent loses its rendezvous
# connection (keepalive 30 s idle, 3 probes 5 s apart, about 45 s) and stops its workers too.
source "$(dirname "$0")/multinode_lib.sh"
trap '"$CLUSTER" link-up 3 >/dev/null 2>&1 || true; cleanup' EXIT
write_worker worker.sh '
echo "$(hostname)" >"$T/up.$RANK"
exec "$T/sleep" 1000'

start_mlrun -H host1:1,host2:1,host3:1 "$T/worker.sh"
wait_until 120 files_at_least "$T/up.*" 3 || fail "the 3 workers did not start"
start=$(now_ms)
"$CLUSTER" link-down 3
wait_mlrun 60
took=$(($(now_ms) - start))
expect_rc_nonzero
# Two bounds of about 25 s race here: the head's SSH keepalive (node 2 (host3) lost) and the
# rendezvous server's own keepalive on host3's connection (member 2 ... (NET.13:PORT) lost).
# Which fires first depends on which connection carried the last packet; either names the node.
expect_grep "$T/err" 'node 2 \(host3\) lost|member 2 of join group .*\('"$NET_RE"'\.13:[0-9]+\) lost'
# The head and the two other nodes are done; host3's own agent stops on its own.
[ -z "$(job_pids_on 1)$(job_pids_on 2)" ] || fail "host1 or host2 still runs processes of the job"
wait_until 70 eval '[ -z "$(job_pids_on 3)" ]' ||
  fail "host3's agent and worker outlived the bound: $(for p in $(job_pids_on 3); do
    echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-60) ($(awk '{print $3}' "/proc/$p/stat"))"
  done)"
echo "ok: host3's link cut; mlrun exited $RC after ${took} ms: $(grep -m1 'lost' "$T/err"); host3 cleaned up after $(($(now_ms) - start)) ms"
