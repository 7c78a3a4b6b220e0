# The launch tree with simulated nodes (--launcher sim --tree_width, transport/local.h): 256 nodes
# 4 wide are four levels of agents (the head starts nodes 0-3, they 4-19, those 20-83, and nodes
# 4-46 the rest), each level's agents started as processes by their parent agent, as over SSH.
#   1. 110 lines of output from every worker reach the head whole, through every level
#   2. every worker starts on its own node; a worker on the deepest level fails: every worker
#      stops, mlrun exits with its code and names it
#   3. an interior agent (node 5, level 2) SIGKILLed: the job ends naming it and the 20 agents
#      below it (nodes 24-27 and, below them, 100-115: the first 16 by name, then "and 4 more")
#   4. Ctrl-C on the head: every worker on every level is signalled, exit 130
#   5. the head SIGKILLed: every agent sees its parent's end and stops its workers
#   6. an interior agent SIGSTOPped (32 nodes): mlrun exits within the flat launch's bound
# After each: nothing of the job is left (agents and lifelines carry the node names of this test
# in MLRUN_NODE_NAME, workers the marker in their argv).
# MLRUN_SIM_TREE_NODES sets the size (default 256).
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/sim_lib.sh"

nodes=$(sim_size "${MLRUN_SIM_TREE_NODES:-}" 256)
[ "$nodes" -ge 116 ] || { echo "SKIP: $nodes nodes are too few for case 2"; exit 77; }
deepest=$((nodes - 1))
for ((i = 0; i < nodes; i++)); do echo "$MARKER-n$i slots=1"; done >"$T/hostfile"
TREE=(--launcher sim --hostfile "$T/hostfile" --tree_width 4)

write_worker worker.sh '
trap "echo TERM >\"$T/got.\$RANK\"; exit 0" TERM
trap "echo INT >\"$T/got.\$RANK\"; exit 0" INT
echo "$MLRUN_NODE_NAME $GROUP_RANK" >"$T/up.$RANK"
if [ "$RANK" = "$FAIL_RANK" ]; then
  while [ ! -e "$T/fail" ]; do "$T/sleep" 0.2; done
  echo "rank $RANK gives up" >&2
  exit 3
fi
"$T/sleep" 1000 &
wait'

expect_nothing_left() {
  wait_until 30 nothing_left ||
    fail "left after $1: $(ps -o pid=,args= -p "$(job_pids | head -5 | paste -sd, -)")"
}
# start_job FAIL_RANK: a fresh run of worker.sh, every worker up.
start_job() {
  rm -f "$T"/up.* "$T"/got.* "$T/fail"
  start_mlrun "${TREE[@]}" -x "FAIL_RANK=$1" "$T/worker.sh"
  wait_all_up
}
# signal_agent SIG N: a fresh job, every worker up; SIG to node N's agent, then the head's end.
# start: when the signal went; took: the ms from then to the head's end.
signal_agent() {
  start_job -1
  local agent
  agent=$(agent_of "$2")
  [ -n "$agent" ] || fail "no agent of node $2"
  start=$(now_ms)
  kill "-$1" "$agent"
  wait_mlrun 120
  took=$(($(now_ms) - start))
}

# The plan: who starts whom.
run_mlrun "${TREE[@]}" --dry-run /bin/true
expect_rc 0
expect_grep "$T/out" "^launch tree: 4 wide, 4 levels of agents"
expect_grep "$T/out" "^node 3 \($MARKER-n3\): ranks 3-3, simulated: an agent on this machine$"
expect_grep "$T/out" "^node 24 \($MARKER-n24\): .*started by $MARKER-n5$"
expect_grep "$T/out" "^node $deepest \($MARKER-n$deepest\): .*started by $MARKER-n$((deepest / 4 - 1))$"

# 1. Output through four levels: each worker prints 100 lines of stdout and 10 of stderr, ~170
# bytes each, and every line reaches the head's stdout or stderr whole and tagged. Before, an
# interior agent's loop (its own worker's lines) and its relay (its children's) cut each other's
# lines where a write passed PIPE_BUF bytes.
write_worker talk.sh '
pad=$(printf "%0150d" 0)
for ((i = 1; i <= 100; i++)); do echo "rank $RANK line $i $pad"; done
for ((i = 1; i <= 10; i++)); do echo "rank $RANK note $i $pad" >&2; done'
run_mlrun "${TREE[@]}" "$T/talk.sh"
expect_rc 0
whole='^\[([0-9]+)\] rank \1 (line|note) [0-9]+ 0{150}$'
[ "$(grep -cE "$whole" "$T/out")" -eq $((nodes * 100)) ] ||
  fail "$(grep -cE "$whole" "$T/out") of $((nodes * 100)) stdout lines whole: $(grep -vE "$whole" "$T/out" | head -2 | cut -c1-120)"
[ "$(grep -cE "$whole" "$T/err")" -eq $((nodes * 10)) ] ||
  fail "$(grep -cE "$whole" "$T/err") of $((nodes * 10)) stderr lines whole: $(grep -vE "$whole" "$T/err" | head -2 | cut -c1-120)"
[ "$(grep -c "^\[$deepest\] rank $deepest line" "$T/out")" -eq 100 ] || fail "rank $deepest's lines are not all there"
expect_nothing_left "the job's end"
echo "output: $((nodes * 110)) lines through 4 levels, every one whole"

# 2. Every worker on its own node; a worker on the deepest level fails.
start_job "$deepest"
for ((r = 0; r < nodes; r++)); do
  [ "$(cat "$T/up.$r")" = "$MARKER-n$r $r" ] || fail "rank $r ran as '$(cat "$T/up.$r")'"
done
touch "$T/fail"
wait_mlrun 120
expect_rc 3
expect_grep "$T/err" "First failure: rank $deepest .*node $deepest \($MARKER-n$deepest\)"
expect_grep "$T/err" "rank $deepest gives up"
[ "$(count_files "$T/got.*")" -eq $((nodes - 1)) ] ||
  fail "$(count_files "$T/got.*") of $((nodes - 1)) other workers were stopped"
expect_nothing_left "the failure"
echo "leaf failure: $nodes nodes in 4 levels stopped, exit 3, nothing left"

# 3. An interior agent SIGKILLed: node 5 (started by node 0), above nodes 24-27 and 100-115.
signal_agent KILL 5
expect_rc 1
expect_grep "$T/err" "job aborted: node 5 \($MARKER-n5\) lost: its agent was killed by SIGKILL \(seen by $MARKER-n0, its parent\); the 20 agents below it in the launch tree went with it"
# The first 16 by node, then the count of the rest.
for n in 24 25 26 27 $(seq 100 111); do
  expect_grep "$T/err" "went with it: .*$MARKER-n$n \(node $n\)"
done
expect_grep "$T/err" "went with it: .*$MARKER-n111 \(node 111\), and 4 more \(\`--dry-run\` shows the whole tree\)"
expect_no_grep "$T/err" "went with it: .*\(node (28|112)\)"
expect_nothing_left "the interior agent's SIGKILL"
echo "interior agent killed: mlrun exited $RC ${took} ms after, nothing left"

# 4. Ctrl-C on the head reaches every worker on every level.
start_job -1
kill -INT "$MLRUN_PID"
wait_mlrun 120
expect_rc 130
expect_grep "$T/err" "job aborted: interrupted: SIGINT on the head"
[ "$(count_files "$T/got.*")" -eq "$nodes" ] ||
  fail "$(count_files "$T/got.*") of $nodes workers were signalled"
expect_nothing_left "SIGINT"
echo "SIGINT: $nodes workers signalled, exit 130, nothing left"

# 5. The head SIGKILLed: each agent reads its stdin's end, its parent's, and stops its workers.
start_job -1
kill -KILL "$MLRUN_PID"
wait_mlrun 30
expect_nothing_left "the head's SIGKILL"
[ "$(count_files "$T/got.*")" -eq "$nodes" ] ||
  fail "$(count_files "$T/got.*") of $nodes workers were stopped with a signal"
echo "head killed: every worker stopped, nothing left"

# 6. An interior agent hangs (SIGSTOP), on a smaller tree: 32 nodes 4 wide, node 5 (level 2)
# above nodes 24-27. The server names it after heartbeat_timeout and the job ends; its parent
# and the head wait the grace period + 10 s for their agents, then close their stdins and stop
# watching them, as an SSH channel's close does (AgentProcess::abandon): mlrun exits within
# heartbeat_timeout + grace + 10 s (3 + 2 + 10 here), not after a second wait for the hung
# agent's end (26.9 s before). Its parent's exit then orphans its process group, which the kernel
# sends SIGHUP and SIGCONT (its lifeline would end it within another grace period + 10 s).
nodes=32
for ((i = 0; i < nodes; i++)); do echo "$MARKER-n$i slots=1"; done >"$T/hostfile"
TREE+=(--grace_period=2 --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=3)
signal_agent STOP 5
expect_rc 1
expect_grep "$T/err" "job aborted: node 5 \($MARKER-n5\) lost: no heartbeat"
# The simulation says once that its nodes share this machine's CPUs (a starved agent looks hung).
[ "$(grep -c "^mlrun: note: the 32 simulated nodes and their 32 workers share this machine's [0-9]* CPUs\?: .*heartbeat_timeout=S" "$T/err")" -eq 1 ] ||
  fail "no note (or more than one) that the simulated nodes share this machine's CPUs"
[ "$took" -lt 22000 ] || fail "mlrun exited ${took} ms after node 5 stopped (bound: 3 + 2 + 10 s)"
expect_nothing_left "the interior agent's SIGSTOP"
echo "interior agent stopped: mlrun exited $RC ${took} ms after, nothing left $(($(now_ms) - start)) ms after"
echo PASS
