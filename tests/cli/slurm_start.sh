# The start of a Slurm job (docs/slurm.md, "The agents' step") without a Slurm cluster: stand-ins
# for srun (every node's task here, with SLURMD_NODENAME and SLURM_LAUNCH_NODE_IPADDR as Slurm
# sets them) and scontrol (FAKE_SLURM_VERSION, FAKE_KILLWAIT). `scontrol show config` runs while
# srun starts the agents, so what it says must still hold: a refused version (20.11.0-20.11.2)
# or no answer ends the job before any worker starts, and each agent's grace period is cut to
# end within KillWait (KillWait 5 s: 3 s, however long --grace_period is); and no process of
# the job loads libssh.
source "$(dirname "$0")/common.sh"

mkdir -p "$T/bin"
cat >"$T/bin/srun" <<'SH'
#!/bin/bash
nodes=
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in --nodelist=*) nodes=${1#--nodelist=} ;; esac
  shift
done
IFS=, read -ra names <<<"$nodes"
for n in "${names[@]}"; do
  SLURMD_NODENAME=$n SLURM_LAUNCH_NODE_IPADDR=127.0.0.1 MLRUN_NODE_NAME=$n SLURM_STEP_ID=0 "$@" &
done
rc=0
for n in "${names[@]}"; do wait -n || rc=$?; done
exit $rc
SH
cat >"$T/bin/scontrol" <<'SH'
#!/bin/bash
[ "$1 $2" = "show config" ] || exit 1
if [ -n "${FAKE_SCONTROL_FAILS:-}" ]; then echo "slurm_load_ctl_conf error: Unable to contact slurm controller" >&2; exit 1; fi
echo "KillWait                = ${FAKE_KILLWAIT:-30} sec"
echo "SLURM_VERSION           = ${FAKE_SLURM_VERSION:-22.05.8}"
SH
chmod +x "$T/bin/srun" "$T/bin/scontrol"
export PATH="$T/bin:$PATH" SLURM_JOB_ID=4242 SLURM_JOB_NODELIST="${MARKER}-n[1-3]"
unset SLURM_STEP_ID SLURM_NTASKS SLURM_NTASKS_PER_NODE

write_worker worker.sh 'touch "$T/started.$RANK"; echo "rank $RANK on $MLRUN_NODE_NAME"'

# 1. A job on the three nodes.
run_mlrun "$T/worker.sh"
expect_rc 0
for r in 0 1 2; do expect_line "$T/out" "[$r] rank $r on ${MARKER}-n$((r + 1))"; done
rm -f "$T"/started.*

# 1b. Neither the head nor an agent loads libssh (it is opened only where SSH is used,
#     transport/libssh_lazy.h): the dynamic loader's list of what each process opened.
mkdir -p "$T/ld"
LD_DEBUG=files LD_DEBUG_OUTPUT="$T/ld/trace" run_mlrun "$T/worker.sh"
expect_rc 0
mlrun_traces=$(grep -l "needed by .*mlrun" "$T"/ld/trace.* | wc -l)
[ "$mlrun_traces" -ge 4 ] || fail "expected the loader's trace of 4 mlrun processes, got $mlrun_traces"
if grep -l 'file=libssh' "$T"/ld/trace.* >/dev/null; then
  fail "an mlrun process of a Slurm job loaded libssh: $(grep -h 'file=libssh' "$T"/ld/trace.* | head -1)"
fi
rm -rf "$T"/started.* "$T/ld"

# 2. A refused version: the job ends with the reason, no worker ran, nothing is left.
FAKE_SLURM_VERSION=20.11.1 run_mlrun "$T/worker.sh"
expect_rc 1
expect_grep "$T/err" 'Slurm 20\.11\.1 is not supported: 20\.11\.0 to 20\.11\.2 give every step'
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "a worker ran under a refused Slurm version"
assert_no_marker_left 10

# 3. No answer from scontrol: the same, with its error.
FAKE_SCONTROL_FAILS=1 run_mlrun "$T/worker.sh"
expect_rc 1
expect_grep "$T/err" 'scontrol show config failed: slurm_load_ctl_conf error: Unable to contact'
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "a worker ran without Slurm's configuration"
assert_no_marker_left 10

# 4. KillWait 5 s: Slurm's SIGTERM to every task (here: to each agent); each agent stops its
#    workers, which ignore SIGTERM, with SIGKILL after 3 s, not after --grace_period's 20 s.
write_worker stubborn.sh 'trap "" TERM; touch "$T/started.$RANK"; while :; do "$T/sleep" 0.1; done'
FAKE_KILLWAIT=5 start_mlrun --grace_period=20 "$T/stubborn.sh"
wait_until 30 eval '[ "$(count_files "$T/started.*")" -eq 3 ]' || fail "3 workers did not start"
srun_pid=$(pgrep -f -- "^/bin/bash $T/bin/srun") || fail "no srun stand-in running"
agents=$(pgrep -P "$srun_pid" | paste -sd' ')
[ "$(echo "$agents" | wc -w)" -eq 3 ] || fail "not 3 agents under srun: '$agents'"
# shellcheck disable=SC2086
kill -TERM $agents
workers_gone() { ! pgrep -f -- "$T/stubborn.sh" >/dev/null; }
wait_until 12 workers_gone || fail "workers still running 12 s after SIGTERM (grace not cut to KillWait)"
wait_mlrun 20
expect_rc 1
assert_no_marker_left 10
echo "ok: start, no libssh loaded, refused version, no scontrol answer, grace within KillWait"
