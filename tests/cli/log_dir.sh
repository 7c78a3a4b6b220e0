# --log_dir: DIR/attempt_N/RANK/{stdout,stderr}.log with each rank's raw output; --redirects keeps
# a stream off the terminal; --tee shows a redirected stream as well; torchrun 2.x's
# --duplicate_{stdout,stderr}_filters copy the tee'd lines that hold a needle to one file an attempt.
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

# 6. --duplicate_stdout_filters / --duplicate_stderr_filters (torchrun 2.x, and PET_*): the tee'd
# lines holding a needle, as the console shows them, in DIR/attempt_N/filtered_{stdout,stderr}.log,
# one file for the node's ranks; the final line without a newline counts.
# expect_sorted FILE LINE...: FILE holds exactly these lines, in any order (ranks interleave).
expect_sorted() {
  local file=$1
  shift
  [ -f "$file" ] || fail "no file $file"
  [ "$(sort "$file")" = "$(printf '%s\n' "$@" | sort)" ] ||
    fail "$file holds '$(cat "$file")', expected the lines: $*"
}
run_mlrun --nproc_per_node=2 --log_dir "$T/logs_dup" --tee 3 \
  --duplicate-stdout-filters ' b,newline 1' --duplicate_stderr_filters 'err 1' "$T/talk.sh"
expect_rc 0
check_logs "$T/logs_dup"
expect_sorted "$T/logs_dup/attempt_0/filtered_stdout.log" \
  "[default0]:out 0 b" "[default1]:out 1 b" "[default1]:no newline 1"
expect_sorted "$T/logs_dup/attempt_0/filtered_stderr.log" "[default1]:err 1"
expect_line "$T/out" "[default0]:out 0 a"  # the terminal unchanged
# From Kubeflow's variables, ",," a comma in a needle; only tee'd streams (stdout here), so no
# stderr file; each attempt its own file.
write_worker again.sh '
echo "attempt $TORCHELASTIC_RESTART_COUNT, rank $RANK"
[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] || [ "$RANK" != 1 ] || exit 1'
PET_DUPLICATE_STDOUT_FILTERS='attempt 0,, rank 1,attempt 1,, rank 1' PET_DUPLICATE_STDERR_FILTERS=err \
  run_mlrun --nproc_per_node=2 --log_dir "$T/logs_pet" --tee 1 --max_restarts 1 "$T/again.sh"
expect_rc 0
for a in 0 1; do
  expect_sorted "$T/logs_pet/attempt_$a/filtered_stdout.log" "[default1]:attempt $a, rank 1"
  [ ! -e "$T/logs_pet/attempt_$a/filtered_stderr.log" ] || fail "a filtered stderr file, not tee'd"
done
assert_no_marker_left
echo PASS
