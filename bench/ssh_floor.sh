#!/usr/bin/env bash
# Issue 4's launch floor on the namespace cluster: for 3 and 8 hosts (2 slots each), the median
# wall time of
#   floor    bench/ssh_floor: libssh, every host at once, one exec running `hostname` per slot
#   openssh  one OpenSSH client per host, in parallel, same command
#   mpirun   mpirun --hostfile (Open MPI over ssh), `hostname` on every slot
#   wrapper  launcher/ssh.h's connect_all + RemoteCommand (tests/cluster/ssh_probe), when
#            MLRUN_SSH_PROBE names that binary
#   mlrun    mlrun --hostfile ... hostname, when MLRUN is set to a multi-host capable binary
#
#   bench/ssh_floor.sh SSH_FLOOR_BINARY [REPEATS]      (root; brings the cluster up and down)
#
# Prints one line per tool and size: "N hosts  TOOL  median X.XXX s  (min .. max)".
#
# Every tool is given the hosts' addresses, not the host1.. aliases: those live only in the
# cluster's ssh config, and mpirun also resolves hostfile names itself, which here sometimes
# stalls 5 s in the system resolver (a DNS timeout), hiding the launch time.
set -euo pipefail
floor_bin=${1:?usage: ssh_floor.sh SSH_FLOOR_BINARY [REPEATS]}
repeats=${2:-7}
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../tests/cluster/cluster.sh
trap '"$cluster" down >/dev/null' EXIT

median() { sort -n | awk '{a[NR]=$1} END {printf "median %.3f s  (%.3f .. %.3f)", a[int((NR+1)/2)], a[1], a[NR]}'; }

# time_it CMD...: prints the wall seconds of one run; fails if the command fails.
time_it() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>"$state/last.err" || { cat "$state/last.err" >&2; return 1; }
  t1=$(date +%s%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1e9 }'
}

openssh_parallel() {
  local i pids=()
  for ((i = 1; i <= n; i++)); do
    ssh -F "$MLRUN_CLUSTER_SSH_CONFIG" "10.77.0.$((10 + i))" 'hostname & hostname & wait' &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

for n in 3 8; do
  "$cluster" up "$n" >/dev/null
  eval "$("$cluster" env)"
  state=$MLRUN_CLUSTER_DIR
  hostfile=$state/hostfile
  : >"$hostfile"
  for ((i = 1; i <= n; i++)); do echo "10.77.0.$((10 + i)) slots=2" >>"$hostfile"; done
  hosts=$(seq -f '10.77.0.%g' 11 $((10 + n)))
  # shellcheck disable=SC2086
  "$floor_bin" $hosts >/dev/null  # warm the page cache and sshd's first fork

  # shellcheck disable=SC2086
  for ((r = 0; r < repeats; r++)); do time_it "$floor_bin" --slots 2 $hosts; done |
    median | sed "s/^/$n hosts  floor    /"
  echo
  for ((r = 0; r < repeats; r++)); do time_it openssh_parallel; done |
    median | sed "s/^/$n hosts  openssh  /"
  echo
  if [ -n "${MLRUN_SSH_PROBE:-}" ]; then
    # shellcheck disable=SC2086
    for ((r = 0; r < repeats; r++)); do
      time_it "$MLRUN_SSH_PROBE" run 'hostname & hostname & wait' $hosts </dev/null
    done | median | sed "s/^/$n hosts  wrapper  /"
    echo
  fi
  if command -v mpirun >/dev/null; then
    for ((r = 0; r < repeats; r++)); do
      time_it mpirun --allow-run-as-root --hostfile "$hostfile" -np $((2 * n)) \
        --mca plm_rsh_agent "ssh -F $MLRUN_CLUSTER_SSH_CONFIG" \
        --mca oob_tcp_if_include 10.77.0.0/24 hostname
    done | median | sed "s/^/$n hosts  mpirun   /"
    echo
  fi
  if [ -n "${MLRUN:-}" ]; then
    for ((r = 0; r < repeats; r++)); do time_it "$MLRUN" --hostfile "$hostfile" hostname; done |
      median | sed "s/^/$n hosts  mlrun    /"
    echo
  fi
done
