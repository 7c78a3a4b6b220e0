# --log_dir: DIR/attempt_N/RANK/{stdout,stderr}.log with each rank's raw output; --redirects keeps
# a stream off the terminal; --tee shows a redirected stream as well.
source "$(dirname "$0")/common.sh"

write_worker talk.sh '
printf "out %s a\nout %s b\n" "$RANK" "$RANK"
printf "err %s\n" "$RANK" >&2
printf "no newline %s" "$RANK"'

# expect_file FILE CONTENT: FILE holds exactly CONTENT (printf format, no trailing newline added).
expect_file() {
  [ -f "$1" ] || fail "no file $1"
  local want
  want=$(printf "$2"; echo x)
  [ "$(cat "$1"; echo x)" = "$want" ] || fail "$1 is '$(cat "$1")', expected '$(printf "$2")'"
}

check_logs() {
  for r in 0 1; do
    expect_file "$1/attempt_0/$r/stdout.log" "out $r a\nout $r b\nno newline $r"
    expect_file "$1/attempt_0/$r/stderr.log" "err $r\n"
  done
  [ ! -e "$1/attempt_0/2" ] || fail "a log directory for a rank that does not exist"
  [ ! -e "$1/attempt_1" ] || fail "a log directory for an attempt that did not run"
}

# 1. Files, and the terminal still shows everything with rank tags.
run_mlrun --nproc_per_node=2 --log_dir "$T/logs" "$T/talk.sh"
expect_rc 0
check_logs "$T/logs"
for r in 0 1; do
  expect_line "$T/out" "[$r] out $r a"
  expect_line "$T/out" "[$r] out $r b"
  expect_line "$T/out" "[$r] no newline $r"
  expect_line "$T/err" "[$r] err $r"
done

# 2. --redirects=3: both streams only in the files, nothing of the workers on the terminal.
run_mlrun --nproc_per_node=2 --log_dir "$T/logs3" --redirects=3 "$T/talk.sh"
expect_rc 0
check_logs "$T/logs3"
[ ! -s "$T/out" ] || fail "--redirects=3: stdout shows '$(head -n 3 "$T/out")'"
! grep -q 'err [01]' "$T/err" || fail "--redirects=3: stderr shows '$(cat "$T/err")'"

# 3. --redirects=2 (torchrun's -r 2): only stderr is kept off the terminal.
run_mlrun --nproc_per_node=2 --log_dir "$T/logs2" -r 2 "$T/talk.sh"
expect_rc 0
check_logs "$T/logs2"
expect_line "$T/out" "[1] out 1 a"
! grep -q 'err [01]' "$T/err" || fail "--redirects=2: stderr shows '$(cat "$T/err")'"

# 4. --redirects=3 --tee=1: stdout shown too, with torchrun's prefix; stderr stays in its file.
run_mlrun --nproc_per_node=2 --log_dir "$T/logs_tee" --redirects 3 --tee 1 "$T/talk.sh"
expect_rc 0
check_logs "$T/logs_tee"
for r in 0 1; do
  expect_line "$T/out" "[default$r]:out $r a"
  expect_line "$T/out" "[default$r]:no newline $r"
done
[ "$(grep -c . "$T/out")" -eq 6 ] || fail "--tee 1: stdout has $(grep -c . "$T/out") lines, expected 6"
! grep -q 'err [01]' "$T/err" || fail "--tee 1: stderr shows '$(cat "$T/err")'"

# 5. Per local rank: --redirects 1:3 keeps only local rank 1 off the terminal.
run_mlrun --nproc_per_node=2 --log_dir "$T/logs_pr" --redirects 1:3 "$T/talk.sh"
expect_rc 0
check_logs "$T/logs_pr"
expect_line "$T/out" "[0] out 0 a"
! grep -q 'out 1' "$T/out" || fail "--redirects 1:3: rank 1's stdout reached the terminal"
expect_line "$T/err" "[0] err 0"
! grep -q 'err 1' "$T/err" || fail "--redirects 1:3: rank 1's stderr reached the terminal"
assert_no_marker_left
echo PASS
