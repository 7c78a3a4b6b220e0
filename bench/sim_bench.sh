#!/usr/bin/env bash
# Issue 15's simulation benchmark: a job of N simulated nodes x W workers on this machine
# (--launcher sim, transport/local.h: each node a real `mlrun agent` with its own name, joining the
# head's real rendezvous server over TCP). For each N in $SIZES and W in $WORKERS, two runs:
#   start     launch -> every worker running (each worker stamps $EPOCHREALTIME first thing)
#   failure   one worker exits 3 -> mlrun exits (every worker stopped by then) -> nothing left
#   ctrl-c    SIGINT to mlrun -> nothing left (no agent, lifeline or worker)
# plus the head's peak RSS (VmHWM; it serves the rendezvous) and its CPU seconds up to the
# failure or SIGINT, and the 1-minute load average before each run.
#
#   bench/sim_bench.sh MLRUN [SIZES] [WORKERS]      e.g. bench/sim_bench.sh build/mlrun "64 256 1024" "1 8"
# TREE_WIDTH=W passes --tree_width W: past W nodes the head starts W agents and they start the
# rest, as over SSH (docs/multinode.md "The launch tree"). The default, 16384, is the flat launch
# (the head starts every agent), which the runs before the simulated tree measured.
# HEARTBEAT_TIMEOUT=S passes --rdzv_conf heartbeat_timeout=S: at 1,024 x 8 on two cores an agent
# can go without CPU past the default 30 s, and the server then ends the job as for a hung node.
# Prints one line per run. Needs ulimit -n above 3 x N + 100 for the head (the script raises it).
set -euo pipefail
MLRUN=$(realpath "${1:?usage: sim_bench.sh MLRUN [SIZES] [WORKERS]}")
sizes=${2:-64 256 1024}
workers=${3:-1 8}
tree_width=${TREE_WIDTH:-16384}
rdzv_conf=heartbeat_timeout=${HEARTBEAT_TIMEOUT:-30}
ulimit -n 20000 2>/dev/null || true
D=$(mktemp -d "${TMPDIR:-/tmp}/mlrun-simbench.XXXXXX")
ln -s "$(command -v sleep)" "$D/sleep"
# pkill finds nothing after a clean run (status 1), which set -e would make the script's status,
# leaving $D behind.
trap 'pkill -KILL -f "$D/" 2>/dev/null || true; rm -rf "$D"' EXIT
cat >"$D/worker.sh" <<W
#!/bin/bash
echo \$EPOCHREALTIME >"$D/up/\$RANK"
if [ "\$RANK" = "\$FAIL_RANK" ]; then
  while [ ! -e "$D/fail" ]; do "$D/sleep" 0.05; done
  echo \$EPOCHREALTIME >"$D/failed"; exit 3
fi
exec "$D/sleep" 1000
W
chmod +x "$D/worker.sh"
now() { date +%s.%N; }
left() { pgrep -f "$D/" | wc -l; pgrep -f "^$MLRUN agent" | wc -l; }
nothing_left() { [ "$(pgrep -f "$D/" | wc -l)" -eq 0 ] && [ "$(pgrep -f "^$MLRUN agent" | wc -l)" -eq 0 ]; }
wait_nothing_left() { while ! nothing_left; do sleep 0.02; done; now; }
cpu_of() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }
hwm_of() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

run_one() {  # N W MODE
  local n=$1 w=$2 mode=$3 total=$(($1 * $2)) fail=-1 t0 pid up last t1 t2 cpu hwm load
  for ((i = 0; i < n; i++)); do echo "sim$i slots=$w"; done >"$D/hostfile"
  rm -rf "$D/up" "$D/fail" "$D/failed"; mkdir "$D/up"
  [ "$mode" = failure ] && fail=$((total / 2 + 1))
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(now)
  "$MLRUN" --launcher sim --hostfile "$D/hostfile" --tree_width "$tree_width" \
    --rdzv_conf "$rdzv_conf" -x "FAIL_RANK=$fail" "$D/worker.sh" >/dev/null 2>"$D/err" &
  pid=$!
  while [ "$(ls "$D/up" | wc -l)" -lt "$total" ]; do
    kill -0 $pid 2>/dev/null || { echo "mlrun ended early:"; tail -3 "$D/err"; return 1; }
    sleep 0.1
  done
  last=$(cat "$D"/up/* | sort -n | tail -1)
  up=$(awk -v a="$t0" -v b="$last" 'BEGIN {printf "%.2f", b - a}')
  sleep 1
  cpu=$(cpu_of $pid); hwm=$(hwm_of $pid)
  if [ "$mode" = failure ]; then
    touch "$D/fail"
    wait $pid || true
    t1=$(now)
    t2=$(wait_nothing_left)
    awk -v n="$n" -v w="$w" -v up="$up" -v f="$(cat "$D/failed")" -v t1="$t1" -v t2="$t2" \
      -v cpu="$cpu" -v hwm="$hwm" -v load="$load" -v tw="$tree_width" 'BEGIN {
      printf "N=%-5d W=%d  w=%-5s start %6.2f s  failure->mlrun exit %6.3f s  ->nothing left %6.3f s  head CPU %s s  head RSS %s MiB  load %s\n",
        n, w, tw, up, t1 - f, t2 - f, cpu, hwm, load }'
  else
    t1=$(now)
    kill -INT $pid
    wait $pid || true
    t2=$(wait_nothing_left)
    awk -v n="$n" -v w="$w" -v up="$up" -v t1="$t1" -v t2="$t2" -v cpu="$cpu" -v hwm="$hwm" \
      -v load="$load" -v tw="$tree_width" 'BEGIN {
      printf "N=%-5d W=%d  w=%-5s start %6.2f s  SIGINT->nothing left %6.3f s                         head CPU %s s  head RSS %s MiB  load %s\n",
        n, w, tw, up, t2 - t1, cpu, hwm, load }'
  fi
}

for n in $sizes; do
  for w in $workers; do
    run_one "$n" "$w" failure
    run_one "$n" "$w" ctrl-c
  done
done
