# Shared by the elastic_*.sh tests (issue 6): torchrun-style elastic nodes, one mlrun per host
# started by hand (cluster.sh exec), host1 serving the rendezvous (its address is the endpoint).
source "$(dirname "${BASH_SOURCE[0]}")/multinode_lib.sh"

PORT=$(random_port)
JOB="mlrt-el-$RANDOM$RANDOM"
ENDPOINT="$NET.11:$PORT"
# Short windows so that the tests take seconds: last call 2 s, heartbeats every 0.5 s, a node
# silent for 4 s is lost.
CONF=${CONF:-last_call_timeout=2,heartbeat_interval=0.5,heartbeat_timeout=4,join_timeout=60}

# start_node I NNODES ARGS...: an elastic node on host I (start_mlrun_on).
start_node() {
  local i=$1 nnodes=$2
  shift 2
  start_mlrun_on "$i" --rdzv_backend=c10d --rdzv_endpoint="$ENDPOINT" --rdzv_id="$JOB" \
    --nnodes="$nnodes" --rdzv_conf "$CONF" "$@"
}

# wait_node I SECONDS: the node's exit code in $RC.
wait_node() {
  local i=$1 deadline=$(($(now_ms) + $2 * 1000))
  while kill -0 "${NODE_PIDS[i]}" 2>/dev/null; do
    [ "$(now_ms)" -ge "$deadline" ] && fail "the node on host$i still runs after $2 s"
    sleep 0.1
  done
  RC=0
  wait "${NODE_PIDS[i]}" || RC=$?
}

gather() { cat "$T"/node*.out >"$T/out" 2>/dev/null || true; }
