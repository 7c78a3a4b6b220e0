#!/bin/sh
# Runs a job through mlrun and checks its exit status and its output.
# Usage: job_test.sh MLRUN NPROC RANK_SCRIPT TOOL PATTERN...
# Each PATTERN (an extended regular expression) must match a line of the output: mlrun's own
# lines (the embedded server's log among them) and the workers', prefixed "[RANK] ".
mlrun=$1 nproc=$2 script=$3 tool=$4
shift 4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout 120 "$mlrun" --nproc_per_node="$nproc" --no_python /bin/sh "$script" "$tool" >"$log" 2>&1
rc=$?
cat "$log"
if [ "$rc" != 0 ]; then
  echo "job_test: the job exited $rc" >&2
  exit 1
fi
for pattern in "$@"; do
  if ! grep -Eq "$pattern" "$log"; then
    echo "job_test: no line of the output matches: $pattern" >&2
    exit 1
  fi
done
echo "job_test: ok"
