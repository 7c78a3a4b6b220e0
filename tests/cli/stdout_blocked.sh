# mlrun writing to a stdout nobody reads (a pipe whose reader stopped) still handles SIGTERM:
# the workers stop, mlrun exits, and the output it could not write is dropped with a count
# (kConsoleStall) instead of blocking it forever.
source "$(dirname "$0")/common.sh"

write_worker chatty.sh 'while true; do echo "line of rank $RANK, padded to make the pipe fill quickly"; done'
mkfifo "$T/stdout.fifo"
# Held open for reading (so writes do not fail with EPIPE) and never read.
exec 3<>"$T/stdout.fifo"
"$MLRUN" --nproc_per_node=2 "$T/chatty.sh" >"$T/stdout.fifo" 2>"$T/err" &
MLRUN_PID=$!
# Until the pipe is full and mlrun has met the stall at least once.
sleep 3
mlrun_running || fail "mlrun ended before the signal"
kill -TERM "$MLRUN_PID"
wait_mlrun 15
exec 3<&-
[ "$RC" -eq 143 ] || [ "$RC" -eq 130 ] || [ "$RC" -eq 1 ] || fail "exit code $RC after SIGTERM"
expect_grep "$T/err" "^mlrun: [0-9]+ lines of worker output were dropped"
assert_no_marker_left
echo PASS
