#!/bin/sh
# `mlrun rdzv` as a custom trainer's server: start it on a free port, read its endpoint from
# stdout, run the custom trainer's processes against it, stop it with SIGTERM (exit 0).
# Also: a --token flag and a missing token are usage errors (2), and the token is in no argv.
# Usage: rdzv_cli_test.sh MLRUN CUSTOM_TRAINER
mlrun=$1 trainer=$2
dir=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill -KILL "$server" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "rdzv_cli_test: $*" >&2
  [ -f "$dir/log" ] && cat "$dir/log" >&2
  exit 1
}

env -u MLRUN_RDZV_TOKEN "$mlrun" rdzv --port 0 >/dev/null 2>"$dir/err"
[ $? = 2 ] || fail "no token: expected exit 2"
grep -q "no token" "$dir/err" || fail "no token: no error message"
MLRUN_RDZV_TOKEN=x "$mlrun" rdzv --port 0 --token secret >/dev/null 2>"$dir/err"
[ $? = 2 ] || fail "--token: expected exit 2"
grep -q "visible to every user" "$dir/err" || fail "--token: no reason given"

# Both spellings of a flag are one flag, as in every mlrun command line.
MLRUN_RDZV_TOKEN=x "$mlrun" rdzv --job_id x --torch_store --port=65536 >/dev/null 2>"$dir/err"
[ $? = 2 ] || fail "--port=65536: expected exit 2"
grep -q "unknown argument" "$dir/err" && fail "--job_id or --torch_store refused: $(cat "$dir/err")"
grep -q -- "--port 65536: not a port number" "$dir/err" || fail "--port=65536: no reason given"
# The memory cap and the maximum hold are range-checked, the limit named.
MLRUN_RDZV_TOKEN=x "$mlrun" rdzv --max-memory 0 --max_hold=99999999 --port 0 >/dev/null 2>"$dir/err"
[ $? = 2 ] || fail "--max-memory 0: expected exit 2"
grep -q -- "--max-memory 0: not a number of MiB in \[1, 1048576\]" "$dir/err" ||
  fail "--max-memory 0: no reason given: $(cat "$dir/err")"
grep -q -- "--max_hold 99999999: not a number of seconds in \[1, 4294967\]" "$dir/err" ||
  fail "--max_hold: no reason given: $(cat "$dir/err")"

"$mlrun" rdzv --host 127.0.0.1 --port 0 --new_token_file "$dir/token" --job-id cli-test \
  >"$dir/endpoint" 2>"$dir/log" &
server=$!
i=0
while [ ! -s "$dir/endpoint" ] && [ $i -lt 200 ]; do
  sleep 0.05
  i=$((i + 1))
done
endpoint=$(head -n 1 "$dir/endpoint")
echo "$endpoint" | grep -Eq '^127\.0\.0\.1:[0-9]+$' || fail "endpoint line is \"$endpoint\""
[ "$(stat -c %a "$dir/token")" = 600 ] || fail "the token file is not mode 600"
token=$(cat "$dir/token")
[ ${#token} -ge 32 ] || fail "the token is too short: ${#token} characters"
tr '\0' ' ' <"/proc/$server/cmdline" | grep -q "$token" && fail "the token is in the server's argv"

MLRUN_RDZV_ENDPOINT=$endpoint MLRUN_RDZV_TOKEN=$token MLRUN_JOB_ID=cli-test \
  timeout 60 "$trainer" 3 || fail "the custom trainer failed against mlrun rdzv"
MLRUN_RDZV_ENDPOINT=$endpoint MLRUN_RDZV_TOKEN=$token MLRUN_JOB_ID=another-job \
  timeout 60 "$trainer" 2 2>/dev/null && fail "a client of another job id was accepted"

kill -TERM "$server"
i=0
while kill -0 "$server" 2>/dev/null && [ $i -lt 100 ]; do
  sleep 0.05
  i=$((i + 1))
done
kill -0 "$server" 2>/dev/null && fail "mlrun rdzv did not stop within 5 s of SIGTERM"
wait "$server"
rc=$?
server=
[ $rc = 0 ] || fail "mlrun rdzv exited $rc after SIGTERM"
grep -q "stopped by SIGTERM" "$dir/log" || fail "no stop line in the log"
echo "rdzv_cli_test: ok"
