# Bad input, each case alone: one line "mlrun: error: ..." naming the cause, exit code 2, nothing
# on stdout, no worker started and nothing left running.
source "$(dirname "$0")/common.sh"

write_worker ok.sh 'touch "$T/started.$$"; "$T/sleep" 1000'
printf '#!/bin/sh\ntouch "%s/started.noexec"\n' "$T" >"$T/noexec.sh"
chmod 644 "$T/noexec.sh"
unset "MLRUN_CLI_UNSET_$$"

# expect_error CAUSE_REGEX ARGS...
expect_error() {
  local cause=$1
  shift
  run_mlrun "$@"
  [ "$RC" -eq 2 ] || fail "mlrun $*: exit code $RC, expected 2"
  [ ! -s "$T/out" ] || fail "mlrun $*: printed on stdout: $(head -n 3 "$T/out")"
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "mlrun $*: expected one line on stderr, got: $(cat "$T/err")"
  grep -qE "^mlrun: error: .*($cause)" "$T/err" || fail "mlrun $*: '$(cat "$T/err")' does not name /$cause/"
  [ "$(count_files "$T/started.*")" -eq 0 ] || fail "mlrun $*: a worker started"
  assert_no_marker_left 5
}

expect_error "unknown option '--no-such-flag'" --no-such-flag "$T/ok.sh"
expect_error "unknown option '-q'" -q "$T/ok.sh"
expect_error "$T/missing\.sh: No such file" --nproc_per_node=2 "$T/missing.sh"
expect_error "no-such-program-$$: command not found" "no-such-program-$$"
expect_error "$T/missing\.py: No such file" "$T/missing.py"
expect_error "$T/noexec\.sh: not executable" --nproc_per_node=2 "$T/noexec.sh"
expect_error "--nproc_per_node=0: must be a positive integer" --nproc_per_node=0 "$T/ok.sh"
expect_error "--nproc_per_node=-3: must be a positive integer" --nproc-per-node=-3 "$T/ok.sh"
expect_error "--nproc_per_node=two: must be a positive integer" --nproc_per_node two "$T/ok.sh"
expect_error "--nnodes=x: must be N or MIN:MAX" --nnodes=x "$T/ok.sh"
expect_error "--max_restarts=-1" --max_restarts=-1 "$T/ok.sh"
expect_error "--master_port=70000: must be a port" --master_port=70000 "$T/ok.sh"
expect_error "--standalone runs one node, .*--nnodes=2 asks for more" --standalone --nnodes=2 "$T/ok.sh"
PET_STANDALONE=1 expect_error "PET_STANDALONE=1 runs one node, .*--nnodes=2 asks for more" --nnodes=2 "$T/ok.sh"
expect_error "-H: the host list is empty" -H "" "$T/ok.sh"
expect_error "no program to run" --nproc_per_node=2
expect_error "no program to run"
expect_error "-x MLRUN_CLI_UNSET_$$: no such variable" -x "MLRUN_CLI_UNSET_$$" "$T/ok.sh"
expect_error "-x 1BAD=1: must be VAR or VAR=VALUE, VAR a variable's name" -x 1BAD=1 "$T/ok.sh"
# An unknown option's value is not taken for the program as well ("none: command not found").
expect_error "unknown option '--bind-to'" --bind-to none "$T/ok.sh"

# Several errors of one kind are all reported, one line each, before anything runs: the command
# line's, and then those of the plan (program, -x).
run_mlrun --nproc_per_node=0 --nnodes=x --bogus "$T/ok.sh"
expect_rc 2
[ "$(grep -c '^mlrun: error: ' "$T/err")" -eq 3 ] || fail "expected three errors, got: $(cat "$T/err")"
run_mlrun -x "MLRUN_CLI_UNSET_$$" "$T/missing.sh"
expect_rc 2
[ "$(grep -c '^mlrun: error: ' "$T/err")" -eq 2 ] || fail "expected two errors, got: $(cat "$T/err")"
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "a worker started"
assert_no_marker_left 5
echo PASS
