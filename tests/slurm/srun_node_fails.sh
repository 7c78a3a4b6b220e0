#!/usr/bin/env bash
# The per-node mode when one node fails before it joins: Slurm does not tell the other tasks,
# which would wait for it up to the join timeout (600 s, as torchrun's). The failing node ends the
# step (scancel JOB.STEP) and says so; the step ends at once, nothing is left on any node.
#  1. Node 0 cannot serve the rendezvous: another process (a neighbour's job) has the step's port
#     on sn01. Nodes 1 and 2 would otherwise wait for an answer from that process.
#  2. Node 2's program is missing there (a node-local path), while nodes 0 and 1 have theirs.
#  3. Node 0 ends without a word (here: mlrun never runs there): the others cannot know, and
#     their waiting line names the step's scancel, which ends the wait.
source "$(dirname "$0")/lib.sh"
cat >"$T/where.sh" <<'SH'
echo "rank $RANK of $WORLD_SIZE on $(hostname)"
SH
# 1. The squatter is step 0 of the allocation; mlrun's is step 1, whose port step_port gives
#    (transport/slurm_env.h): 10000 + (JOB * 64 + 1) mod 20000.
cat >"$T/squat.sh" <<'SH'
port=$((10000 + (SLURM_JOB_ID * 64 + 1) % 20000))
srun --overlap -N1 -w sn01 python3 -c "
import socket, time
s = socket.socket()
s.bind(('0.0.0.0', $port))
s.listen()
open('$T/squatting', 'w').close()
time.sleep(120)" &
squatter=$!
# A squatter that could not bind (the port still in TIME_WAIT) has ended: say so, not wait.
while [ ! -e "$T/squatting" ]; do
  kill -0 $squatter 2>/dev/null || { echo "squatter: could not hold port $port"; exit 3; }
  sleep 0.05
done
srun -N3 --ntasks-per-node=1 "$MLRUN" --nproc_per_node=1 sh "$T/where.sh"
echo "srun rc=$?"
kill %1
SH
rc=0
export T MLRUN
in_t salloc -N3 -J "$MARKER" -Q timeout 60 bash "$T/squat.sh" >"$T/out" 2>&1 || rc=$?
expect_no_grep "$T/out" "^squatter: "
[ $rc -ne 124 ] || fail "the step did not end within 60 s of node 0's failure: $(cat "$T/out")"
expect_grep "$T/out" "^mlrun: error: cannot serve the rendezvous on 10\.78\.0\.11:[0-9]+: .*Address already in use"
expect_grep "$T/out" "^mlrun: ending Slurm step [0-9]+\.1 \(scancel [0-9]+\.1\): node 0 failed before it joined"
expect_grep "$T/out" "^srun rc=[1-9]"
expect_no_grep "$T/out" "^\[[0-9]\] rank"
expect_no_grep "$T/out" "warning: scancel"
assert_no_job_left 15
# 2. Each node runs $T/w-<its name>; sn03's is missing.
for n in sn01 sn02; do (echo '#!/bin/sh' && cat "$T/where.sh") >"$T/w-$n" && chmod +x "$T/w-$n"; done
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 60 srun -N3 --ntasks-per-node=1 \
  sh -c 'exec "$MLRUN" --nproc_per_node=1 "$T/w-$SLURMD_NODENAME"' >"$T/out2" 2>&1 || rc=$?
[ $rc -ne 124 ] || fail "the step did not end within 60 s of node 2's failure: $(cat "$T/out2")"
[ $rc -ne 0 ] || fail "the step succeeded without node 2: $(cat "$T/out2")"
expect_grep "$T/out2" "^mlrun: error: .*/w-sn03: No such file or directory"
expect_grep "$T/out2" "^mlrun: ending Slurm step [0-9]+\.0 \(scancel [0-9]+\.0\): node 2 failed before it joined"
expect_no_grep "$T/out2" "^\[[0-9]\] rank"
assert_no_job_left 15
# 3.
rc=0
start_salloc timeout 60 srun -N3 --ntasks-per-node=1 \
  sh -c '[ "$SLURM_NODEID" != 0 ] || exit 3; exec "$MLRUN" --nproc_per_node=1 sh "$T/where.sh"'
hint() { grep -oE "node 0 of Slurm step [0-9]+\.0 serves it: if it ended, \`scancel [0-9]+\.0\` ends this wait" "$T/out" | head -1; }
wait_until 30 hint || fail "no waiting line with the step's scancel within 30 s: $(cat "$T/out")"
step=$(hint | sed -E 's/.*`scancel ([0-9.]+)`.*/\1/')
scancel "$step"
wait_until 20 eval '! kill -0 "$SALLOC_PID" 2>/dev/null' || fail "scancel $step did not end the wait"
wait "$SALLOC_PID" || rc=$?
[ $rc -ne 124 ] || fail "the srun timed out instead: $(cat "$T/out")"
assert_no_job_left 15
echo "ok: a node that fails before it joins ends the step at once (port taken on node 0; program missing on node 2); a silent node 0's step is named for scancel"
