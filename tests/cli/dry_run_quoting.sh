# --dry-run prints the command and environment shell-quoted, one line per item: an argument or a
# value with a newline cannot fake an environment line, and a quoted line runs as it reads.
source "$(dirname "$0")/common.sh"

write_worker worker.sh 'printf "%s|" "$@" >"$T/args"'
evil=$'x\n    RANK=999'
run_mlrun --dry-run --nproc_per_node=1 -x "EVIL=$evil" "$T/worker.sh" "$evil" "it's" 'a b' '$HOME'
expect_rc 0
expect_no_line "$T/out" "    RANK=999"
expect_line "$T/out" "    RANK=0"
expect_line "$T/out" "    EVIL=\$'x\\n    RANK=999'"
line=$(grep '^  rank 0 (local rank 0): ' "$T/out") || fail "no command line for rank 0"
expect_line "$T/out" "  rank 0 (local rank 0): $T/worker.sh \$'x\\n    RANK=999' 'it'\\''s' 'a b' '\$HOME'"
# The printed command, run by bash, passes the same arguments.
eval "${line#  rank 0 (local rank 0): }"
[ "$(cat "$T/args")" = "$evil|it's|a b|\$HOME|" ] || fail "the quoted command gives '$(cat "$T/args")'"
# The same for a plan over hosts (-H).
run_mlrun --dry-run -H localhost:1 -x "EVIL=$evil" "$T/worker.sh" "$evil"
expect_rc 0
expect_line "$T/out" "  command: $T/worker.sh \$'x\\n    RANK=999'"
expect_line "$T/out" "  -x \$'EVIL=x\\n    RANK=999'"
echo PASS
