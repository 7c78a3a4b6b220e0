#!/usr/bin/env bash
# Where a multi-host launch's time goes (issue 15): for each size, the wall time and the whole
# machine's CPU time (every process and the kernel, from /proc/stat) of one launch of the libssh
# floor (with --nodelay, as mlrun sets it) and of mlrun, side by side in turns, on the namespace
# cluster (bench/ssh_floor.sh's setup: 2 slots a host, `hostname` on each). With many hosts on
# few cores the wall time is the machine's CPU time spread over its cores; on as many cores as
# hosts it is not. The CPU figure is /proc/stat's ticks around each launch (10 ms each), so it
# is the mean over the repeats; in a VM it counts steal time too.
#   bench/ssh_cpu.sh SSH_FLOOR_BINARY [REPEATS]     (root; MLRUN, SIZES as in ssh_floor.sh)
# VV_DIR=DIR also keeps VV_RUNS (default 1) `mlrun -vv` logs a size there (DIR/vv_N_K.log), to
# read the timeline: each connect, the hand-over, each agent up, the join, the job's end.
set -euo pipefail
floor_bin=${1:?usage: ssh_cpu.sh SSH_FLOOR_BINARY [REPEATS]}
repeats=${2:-7}
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../tests/cluster/cluster.sh
MLRUN=$(realpath "${MLRUN:-$(command -v mlrun)}")
trap '"$cluster" down >/dev/null' EXIT
# Non-idle CPU seconds of the whole machine so far.
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8+$9)/100; exit}' /proc/stat; }
ns() { date +%s%N; }
for n in ${SIZES:-3 8 16 24}; do
  "$cluster" up "$n" >/dev/null
  eval "$("$cluster" env)"
  hostfile=$MLRUN_CLUSTER_DIR/hostfile
  : >"$hostfile"
  for ((i = 1; i <= n; i++)); do echo "10.77.0.$((10 + i)) slots=2" >>"$hostfile"; done
  hosts=$(seq -f '10.77.0.%g' 11 $((10 + n)))
  # shellcheck disable=SC2086
  "$floor_bin" $hosts >/dev/null
  (cd /tmp && "$MLRUN" --hostfile "$hostfile" hostname >/dev/null)
  for ((k = 1; k <= ${VV_RUNS:-1}; k++)); do
    [ -z "${VV_DIR:-}" ] || (cd /tmp && "$MLRUN" -vv --tree_width 1000 --hostfile "$hostfile" \
      hostname >/dev/null 2>"$VV_DIR/vv_${n}_$k.log")
  done
  for tool in floor mlrun; do : >"/tmp/ssh_cpu.$tool"; done
  for ((r = 0; r < repeats; r++)); do
    for tool in floor mlrun; do
      c0=$(busy) t0=$(ns)
      if [ $tool = floor ]; then
        # shellcheck disable=SC2086
        "$floor_bin" --nodelay --slots 2 $hosts >/dev/null
      else
        (cd /tmp && "$MLRUN" --tree_width 1000 --hostfile "$hostfile" hostname >/dev/null)
      fi
      t1=$(ns) c1=$(busy)
      awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" 'BEGIN{printf "%.4f %.3f\n",(b-a)/1e9,d-c}' \
        >>"/tmp/ssh_cpu.$tool"
    done
  done
  for tool in floor mlrun; do
    w=$(cut -d' ' -f1 "/tmp/ssh_cpu.$tool" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
    # /proc/stat counts in ticks (10 ms): the mean over the repeats, not a median of ticks.
    c=$(awk '{s+=$2} END{print s/NR}' "/tmp/ssh_cpu.$tool")
    awk -v n="$n" -v t="$tool" -v w="$w" -v c="$c" \
      'BEGIN{printf "%2d hosts  %-6s wall %.3f s (median)  cpu %.3f s (mean) (%.1f ms a host)\n",
        n, t, w, c, 1000*c/n}'
  done
done
