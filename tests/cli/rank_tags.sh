# Worker output: every line tagged "[RANK] ", whole, stdout and stderr kept apart; --tee uses
# torchrun's "[ROLE LOCAL_RANK]:" prefix; --local_ranks_filter shows only the named ranks.
source "$(dirname "$0")/common.sh"

LINES=400
# Lines up to ~20 KB, longer than a pipe's atomic write (4 KiB), printed by awk in large buffered
# blocks, so a line arrives split across reads and four ranks race for the terminal.
write_worker chatty.sh '
exec awk -v r="$RANK" -v n='"$LINES"' "BEGIN {
  xs = \"x\"; while (length(xs) < 20000) xs = xs xs
  for (i = 0; i < n; i++) {
    pad = substr(xs, 1, (i * 7919) % 20000)
    printf \"OUT r=%d i=%d %s end\\n\", r, i, pad
    printf \"ERR r=%d i=%d %s end\\n\", r, i, substr(pad, 1, (i * 7919) % 20000 % 3001) > \"/dev/stderr\"
  }
}"'

# check_stream FILE KIND: every line is "[R] KIND r=R i=I x* end", I counting 0..LINES-1 per rank.
check_stream() {
  awk -v kind="$2" -v n="$LINES" -v stride="$3" '
    {
      if (!match($0, /^\[[0-9]+\] /)) { print "untagged line " NR ": " substr($0, 1, 80); bad = 1; next }
      tag = substr($0, 2, RLENGTH - 3)
      rest = substr($0, RLENGTH + 1)
      if (rest !~ ("^" kind " r=" tag " i=[0-9]+ x* end$")) {
        print "torn or foreign line " NR ": " substr($0, 1, 120); bad = 1; next
      }
      split(rest, f, " ")
      i = substr(f[3], 3) + 0
      pad = rest; sub(/^[A-Z]+ r=[0-9]+ i=[0-9]+ /, "", pad); sub(/ end$/, "", pad)
      if (length(pad) != (i * 7919) % 20000 % stride) { print "rank " tag " line " i ": " length(pad) " bytes of padding"; bad = 1 }
      if (i != next_i[tag] + 0) { print "rank " tag " line " i " out of order (expected " next_i[tag] + 0 ")"; bad = 1 }
      next_i[tag] = i + 1
    }
    END {
      for (r = 0; r < 4; r++) if (next_i[r] != n) { print "rank " r ": " next_i[r] + 0 " lines, expected " n; bad = 1 }
      exit bad
    }' "$1" >"$T/check.log" || fail "$2 lines in $1: $(head -n 5 "$T/check.log")"
}

# 1. Four ranks, many long lines, concurrently.
run_mlrun --nproc_per_node=4 "$T/chatty.sh"
expect_rc 0
check_stream "$T/out" OUT 20000
check_stream "$T/err" ERR 3001

# 2. --tee: torchrun's prefix, "[default0]:line", and "[trainer1]:" with --role.
write_worker hello.sh 'echo "hello from $LOCAL_RANK"; echo "oops from $LOCAL_RANK" >&2'
run_mlrun --nproc_per_node=2 --tee=3 --log_dir "$T/logs" "$T/hello.sh"
expect_rc 0
expect_line "$T/out" "[default0]:hello from 0"
expect_line "$T/out" "[default1]:hello from 1"
expect_line "$T/err" "[default0]:oops from 0"
expect_line "$T/err" "[default1]:oops from 1"
[ "$(grep -c . "$T/out")" -eq 2 ] || fail "--tee: stdout has other lines"
run_mlrun --nproc_per_node=2 --role trainer -t 3 --log_dir "$T/logs2" "$T/hello.sh"
expect_rc 0
expect_line "$T/out" "[trainer0]:hello from 0"
expect_line "$T/out" "[trainer1]:hello from 1"

# 3. --local_ranks_filter: only local ranks 1 and 2 reach the terminal, on both streams.
run_mlrun --nproc_per_node=4 --local_ranks_filter=1,2 "$T/hello.sh"
expect_rc 0
[ "$(sort "$T/out" | paste -sd'|')" = "[1] hello from 1|[2] hello from 2" ] ||
  fail "--local_ranks_filter=1,2: stdout is $(paste -sd'|' "$T/out")"
[ "$(sort "$T/err" | paste -sd'|')" = "[1] oops from 1|[2] oops from 2" ] ||
  fail "--local_ranks_filter=1,2: stderr is $(paste -sd'|' "$T/err")"
# A filter that names none of the node's local ranks shows nothing, and says so.
run_mlrun --nproc_per_node=2 --local_ranks_filter=5 "$T/hello.sh"
expect_rc 0
[ ! -s "$T/out" ] || fail "--local_ranks_filter=5 with 2 workers: stdout is $(cat "$T/out")"
expect_grep "$T/err" "^mlrun: warning: --local_ranks_filter=5: this node runs local ranks 0-1, so no worker's output is shown$"

# 4. A progress bar: '\r' redraws every 30 ms for 1.8 s and one newline at the end. It is seen
# while it runs, each redraw tagged, on one node and through a head's relay (a simulated host).
write_worker bar.sh '
for i in $(seq 60); do printf "\rtick %d" "$i"; "$T/sleep" 0.03; done
touch "$T/bar.end"; echo'
bar_seen() { grep -q "tick" "$T/out"; }
for how in "" "-H localhost:1 --launcher sim"; do
  rm -f "$T/bar.end"
  # shellcheck disable=SC2086
  start_mlrun $how --nproc_per_node=1 "$T/bar.sh"
  wait_until 30 bar_seen || fail "mlrun $how: no progress bar shown"
  [ ! -e "$T/bar.end" ] || fail "mlrun $how: the bar was shown only once it ended"
  wait_mlrun 30
  expect_rc 0
  grep -q $'\r\\[0\\] tick 60' "$T/out" || fail "mlrun $how: a redraw lost its tag: $(od -c "$T/out" | head -3)"
done
assert_no_marker_left
echo PASS
