#!/usr/bin/env bash
# A real Slurm cluster on this machine for the Slurm tests (issue 11): slurmctld and a private
# munged in the root namespace, one slurmd per network-namespace host. Modelled on
# tests/cluster/cluster.sh, with names of its own so both clusters can exist at once.
#
#   slurm_cluster.sh up N          make sn01..snNN (N <= 16) and wait until every node is idle
#   slurm_cluster.sh down          stop the daemons and every job process, remove namespaces, state
#   slurm_cluster.sh fixture-up N  as up, but exits 0 after the skip message where it cannot run
#   slurm_cluster.sh can-run       exit 0 where a cluster can be made, 77 with the reason otherwise
#   slurm_cluster.sh env           shell exports for tests:  eval "$(slurm_cluster.sh env)"
#   slurm_cluster.sh exec I CMD..  run CMD on node I (its namespace and hostname)
#   slurm_cluster.sh kill-node I   node I crashes: SIGKILL to its slurmd and every process in it
#   slurm_cluster.sh start-node I  start node I's slurmd again; wait until every node is idle
#
# Layout: bridge mlsl-br0 = 10.78.0.1/24 in the root namespace (slurmctld, salloc and sbatch run
# there); node I is namespace mlsl-nI, eth0 = 10.78.0.(10+I), hostname snII (zero-padded: the
# allocation's node list reads "sn[01-03]"). Ports 6917 (slurmctld) and 6918 (slurmd) keep off a
# system Slurm. State, config, logs: $MLRUN_SLURM_DIR (default /tmp/mlrun-slurm).
#
# How Slurm 22.05 was made to run in namespaces (pitfalls that cost hours): slurmd dies under
# `ip netns exec`, which remounts /sys ("No filesystem mounted on /sys/fs/cgroup"), so each slurmd
# enters its namespace with nsenter; cgroup-free plugins (proctrack/linuxproc, task/none,
# jobacct_gather/none); every node has NodeAddr; per-node spool, pid, log and TmpFS paths (%n),
# since every slurmd shares this file system.
#
# Exit codes: 0 ok, 1 failure, 2 usage, 77 cannot run here (not root, no netns, no Slurm).
set -euo pipefail

PREFIX=mlsl
BRIDGE=${PREFIX}-br0
SUBNET=10.78.0
STATE=${MLRUN_SLURM_DIR:-/tmp/mlrun-slurm}
MAX_NODES=16
CTLD_PORT=6917
SLURMD_PORT=6918

die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }
skip() { echo "slurm_cluster.sh: SKIP: $*" >&2; exit 77; }

ns_of() { echo "${PREFIX}-n$1"; }
addr_of() { echo "${SUBNET}.$((10 + $1))"; }
name_of() { printf 'sn%02d' "$1"; }
node_count() { [ -f "$STATE/nodes" ] && cat "$STATE/nodes" || echo 0; }

check_can_run() {
  [ "$(id -u)" -eq 0 ] || skip "the Slurm test cluster needs root (network namespaces, slurmd)"
  local tool
  for tool in ip nsenter unshare setpriv slurmctld slurmd munged srun sbatch salloc scontrol; do
    command -v "$tool" >/dev/null ||
      skip "$tool not found: apt-get install slurmctld slurmd slurm-client munge (tools/install-deps.sh)"
  done
  local probe=${PREFIX}-probe$$
  ip netns add "$probe" 2>/dev/null ||
    skip "'ip netns add' does not work here (no CAP_SYS_ADMIN or no netns support)"
  ip netns del "$probe" 2>/dev/null || true
}

take_lock() {
  mkdir -p "$(dirname "$STATE")"
  exec 9>"$STATE.lock"
  flock -w 120 9 || die "another slurm_cluster.sh held $STATE.lock for 120 s"
}

write_conf() {
  local n=$1 i
  cat >"$STATE/slurm.conf" <<EOF
# The mlrun Slurm test cluster (written by tests/slurm/slurm_cluster.sh)
ClusterName=mlrun-test
SlurmctldHost=$(hostname -s)($SUBNET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket=$STATE/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdSpoolDir=$STATE/spool/%n
SlurmdPidFile=$STATE/spool/%n.pid
SlurmdLogFile=$STATE/log/%n.log
TmpFS=$STATE/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/linear
SchedulerType=sched/builtin
ReturnToService=2
KillWait=5
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
MinJobAge=60
SlurmctldParameters=preempt_send_user_signal
EOF
  for ((i = 1; i <= n; i++)); do
    echo "NodeName=$(name_of "$i") NodeAddr=$(addr_of "$i") CPUs=2 State=UNKNOWN" >>"$STATE/slurm.conf"
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$STATE/slurm.conf"
}

start_munge() {
  mkdir -p "$STATE/munge"
  dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  chown -R munge:munge "$STATE/munge"
  chmod 0700 "$STATE/munge"
  chmod 0400 "$STATE/munge/munge.key"
  # munged refuses a socket directory others cannot search: clients connect through it.
  chmod 0755 "$STATE/munge"
  setsid setpriv --reuid=munge --regid=munge --init-groups munged --force \
    --socket="$STATE/munge/munge.socket" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --seed-file="$STATE/munge/munged.seed" \
    --log-file="$STATE/munge/munged.log" </dev/null >/dev/null 2>&1 9>&-
  local tries=0
  until [ -S "$STATE/munge/munge.socket" ]; do
    tries=$((tries + 1))
    [ $tries -le 100 ] || die "munged did not start within 10 s (see $STATE/munge/munged.log)"
    sleep 0.1
  done
}

start_slurmd() {
  local i=$1 name
  name=$(name_of "$i")
  mkdir -p "$STATE/spool/$name" "$STATE/tmp/$name"
  setsid nsenter --net="/run/netns/$(ns_of "$i")" unshare --uts sh -c \
    "hostname $name && exec slurmd -D -N $name -f '$STATE/slurm.conf'" \
    </dev/null >>"$STATE/log/$name.out" 2>&1 9>&- &
}

# Waits until every node is idle (slurmd registered), up to 30 s.
wait_idle() {
  local n=$1 tries=0 idle
  while true; do
    idle=$(SLURM_CONF="$STATE/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$' || true)
    [ "$idle" -ge "$n" ] && return 0
    tries=$((tries + 1))
    [ $tries -le 300 ] || die "only $idle of $n nodes idle after 30 s (see $STATE/log, $STATE/slurmctld.log)"
    sleep 0.1
  done
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le $MAX_NODES ] ||
    { echo "usage: slurm_cluster.sh up N   (1 <= N <= $MAX_NODES)" >&2; exit 2; }
  check_can_run
  take_lock
  teardown
  mkdir -p "$STATE/ctld" "$STATE/log" "$STATE/spool" "$STATE/tmp"
  echo "$n" >"$STATE/nodes"
  write_conf "$n"
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i ns
  for ((i = 1; i <= n; i++)); do
    ns=$(ns_of "$i")
    ip netns add "$ns"
    ip link add "${PREFIX}-v$i" type veth peer name eth0 netns "$ns"
    ip link set "${PREFIX}-v$i" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(addr_of "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  start_munge
  write_env
  setsid slurmctld -D -i -f "$STATE/slurm.conf" </dev/null >"$STATE/slurmctld.out" 2>&1 9>&- &
  for ((i = 1; i <= n; i++)); do start_slurmd "$i"; done
  wait_idle "$n"
  echo "slurm cluster: $n nodes up: $(name_of 1)..$(name_of "$n") = $(addr_of 1)..$(addr_of "$n"); eval \"\$($0 env)\""
}

write_env() {
  cat >"$STATE/env" <<EOF
export MLRUN_SLURM_DIR='$STATE'
export MLRUN_SLURM_NODES=$(node_count)
export SLURM_CONF='$STATE/slurm.conf'
EOF
}

# kill_ns NS [SIGNALS]: every process in NS gets each signal in turn (default TERM, then KILL).
kill_ns() {
  local ns=$1 sig pids tries
  for sig in ${2:-TERM KILL}; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -s $sig $pids 2>/dev/null || true
    tries=0
    while [ -n "$(ip netns pids "$ns" 2>/dev/null || true)" ] && [ $tries -lt 20 ]; do
      sleep 0.1
      tries=$((tries + 1))
    done
  done
}

kill_pidfile() {
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  kill -9 "$pid" 2>/dev/null || true
}

# Stops every daemon and job process, removes namespaces, veths, bridge and state. Safe on a
# half-made or already-gone cluster.
teardown() {
  local ns link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}-n[0-9]*$" || true); do
    kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
  kill_pidfile "$STATE/slurmctld.pid"
  kill_pidfile "$STATE/munge/munged.pid"
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep "^${PREFIX}-" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -rf "$STATE"
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || skip "the Slurm test cluster needs root"
  take_lock
  teardown
  echo "slurm cluster: down"
}

check_node() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(node_count)" ] ||
    die "no node '${1:-}' (the cluster has $(node_count) nodes)"
}

main() {
  local cmd=${1:-}
  shift || true
  case "$cmd" in
    up) cmd_up "$@" ;;
    fixture-up)
      local rc=0
      (cmd_up "$@") || rc=$?
      [ $rc -eq 77 ] && return 0
      return $rc
      ;;
    can-run) check_can_run ;;
    down) cmd_down ;;
    env)
      [ -f "$STATE/env" ] || die "the Slurm cluster is down: run slurm_cluster.sh up N first"
      cat "$STATE/env"
      ;;
    exec)
      check_node "${1:-}"
      local i=$1
      shift
      nsenter --net="/run/netns/$(ns_of "$i")" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
        "$(name_of "$i")" "$@"
      ;;
    kill-node) check_node "${1:-}" && kill_ns "$(ns_of "$1")" KILL ;;
    start-node)
      check_node "${1:-}"
      start_slurmd "$1"
      wait_idle "$(node_count)"
      ;;
    *)
      sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
}

main "$@"
