#!/usr/bin/env bash
# Issue 4's launch benchmark on the namespace cluster: for 3 and 8 hosts (2 slots each), the
# median wall time of running `hostname` on every slot with
#   floor    bench/ssh_floor: libssh, every host at once, one exec running `hostname` per slot
#   floornd  the same with --nodelay: TCP_NODELAY on each connection, as mlrun sets it (Nagle's
#            algorithm and delayed ACKs cost libssh's default ~40 ms a launch)
#   mlrun    mlrun --hostfile FILE hostname (the rendezvous, an agent per host over libssh,
#            2 workers per agent, output relayed): the tool under test
#   mpirun   mpirun --hostfile (Open MPI over ssh), `hostname` on every slot, when installed
#   openssh  one OpenSSH client per host, in parallel, same command
#   wrapper  transport/ssh_session.h's connect_all + RemoteCommand (tests/cluster/ssh_probe), when
#            MLRUN_SSH_PROBE names that binary
#
#   bench/ssh_floor.sh SSH_FLOOR_BINARY [REPEATS]      (root; brings the cluster up and down)
#   MLRUN=path/to/mlrun (default: mlrun on PATH)  SIZES="3 8" (default)
#   TREE_WIDTH=W   also time mlrun --tree_width W ("tree"; flat "mlrun" runs with a width
#                  above every size, so at sizes past W the two columns are tree on and off)
#   OPENSSH=0      leave out the OpenSSH column (its clients have hung on these hosts)
#   MPIRUN=0       leave out the mpirun column
#   MLRUN_OLD=path another mlrun build ("old", e.g. main's), timed flat in the same turns, so
#                  that a change is measured side by side with what it changes
#   CPU=1          also the whole machine's CPU time of each run (every process and the kernel,
#                  non-idle ticks of /proc/stat, 10 ms each, so the mean over the repeats; in a
#                  VM steal time too): with hosts sharing few cores, wall time is this CPU
#                  spread over them
#   VV_DIR=DIR     keep VV_RUNS (default 1) `mlrun -vv` logs a size there (DIR/vv_N_K.log): each
#                  connect, the hand-over, each agent up, the join, the job's end
#
# The tools take turns within each repeat (floor, mlrun, mpirun, ...; then again), so a change
# in the machine's load falls on all of them alike. Each mlrun run must print exactly one
# hostname per slot and nothing on stderr (libssh's log must never reach the terminal; the
# remote login shell's pyenv noise is let through).
# Prints one line per tool and size, "N hosts  TOOL  median X.XXX s  (min .. max)", then a
# table of mlrun's ratios to the floor and to mpirun.
#
# Every tool is given the hosts' addresses, not the host1.. aliases: those live only in the
# cluster's ssh config, and mpirun also resolves hostfile names itself, which here sometimes
# stalls 5 s in the system resolver (a DNS timeout), hiding the launch time.
set -euo pipefail
floor_bin=${1:?usage: ssh_floor.sh SSH_FLOOR_BINARY [REPEATS]}
repeats=${2:-7}
sizes=${SIZES:-3 8}
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../tests/cluster/cluster.sh
MLRUN=${MLRUN:-$(command -v mlrun || true)}
# Absolute: the warm-up runs it from /tmp.
[ -z "$MLRUN" ] || MLRUN=$(realpath "$MLRUN")
[ -n "$MLRUN" ] && [ -x "$MLRUN" ] ||
  { echo "ssh_floor.sh: set MLRUN to the mlrun binary (e.g. build/launcher/mlrun)" >&2; exit 2; }
MLRUN_OLD=${MLRUN_OLD:-}
[ -z "$MLRUN_OLD" ] || MLRUN_OLD=$(realpath "$MLRUN_OLD")
[ -z "$MLRUN_OLD" ] || [ -x "$MLRUN_OLD" ] ||
  { echo "ssh_floor.sh: MLRUN_OLD=$MLRUN_OLD is not an executable" >&2; exit 2; }
results=$(mktemp -d "${TMPDIR:-/tmp}/ssh-floor.XXXXXX")
trap '"$cluster" down >/dev/null; rm -rf "$results"' EXIT

median_of() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }
summary_of() {
  sort -n "$1" | awk '{a[NR]=$1} END {printf "median %.3f s  (%.3f .. %.3f)", a[int((NR+1)/2)], a[1], a[NR]}'
}

# time_it NAME CMD...: appends the wall seconds of one run to $results/NAME.$n; fails (with the
# command's stderr) if the command fails.
# Non-idle CPU seconds of the whole machine so far (CPU=1).
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8+$9)/100; exit}' /proc/stat; }

# time_it NAME CMD...: appends the wall seconds of one run to $results/NAME.$n (CPU=1: the
# machine's CPU seconds to $results/NAME.$n.cpu); fails (with the command's stderr) if the
# command fails.
time_it() {
  local name=$1 t0 t1 c0=0 c1=0
  shift
  [ "${CPU:-0}" = 0 ] || c0=$(busy)
  t0=$(date +%s%N)
  "$@" >"$state/last.out" 2>"$state/last.err" || { cat "$state/last.err" >&2; return 1; }
  t1=$(date +%s%N)
  [ "${CPU:-0}" = 0 ] || c1=$(busy)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1e9 }' >>"$results/$name.$n"
  [ "${CPU:-0}" = 0 ] || echo "$c0 $c1" | awk '{ print $2 - $1 }' >>"$results/$name.$n.cpu"
}

openssh_parallel() {
  local i pids=()
  for ((i = 1; i <= n; i++)); do
    ssh -F "$MLRUN_CLUSTER_SSH_CONFIG" "10.77.0.$((10 + i))" 'hostname & hostname & wait' &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

shell_noise='^(pyenv: |rm: cannot remove .*/\.pyenv/)'

# mlrun must have run a worker on every slot (one hostname per slot, host1 twice, ...) and said
# nothing on stderr.
check_mlrun_output() {
  local want got
  want=$(for ((i = 1; i <= n; i++)); do echo "host$i"; echo "host$i"; done | sort)
  got=$(sed -E 's/^\[[0-9]+\] //' "$state/last.out" | sort)
  [ "$got" = "$want" ] || { echo "mlrun printed:" >&2; cat "$state/last.out" >&2; return 1; }
  # The remote login shell's own noise (root's .bashrc runs `pyenv init` here, which now and
  # then fails to rehash when several shells start at once) is not mlrun's.
  if grep -vE "$shell_noise" "$state/last.err" | grep -q .; then
    echo "mlrun wrote to stderr:" >&2
    cat "$state/last.err" >&2
    return 1
  fi
}

for n in $sizes; do
  "$cluster" up "$n" >/dev/null
  eval "$("$cluster" env)"
  state=$MLRUN_CLUSTER_DIR
  hostfile=$state/hostfile
  : >"$hostfile"
  for ((i = 1; i <= n; i++)); do echo "10.77.0.$((10 + i)) slots=2" >>"$hostfile"; done
  hosts=$(seq -f '10.77.0.%g' 11 $((10 + n)))
  # Warm the page cache and each sshd's first fork, for every tool.
  # shellcheck disable=SC2086
  "$floor_bin" $hosts >/dev/null
  (cd /tmp && "$MLRUN" --hostfile "$hostfile" hostname >/dev/null)
  [ -z "$MLRUN_OLD" ] || (cd /tmp && "$MLRUN_OLD" --hostfile "$hostfile" hostname >/dev/null)
  for ((k = 1; k <= ${VV_RUNS:-1}; k++)); do
    [ -z "${VV_DIR:-}" ] || (cd /tmp && "$MLRUN" -vv --tree_width 1000 --hostfile "$hostfile" \
      hostname >/dev/null 2>"$VV_DIR/vv_${n}_$k.log")
  done
  for ((r = 0; r < repeats; r++)); do
    # shellcheck disable=SC2086
    time_it floor "$floor_bin" --slots 2 $hosts
    # shellcheck disable=SC2086
    time_it floornd "$floor_bin" --nodelay --slots 2 $hosts
    time_it mlrun "$MLRUN" --tree_width 1000 --hostfile "$hostfile" hostname
    check_mlrun_output
    if [ -n "$MLRUN_OLD" ]; then
      time_it old "$MLRUN_OLD" --tree_width 1000 --hostfile "$hostfile" hostname
      check_mlrun_output
    fi
    if [ -n "${TREE_WIDTH:-}" ]; then
      time_it tree "$MLRUN" --tree_width "$TREE_WIDTH" --hostfile "$hostfile" hostname
      check_mlrun_output
    fi
    if [ "${MPIRUN:-1}" != 0 ] && command -v mpirun >/dev/null; then
      time_it mpirun mpirun --allow-run-as-root --hostfile "$hostfile" -np $((2 * n)) \
        --mca plm_rsh_agent "ssh -F $MLRUN_CLUSTER_SSH_CONFIG" \
        --mca oob_tcp_if_include 10.77.0.0/24 hostname
    fi
    [ "${OPENSSH:-1}" = 0 ] || time_it openssh openssh_parallel
    if [ -n "${MLRUN_SSH_PROBE:-}" ]; then
      # shellcheck disable=SC2086
      time_it wrapper "$MLRUN_SSH_PROBE" run 'hostname & hostname & wait' $hosts </dev/null
    fi
  done
  for tool in floor floornd mlrun old tree mpirun openssh wrapper; do
    [ -s "$results/$tool.$n" ] || continue
    printf '%s hosts  %-8s %s\n' "$n" "$tool" "$(summary_of "$results/$tool.$n")"
    [ -s "$results/$tool.$n.cpu" ] || continue
    awk -v n="$n" '{ s += $1 } END {
      printf "          cpu %.3f s (mean), %.1f ms a host\n", s / NR, 1000 * s / NR / n }' \
      "$results/$tool.$n.cpu"
  done
  echo
done

# mlrun against the floors and mpirun, and how each grows from the first size to the last.
row='%-6s %-9s %-9s %-9s %-9s %-9s %-9s %-13s %-14s %-13s %-13s %-13s\n'
# shellcheck disable=SC2059 # the row format, kept in one place
printf "$row" hosts floor floornd mlrun old tree mpirun mlrun/floor mlrun/floornd old/floor \
  tree/floor mlrun/mpirun
for n in $sizes; do
  f=$(median_of "$results/floor.$n")
  d=$(median_of "$results/floornd.$n")
  m=$(median_of "$results/mlrun.$n")
  t=$([ -s "$results/tree.$n" ] && median_of "$results/tree.$n" || echo -)
  o=$([ -s "$results/old.$n" ] && median_of "$results/old.$n" || echo -)
  p=$([ -s "$results/mpirun.$n" ] && median_of "$results/mpirun.$n" || echo -)
  awk -v n="$n" -v f="$f" -v d="$d" -v m="$m" -v o="$o" -v t="$t" -v p="$p" -v row="$row" '
    function x(a, b) { return (a == "-" || b == "-") ? "-" : sprintf("%.2fx", a / b) }
    BEGIN { printf row, n, f, d, m, o, t, p, x(m, f), x(m, d), x(o, f), x(t, f), x(m, p) }'
done
set -- $sizes
if [ $# -ge 2 ]; then
  first=$1
  last=${!#}
  awk -v a="$(median_of "$results/floor.$first")" -v b="$(median_of "$results/floor.$last")" \
    -v e="$(median_of "$results/floornd.$first")" -v f="$(median_of "$results/floornd.$last")" \
    -v c="$(median_of "$results/mlrun.$first")" -v d="$(median_of "$results/mlrun.$last")" \
    -v x="$first" -v y="$last" 'BEGIN {
      printf "growth %s -> %s hosts: floor %+.3f s, floornd %+.3f s, mlrun %+.3f s\n", x, y, b - a,
        f - e, d - c }'
  if [ -n "$MLRUN_OLD" ]; then
    awk -v a="$(median_of "$results/old.$first")" -v b="$(median_of "$results/old.$last")" \
      'BEGIN { printf "  old %+.3f s\n", b - a }'
  fi
fi
