# Shared by the --launcher sim tests (sim_nodes.sh, sim_tree.sh), sourced after common.sh. Their
# nodes are "$MARKER-nI", so agents and lifelines carry the marker in MLRUN_NODE_NAME.

# sim_size VALUE DEFAULT: the number of simulated nodes: VALUE when set, else DEFAULT, or fewer
# where `ulimit -Hn` does not allow them (the head holds ~8 descriptors per simulated node,
# docs/scale.md "Descriptors").
sim_size() {
  local n=${1:-$2} hard
  hard=$(ulimit -Hn)
  if [ -z "$1" ] && [ "$hard" != unlimited ] && [ $((hard / 9 - 8)) -lt "$n" ]; then
    n=$((hard / 9 - 8))
    echo "ulimit -Hn is $hard: $n nodes" >&2
  fi
  echo "$n"
}

# Every process of the job: the marker in its argv (workers) or in its node name (agents).
job_pids() {
  marker_pids
  grep -ls -- "MLRUN_NODE_NAME=$MARKER" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}
nothing_left() { [ -z "$(job_pids)" ]; }

# The agent of node N: the `mlrun agent` process whose node name is N's.
agent_of() {
  local p
  for p in $(pgrep -f -- "$MLRUN agent"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "MLRUN_NODE_NAME=$MARKER-n$1"; then
      echo "$p"
      return
    fi
  done
}

# Each worker writes $T/up.RANK first thing; $nodes workers in all.
all_up() { [ "$(count_files "$T/up.*")" -eq "$nodes" ]; }
# Waits for every worker, or for the head's early end, which it then shows.
up_or_over() { all_up || ! mlrun_running; }
wait_all_up() {
  wait_until 180 up_or_over || true
  all_up && return
  mlrun_running || fail "the head ended with $(count_files "$T/up.*") of $nodes workers started: $(tail -3 "$T/err")"
  fail "$(count_files "$T/up.*") of $nodes workers started"
}
