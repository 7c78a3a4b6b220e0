# Log directories on a shared machine: a symlink planted at a predictable path is left alone and
# the file it points at untouched; a directory that is not ours alone is refused.
source "$(dirname "$0")/common.sh"

write_worker talk.sh 'echo "out $RANK"; echo "err $RANK" >&2'
echo precious >"$T/victim"

# 1. Without --log_dir, --redirects makes a fresh directory: a symlink planted where the old
#    predictable name was ($TMPDIR/mlrun-logs-JOB) is not followed.
export TMPDIR="$T/tmp"
mkdir -p "$TMPDIR"
ln -s "$T/victim" "$TMPDIR/mlrun-logs-$MARKER"
run_mlrun --rdzv_id "$MARKER" --nproc_per_node=2 --redirects 3 "$T/talk.sh"
expect_rc 0
[ "$(cat "$T/victim")" = precious ] || fail "the planted symlink's target was written"
dir=$(sed -n 's/^mlrun: logs in //p' "$T/err")
[ -n "$dir" ] || fail "no 'logs in' line"
[ "$dir" != "$TMPDIR/mlrun-logs-$MARKER" ] || fail "the predictable name was used"
[ "$(stat -c %a "$dir")" = 700 ] || fail "$dir has mode $(stat -c %a "$dir"), expected 700"
expect_line "$dir/attempt_0/1/stdout.log" "out 1"

# 2. A symlink inside --log_dir where a log file goes is not followed: that rank gets no file,
#    the target is untouched.
mkdir -p "$T/logs/attempt_0/0"
ln -s "$T/victim" "$T/logs/attempt_0/0/stdout.log"
run_mlrun --nproc_per_node=2 --log_dir "$T/logs" "$T/talk.sh"
expect_grep "$T/err" "^mlrun: warning: $T/logs/attempt_0/0/stdout.log: no log file"
[ "$(cat "$T/victim")" = precious ] || fail "a symlinked log file's target was written"
expect_line "$T/logs/attempt_0/1/stdout.log" "out 1"
# A symlinked attempt directory is refused too.
rm -rf "$T/logs2"; mkdir -p "$T/logs2" "$T/elsewhere"
ln -s "$T/elsewhere" "$T/logs2/attempt_0"
run_mlrun --nproc_per_node=1 --log_dir "$T/logs2" "$T/talk.sh"
[ -z "$(ls -A "$T/elsewhere")" ] || fail "files were made through a symlinked attempt directory"

# 3. A world-writable --log_dir is refused with the reason, nothing runs.
mkdir -p "$T/open" && chmod 777 "$T/open"
run_mlrun --nproc_per_node=1 --log_dir "$T/open" "$T/talk.sh"
expect_rc 2
expect_grep "$T/err" "^mlrun: error: --log_dir $T/open: group or world writable"
! grep -q 'out 0' "$T/out" || fail "a worker ran with an unsafe log directory"
# 4. One owned by another user (where we can make one: root).
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$T/theirs" && chown 65534 "$T/theirs"
  run_mlrun --nproc_per_node=1 --log_dir "$T/theirs" "$T/talk.sh"
  expect_rc 2
  expect_grep "$T/err" "^mlrun: error: --log_dir $T/theirs: owned by uid 65534"
fi
rm -rf "$TMPDIR"/mlrun-logs-*
assert_no_marker_left
echo PASS
