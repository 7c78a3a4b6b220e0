# stdin that is not a terminal (a pipe, a file) goes to global rank 0 as it is; every other rank
# reads /dev/null (EOF at once); a restarted rank 0 reads on from the same descriptor;
# --stdin none gives rank 0 /dev/null too.
source "$(dirname "$0")/common.sh"

# Each worker records its first line of stdin (or the read's status) and whether more follows.
# bash's read of a pipe or file takes nothing past the line, so a restart reads the next line.
write_worker reader.sh '
if IFS= read -r -t 30 line; then first="line:$line"; else first="status:$?"; fi
if [ "${FAIL_ONCE:-}" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; then
  echo "$first" >"$T/first.$RANK.attempt0"
  exit 3
fi
if IFS= read -r -t 30 more; then second="line:$more"; else second="status:$?"; fi
echo "$first" >"$T/first.$RANK"
echo "$second" >"$T/second.$RANK"'

check() {  # check RANK FIRST SECOND
  [ "$(cat "$T/first.$1" 2>/dev/null)" = "$2" ] || fail "rank $1 first read '$(cat "$T/first.$1" 2>/dev/null)', want '$2'"
  [ "$(cat "$T/second.$1" 2>/dev/null)" = "$3" ] || fail "rank $1 second read '$(cat "$T/second.$1" 2>/dev/null)', want '$3'"
}

# A pipe: rank 0 reads exactly "hello" then EOF; rank 1 reads EOF at once (status 1, not the
# timeout's status above 128).
RC=0
printf 'hello\n' | "$MLRUN" --nproc_per_node=2 --no_python "$T/reader.sh" >"$T/out" 2>"$T/err" || RC=$?
expect_rc 0
check 0 line:hello status:1
check 1 status:1 status:1
assert_no_marker_left 10

# A file, with a restart: attempt 0's rank 0 takes the first line and fails; attempt 1's rank 0
# gets the same descriptor and reads the second.
rm -f "$T"/first.* "$T"/second.*
printf 'one\ntwo\n' >"$T/input"
RC=0
FAIL_ONCE=1 "$MLRUN" --nproc_per_node=2 --max_restarts=1 --no_python "$T/reader.sh" <"$T/input" \
  >"$T/out" 2>"$T/err" || RC=$?
expect_rc 0
[ "$(cat "$T/first.0.attempt0" 2>/dev/null)" = line:one ] || fail "attempt 0's rank 0 read '$(cat "$T/first.0.attempt0" 2>/dev/null)'"
check 0 line:two status:1
check 1 status:1 status:1
assert_no_marker_left 10

# --stdin none: rank 0 reads /dev/null as well.
rm -f "$T"/first.* "$T"/second.*
RC=0
printf 'hello\n' | "$MLRUN" --nproc_per_node=2 --stdin none --no_python "$T/reader.sh" >"$T/out" 2>"$T/err" || RC=$?
expect_rc 0
check 0 status:1 status:1
check 1 status:1 status:1
assert_no_marker_left 10
echo PASS
