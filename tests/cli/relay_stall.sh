# An agent's stdout and stderr are its parent's relay (the head's, or an interior agent's of the
# launch tree), which a busy or briefly stopped parent leaves unread for more than the second a
# person's terminal gets (worker/output.h, kConsoleStall): the agent waits for it (kRelayStall)
# instead of dropping the lines. Simulated nodes (--launcher sim), the same agent as over SSH:
#   1. the head SIGSTOPped for 3 s while both agents' workers print: every line arrives
#   2. an interior agent of the tree (node 1, 2 wide) SIGSTOPped for 3 s: every line of its
#      children's workers arrives through it
# With the 1 s stall agents had before 2026-12-07, both cases failed (case 1 dropped 12,552 and
# 12,705 lines, case 2 7,362).
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/sim_lib.sh"

# Prints until $T/stop, 200 lines every 20 ms at most (~1.2 MB/s: the pipes to the head fill in
# a tenth of a second of a stop), then how many lines it printed.
write_worker chatty.sh '
echo up >"$T/up.$RANK"
pad=$(printf "%0100d" 0)
i=0
while [ ! -e "$T/stop" ]; do
  for _ in {1..200}; do i=$((i + 1)); echo "rank $RANK line $i $pad"; done
  "$T/sleep" 0.02
done
echo "rank $RANK printed $i"'

# stall_and_count NODES STOPPED ARGS...: a job of NODES nodes; once every worker is up,
# STOPPED (the head, or node N's agent) is SIGSTOPped for 3 s, then the workers stop printing.
# Every worker's count of printed lines must match the lines that reached the head's stdout.
stall_and_count() {
  nodes=$1
  local who=$2 pid
  shift 2
  rm -f "$T"/up.* "$T/stop"
  for ((i = 0; i < nodes; i++)); do echo "$MARKER-n$i slots=1"; done >"$T/hostfile"
  start_mlrun --launcher sim --hostfile "$T/hostfile" "$@" "$T/chatty.sh"
  wait_all_up
  if [ "$who" = head ]; then pid=$MLRUN_PID; else pid=$(agent_of "$who"); fi
  [ -n "$pid" ] || fail "no agent of node $who"
  kill -STOP "$pid"
  sleep 3
  kill -CONT "$pid"
  sleep 0.5
  touch "$T/stop"
  wait_mlrun 120
  expect_rc 0
  expect_no_grep "$T/out" "dropped"
  expect_no_grep "$T/err" "dropped"
  local r printed got
  for ((r = 0; r < nodes; r++)); do
    printed=$(sed -n "s/^\[$r\] rank $r printed \([0-9]*\)$/\1/p" "$T/out")
    [ -n "$printed" ] || fail "rank $r said no count"
    got=$(grep -c "^\[$r\] rank $r line " "$T/out")
    [ "$got" -eq "$printed" ] || fail "rank $r printed $printed lines, $got arrived ($who stopped)"
  done
  echo "$who stopped 3 s: all $(grep -c ' line ' "$T/out") lines of $nodes ranks arrived"
}

stall_and_count 2 head
stall_and_count 5 1 --tree_width 2
assert_no_marker_left
echo PASS
