#!/usr/bin/env bash
# The multi-host test cluster (docs/design.md §8): N hosts on this machine, each a network
# namespace on one bridge with its own address, hostname and a real OpenSSH sshd, reached with
# keys made here.
#
#   cluster.sh up N          make host1..hostN (idempotent; re-run after a crash is safe)
#   cluster.sh down          kill every process in the hosts, remove namespaces, bridge, state
#   cluster.sh fixture-up N  as up, but exits 0 after the skip message where it cannot run (a
#                            ctest fixture setup; each test then skips by itself via can-run)
#   cluster.sh can-run       exit 0 where a cluster can be made, 77 with the reason otherwise
#   cluster.sh status        one line per host; exit 0 when every sshd answers
#   cluster.sh env           shell exports for tests:  eval "$(cluster.sh env)"
#   cluster.sh exec I CMD..  run CMD on host I (its namespace and its hostname)
#   cluster.sh stop-sshd I | start-sshd I
#   cluster.sh block-port I PORT | unblock-port I PORT   (TCP, inbound; needs nft)
#   cluster.sh drop I | undrop I      host I silently drops everything (no SYN-ACK, no RST)
#   cluster.sh link-down I | link-up I
#   cluster.sh set-hostkey I         give host I a new host key (known_hosts goes stale)
#
# Layout: bridge mlrt-br0 = 10.77.0.1/24 in the root namespace (the head runs there); host I is
# namespace mlrt-hI with eth0 = 10.77.0.(10+I), hostname hostI. No default route in the hosts and
# no forwarding: traffic stays between the root namespace and the hosts.
#
# MLRUN_CLUSTER_INSTANCE=2 makes a second cluster beside the first: namespaces mlrt2-hI, bridge
# mlrt2-br0 = 10.79.0.1/24, state in /tmp/mlrun-cluster-2 (10.78.0 is the Slurm cluster's,
# tests/slurm/slurm_cluster.sh). Two groups of tests then run at once, one on each
# (tests/cluster/CMakeLists.txt). `env` says which: tests use MLRUN_CLUSTER_SUBNET and
# MLRUN_CLUSTER_PREFIX, never the addresses above.
#
# Names: no /etc/hosts edits. $STATE/home/.ssh/config maps hostI to its address with Host/HostName,
# for programs that honour $HOME (mlrun's libssh wrapper). OpenSSH's ssh ignores $HOME (it reads
# the passwd entry), so OpenSSH users pass -F "$MLRUN_CLUSTER_SSH_CONFIG" (absolute key paths).
#
# Exit codes: 0 ok, 1 failure, 2 usage, 77 cannot run here (not root, no ip netns, no sshd).
set -euo pipefail

INSTANCE=${MLRUN_CLUSTER_INSTANCE:-1}
case $INSTANCE in
  1) PREFIX=mlrt SUBNET=10.77.0 STATE=${MLRUN_CLUSTER_DIR:-/tmp/mlrun-cluster} ;;
  2) PREFIX=mlrt2 SUBNET=10.79.0 STATE=${MLRUN_CLUSTER_DIR:-/tmp/mlrun-cluster-2} ;;
  *) echo "cluster.sh: MLRUN_CLUSTER_INSTANCE is 1 or 2, not '$INSTANCE'" >&2; exit 2 ;;
esac
BRIDGE=${PREFIX}-br0
MAX_HOSTS=64
# MLRUN_SSHD: another sshd (bench/ssh_floor_device.sh runs a carried one on a machine without
# openssh-server).
SSHD=${MLRUN_SSHD:-/usr/sbin/sshd}

die() { echo "cluster.sh: $*" >&2; exit 1; }
skip() { echo "cluster.sh: SKIP: $*" >&2; exit 77; }

ns_of() { echo "${PREFIX}-h$1"; }
addr_of() { echo "${SUBNET}.$((10 + $1))"; }
host_count() { [ -f "$STATE/hosts" ] && cat "$STATE/hosts" || echo 0; }

check_host_index() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(host_count)" ] ||
    die "no host '${1:-}' (the cluster has $(host_count) hosts)"
}

check_can_run() {
  [ "$(id -u)" -eq 0 ] || skip "the test cluster needs root (network namespaces, sshd)"
  command -v ip >/dev/null || skip "ip (iproute2) is not installed"
  command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
  [ -x "$SSHD" ] || skip "$SSHD not found: apt-get install openssh-server"
  command -v ssh-keygen >/dev/null || skip "ssh-keygen not found: apt-get install openssh-client"
  local probe=${PREFIX}-probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    skip "'ip netns add' does not work here (no CAP_SYS_ADMIN or no netns support)"
  fi
  ip netns del "$probe" 2>/dev/null || true
}

# Serialises up/down/status of concurrent callers (several ctest runs on one machine).
take_lock() {
  mkdir -p "$(dirname "$STATE")"
  exec 9>"$STATE.lock"
  flock -w 120 9 || die "another cluster.sh held $STATE.lock for 120 s"
}

# True when something accepts TCP on addr:22 within 0.3 s.
port_open() { timeout 0.3 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; }

sshd_pid() {
  local f="$STATE/host$1/sshd.pid"
  [ -s "$f" ] || return 1
  local pid
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# ip netns exec mounts a fresh /sys, without this machine's cgroup mounts. Where the machine has
# cgroup2, a host gets it back at /sys/fs/cgroup (the plain v2 layout): the same hierarchy, so a
# host's agents make their job cgroups as on a real node (docs/launcher.md, Teardown). Prints the
# shell words that do it (nothing where the machine has no cgroup2).
mount_cgroup2() {
  grep -q ' - cgroup2 ' /proc/self/mountinfo &&
    echo 'mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null;'
  true
}

start_sshd() {
  local i=$1 ns dir
  ns=$(ns_of "$i")
  dir="$STATE/host$i"
  sshd_pid "$i" >/dev/null && return 0
  rm -f "$dir/sshd.pid"
  # unshare --uts gives sshd (and every session it starts) its own hostname; ip netns exec alone
  # shares the UTS namespace with the root. setsid + /dev/null: nothing holds ctest's pipes.
  setsid ip netns exec "$ns" unshare --uts sh -c \
    "hostname host$i && $(mount_cgroup2) exec $SSHD -D -f '$dir/sshd_config' -E '$dir/sshd.log'" \
    </dev/null >/dev/null 2>&1 &
  local tries=0
  until port_open "$(addr_of "$i")"; do
    tries=$((tries + 1))
    [ $tries -le 100 ] || die "host$i: sshd did not listen within 10 s (see $dir/sshd.log)"
    sleep 0.1
  done
}

stop_sshd() {
  local i=$1 pid tries=0
  pid=$(sshd_pid "$i") || return 0
  kill "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    tries=$((tries + 1))
    [ $tries -le 50 ] || { kill -9 "$pid" 2>/dev/null || true; break; }
    sleep 0.1
  done
  rm -f "$STATE/host$i/sshd.pid"
}

write_sshd_config() {
  local i=$1 dir="$STATE/host$1"
  cat >"$dir/sshd_config" <<EOF
# host$i of the mlrun test cluster (written by tests/cluster/cluster.sh)
Port 22
ListenAddress 0.0.0.0
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
# $STATE lies under /tmp (mode 1777), which StrictModes would reject.
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthenticationMethods publickey
UsePAM no
UseDNS no
PrintMotd no
LogLevel INFO
MaxStartups 100:30:200
# Every session gets the head's (fake) home: its .ssh reaches every host (config, key,
# known_hosts), so an agent can start others (the launch tree, docs/multinode.md), and a login
# runs no ~/.bashrc (root's own runs pyenv here: 0.3 s a login, and lock waits when many start).
SetEnv HOME=$STATE/home
EOF
}

write_client_files() {
  local n=$1 i
  local ssh_dir="$STATE/home/.ssh"
  : >"$ssh_dir/config"
  : >"$STATE/ssh_config"
  : >"$ssh_dir/known_hosts"
  for ((i = 1; i <= n; i++)); do
    printf 'Host host%d\n  HostName %s\n' "$i" "$(addr_of "$i")" >>"$ssh_dir/config"
    printf 'Host host%d\n  HostName %s\n' "$i" "$(addr_of "$i")" >>"$STATE/ssh_config"
    printf 'host%d,%s %s\n' "$i" "$(addr_of "$i")" \
      "$(cut -d' ' -f1,2 "$STATE/host$i/ssh_host_ed25519_key.pub")" >>"$ssh_dir/known_hosts"
  done
  # For $HOME-honouring clients (libssh): keys and known_hosts come from $HOME/.ssh by default.
  printf 'Host host* %s.*\n  User root\n' "$SUBNET" >>"$ssh_dir/config"
  # For OpenSSH, which ignores $HOME: everything by absolute path, and never a prompt.
  cat >>"$STATE/ssh_config" <<EOF
Host host* $SUBNET.*
  User root
  IdentityFile $ssh_dir/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $ssh_dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOF
  chmod 600 "$ssh_dir/config" "$STATE/ssh_config"
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le $MAX_HOSTS ] ||
    { echo "usage: cluster.sh up N   (1 <= N <= $MAX_HOSTS)" >&2; exit 2; }
  check_can_run
  take_lock
  if [ "$(host_count)" = "$n" ] && all_up quiet; then
    write_env  # (a cluster made by an older cluster.sh lacks some of its lines)
    echo "cluster: $n hosts already up (state in $STATE)"
    return 0
  fi
  teardown
  mkdir -p "$STATE/home/.ssh" /run/sshd
  chmod 700 "$STATE" "$STATE/home/.ssh"
  echo "$n" >"$STATE/hosts"
  ssh-keygen -q -t ed25519 -N '' -C mlrun-cluster-client -f "$STATE/home/.ssh/id_ed25519"
  cp "$STATE/home/.ssh/id_ed25519.pub" "$STATE/authorized_keys"

  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i ns
  for ((i = 1; i <= n; i++)); do
    ns=$(ns_of "$i")
    mkdir -p "$STATE/host$i"
    ssh-keygen -q -t ed25519 -N '' -C "host$i" -f "$STATE/host$i/ssh_host_ed25519_key"
    write_sshd_config "$i"
    ip netns add "$ns"
    ip link add "${PREFIX}-v$i" type veth peer name eth0 netns "$ns"
    ip link set "${PREFIX}-v$i" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(addr_of "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  write_client_files "$n"
  write_env
  for ((i = 1; i <= n; i++)); do start_sshd "$i"; done
  echo "cluster: $n hosts up: host1..host$n = $(addr_of 1)..$(addr_of "$n"); eval \"\$($0 env)\""
}

write_env() {
  cat >"$STATE/env" <<EOF
export MLRUN_CLUSTER_INSTANCE=$INSTANCE
export MLRUN_CLUSTER_DIR='$STATE'
export MLRUN_CLUSTER_HOSTS=$(host_count)
export MLRUN_CLUSTER_SUBNET=$SUBNET
export MLRUN_CLUSTER_PREFIX=$PREFIX
export MLRUN_CLUSTER_HOME='$STATE/home'
export MLRUN_CLUSTER_SSH_CONFIG='$STATE/ssh_config'
export HOME='$STATE/home'
EOF
}

# Kills every process inside our namespaces (sshd and whatever its sessions left), removes the
# namespaces, the veths, the bridge and the state. Safe on a half-made or already-gone cluster.
teardown() {
  local ns pids tries
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}-h[0-9]*$" || true); do
    for sig in TERM KILL; do
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
    ip netns del "$ns" 2>/dev/null || true
  done
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep "^${PREFIX}-" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -rf "$STATE"
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || skip "the test cluster needs root"
  take_lock
  teardown
  echo "cluster: down"
}

all_up() {
  local n i bad=0
  n=$(host_count)
  [ "$n" -ge 1 ] || return 1
  for ((i = 1; i <= n; i++)); do
    if ! ip netns list | grep -q "^$(ns_of "$i")\b" || ! sshd_pid "$i" >/dev/null ||
      ! port_open "$(addr_of "$i")"; then
      bad=1
      [ "${1:-}" = quiet ] && return 1
    fi
  done
  return $bad
}

cmd_status() {
  local n i state
  n=$(host_count)
  if [ "$n" -eq 0 ]; then
    echo "cluster: down"
    return 1
  fi
  for ((i = 1; i <= n; i++)); do
    if ! ip netns list | grep -q "^$(ns_of "$i")\b"; then
      state="no namespace"
    elif ! sshd_pid "$i" >/dev/null; then
      state="sshd stopped"
    elif ! port_open "$(addr_of "$i")"; then
      state="sshd not answering"
    else
      state="up (sshd pid $(sshd_pid "$i"))"
    fi
    echo "host$i $(addr_of "$i") $(ns_of "$i"): $state"
  done
  all_up
}

cmd_env() {
  [ -f "$STATE/env" ] || die "the cluster is down: run cluster.sh up N first"
  cat "$STATE/env"
}

in_host() {
  local i=$1
  shift
  ip netns exec "$(ns_of "$i")" unshare --uts sh -c 'hostname "$0" && '"$(mount_cgroup2)"' exec "$@"' \
    "host$i" "$@"
}

nft_table() { echo "${PREFIX}_filter"; }

ensure_nft() {
  command -v nft >/dev/null || skip "nft not found: apt-get install nftables"
  local ns
  ns=$(ns_of "$1")
  ip netns exec "$ns" nft list table inet "$(nft_table)" >/dev/null 2>&1 && return 0
  ip netns exec "$ns" nft add table inet "$(nft_table)"
  ip netns exec "$ns" nft "add chain inet $(nft_table) input { type filter hook input priority 0; policy accept; }"
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
    status) cmd_status ;;
    env) cmd_env ;;
    exec)
      check_host_index "${1:-}"
      in_host "$@"
      ;;
    stop-sshd) check_host_index "${1:-}" && stop_sshd "$1" ;;
    start-sshd) check_host_index "${1:-}" && start_sshd "$1" ;;
    block-port | unblock-port)
      check_host_index "${1:-}"
      [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "usage: cluster.sh $cmd I PORT" >&2; exit 2; }
      ensure_nft "$1"
      if [ "$cmd" = block-port ]; then
        ip netns exec "$(ns_of "$1")" nft add rule inet "$(nft_table)" input tcp dport "$2" drop
      else
        local handle
        for handle in $(ip netns exec "$(ns_of "$1")" nft -a list chain inet "$(nft_table)" input |
          awk -v p="dport $2 drop" 'index($0, p) { print $NF }'); do
          ip netns exec "$(ns_of "$1")" nft delete rule inet "$(nft_table)" input handle "$handle"
        done
      fi
      ;;
    drop | undrop)
      # A blackhole route to the subnet: SYNs arrive but no reply can leave, so a client sees
      # silence until its own timeout, like a host behind a dropping firewall. Needs no netfilter.
      check_host_index "${1:-}"
      if [ "$cmd" = drop ]; then
        ip -n "$(ns_of "$1")" route replace blackhole "$SUBNET.0/25"
        ip -n "$(ns_of "$1")" route replace blackhole "$SUBNET.128/25"
      else
        ip -n "$(ns_of "$1")" route del blackhole "$SUBNET.0/25" 2>/dev/null || true
        ip -n "$(ns_of "$1")" route del blackhole "$SUBNET.128/25" 2>/dev/null || true
      fi
      ;;
    link-down) check_host_index "${1:-}" && ip -n "$(ns_of "$1")" link set eth0 down ;;
    link-up) check_host_index "${1:-}" && ip -n "$(ns_of "$1")" link set eth0 up ;;
    set-hostkey)
      check_host_index "${1:-}"
      rm -f "$STATE/host$1/ssh_host_ed25519_key"*
      ssh-keygen -q -t ed25519 -N '' -C "host$1-new" -f "$STATE/host$1/ssh_host_ed25519_key"
      stop_sshd "$1"
      start_sshd "$1"
      ;;
    *)
      sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
}

main "$@"
