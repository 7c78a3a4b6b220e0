#!/usr/bin/env bash
# Issue 14's heartbeat traffic: a fixed-size job of N simulated nodes (--launcher sim, each a real
# `mlrun agent` joining the head's real rendezvous server over TCP) that runs for SECONDS, once
# with node heartbeats every INTERVAL seconds and once with heartbeats every 1,000 s (one at the
# start: the baseline). Prints the CPU seconds of the head and its simulated agents (its children:
# /usr/bin/time counts both sides of every heartbeat) for both, the heartbeats the server took,
# and the bytes on the wire they make (a node_heartbeat request is a
# 16-byte header + 4 + len("node N (nN)") + 4 bytes; its reply a 16-byte header).
#
#   bench/heartbeat_bench.sh MLRUN [N] [SECONDS] [INTERVAL]     e.g. ... build/mlrun 256 20 0.25
set -euo pipefail
MLRUN=$(realpath "${1:?usage: heartbeat_bench.sh MLRUN [N] [SECONDS] [INTERVAL]}")
n=${2:-256}
secs=${3:-20}
interval=${4:-0.25}
ulimit -n 20000 2>/dev/null || true
D=$(mktemp -d "${TMPDIR:-/tmp}/mlrun-hbbench.XXXXXX")
trap 'rm -rf "$D"' EXIT
for ((i = 0; i < n; i++)); do echo "n$i slots=1"; done >"$D/hostfile"
run() {
  local conf=$1
  /usr/bin/time -f "%U %S" -o "$D/time" "$MLRUN" --launcher sim --hostfile "$D/hostfile" \
    --rdzv_conf "$conf" --no_python sleep "$secs" >/dev/null 2>"$D/err" || {
    echo "the job failed:" >&2
    tail -5 "$D/err" >&2
    exit 1
  }
  awk '{printf "%.2f", $1 + $2}' "$D/time"
}
load=$(cut -d' ' -f1 /proc/loadavg)
base=$(run heartbeat_interval=1000,heartbeat_timeout=2000)
beats=$(run "heartbeat_interval=$interval,heartbeat_timeout=$(awk -v i="$interval" 'BEGIN{print i*20}')")
count=$(awk -v n="$n" -v s="$secs" -v i="$interval" 'BEGIN{printf "%d", n*s/i}')
# Bytes per heartbeat and reply: names "node K (nK)" average about 2 x digits + 9 characters.
bytes=$(awk -v n="$n" 'BEGIN{d=length(n-1); printf "%d", 16+4+(2*d+9)+4 + 16}')
echo "N=$n seconds=$secs interval=${interval}s load=$load: head + agents CPU ${base} s without, ${beats} s with" \
  "~$count heartbeats (~$((count * bytes / 1024)) KiB both ways, $bytes B each)"
