# Every number of the command line is range-checked at parse time: exit 2, the limit named,
# nothing started; no overflow in the world size; a hostfile that is no regular file (a FIFO)
# is refused at once instead of hanging; a host list over the limit is refused.
source "$(dirname "$0")/common.sh"

write_worker worker.sh 'touch "$T/started.$$"'

# expect_refused PATTERN ARGS...: exit 2 within 10 s, stderr matches PATTERN, nothing started.
expect_refused() {
  local pattern=$1
  shift
  RC=0
  timeout 10 "$MLRUN" "$@" >"$T/out" 2>"$T/err" || RC=$?
  [ "$RC" -ne 124 ] || fail "$* hung (killed after 10 s)"
  [ "$RC" -eq 2 ] || fail "$*: expected exit 2, got $RC"
  expect_grep "$T/err" "$pattern"
  [ "$(count_files "$T/started.*")" -eq 0 ] || fail "$*: a worker was started"
}

expect_refused '--grace_period=inf: must be a number of seconds from 0 to 86400' \
  --grace_period=inf "$T/worker.sh"
expect_refused '--grace_period=1e300: must be a number of seconds from 0 to 86400' \
  --grace_period=1e300 "$T/worker.sh"
expect_refused '--grace_period=nan: must be' --grace_period=nan "$T/worker.sh"
expect_refused '--monitor_interval=1e300: must be' --monitor_interval=1e300 "$T/worker.sh"
expect_refused '--nproc_per_node=99999999: must be a positive integer \(at most 4096' \
  --nproc_per_node=99999999 "$T/worker.sh"
expect_refused '--nnodes=100000: must be N or MIN:MAX with 1 <= MIN <= MAX <= 16384' \
  --nnodes=100000 "$T/worker.sh"
# 4096 x 16384 would overflow a 32-bit product; the limit on the world is named instead.
expect_refused 'a world of 67108864 ranks is more than the limit of 1048576' \
  --nproc_per_node=4096 --nnodes=16384 --node_rank=0 --dry-run "$T/worker.sh"
! grep -q 'world size' "$T/out" || fail "a world size was printed: $(cat "$T/out")"
expect_refused '--max_restarts=99999999999: must be an integer from 0 to 10000' \
  --max_restarts=99999999999 "$T/worker.sh"
expect_refused '-np=2000000: must be an integer from 1 to 1048576' -np=2000000 "$T/worker.sh"
expect_refused '--local_ranks_filter=5000: must be' --local_ranks_filter=5000 "$T/worker.sh"

# A FIFO as hostfile: refused at once, no reader left waiting for a writer.
mkfifo "$T/hosts.fifo"
expect_refused "$T/hosts.fifo: not a regular file" --hostfile "$T/hosts.fifo" "$T/worker.sh"
expect_refused "/dev/zero: not a regular file" --hostfile /dev/zero "$T/worker.sh"
# More hosts than kMaxHosts (16384), from one range.
expect_refused '20000 hosts: more than the limit of 16384' -H 'node[00001-20000]' "$T/worker.sh"
# A hostfile's slots summed over hosts above the world limit.
printf 'a slots=60000\nb slots=60000\nc slots=60000\nd slots=60000\n' >"$T/big_hosts"
for i in $(seq 1 14); do echo "h$i slots=65536"; done >>"$T/big_hosts"
expect_refused 'ranks: more than the limit of 1048576' --hostfile "$T/big_hosts" --dry-run "$T/worker.sh"
assert_no_marker_left 5
echo PASS
