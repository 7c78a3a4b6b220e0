# Python programs: .py under "$PYTHON -u", -m MODULE, --no_python, --run_path, and a torchrun
# command line with torchrun replaced by mlrun.
source "$(dirname "$0")/common.sh"

REAL_PYTHON=/usr/bin/python3
[ -x "$REAL_PYTHON" ] || REAL_PYTHON=$(command -v python3)
# $PYTHON is a wrapper that records the arguments mlrun gives it, one per line.
cat >"$T/python" <<WRAPPER
#!/bin/sh
printf '%s\n' "\$@" >"$T/pyargs.\$\$"
exec "$REAL_PYTHON" "\$@"
WRAPPER
chmod +x "$T/python"
export PYTHON="$T/python"
unset PYTHONUNBUFFERED  # So that only -u can make the workers' output unbuffered.

cat >"$T/script.py" <<'PY'
import os, sys
print(f"script rank={os.environ['RANK']} role={os.environ['ROLE_NAME']} "
      f"world={os.environ['WORLD_SIZE']} unbuffered={type(sys.stdout.buffer).__name__ == 'FileIO'} args={sys.argv[1:]}")
PY

# expect_pyargs LINE...: every recorded python invocation got exactly these arguments.
expect_pyargs() {
  local want f
  want=$(printf '%s\n' "$@")
  [ "$(count_files "$T/pyargs.*")" -ge 1 ] || fail "\$PYTHON was not run"
  for f in "$T"/pyargs.*; do
    [ "$(cat "$f")" = "$want" ] || fail "python got '$(paste -sd' ' "$f")', expected '$*'"
  done
  rm -f "$T"/pyargs.*
}

# 1. PROGRAM.py: $PYTHON -u PROGRAM.py ARGS.
run_mlrun --nproc_per_node=2 "$T/script.py" --flag value
expect_rc 0
expect_pyargs -u "$T/script.py" --flag value
for r in 0 1; do
  expect_line "$T/out" "[$r] script rank=$r role=default world=2 unbuffered=True args=['--flag', 'value']"
done

# 2. -m MODULE: $PYTHON -u -m MODULE ARGS.
cat >"$T/cli_mod.py" <<'PY'
import os, sys
print(f"module {__name__} rank={os.environ['RANK']} args={sys.argv[1:]}")
PY
PYTHONPATH="$T" run_mlrun --nproc_per_node=2 -m cli_mod a b
expect_rc 0
expect_pyargs -u -m cli_mod a b
expect_line "$T/out" "[0] module __main__ rank=0 args=['a', 'b']"
expect_line "$T/out" "[1] module __main__ rank=1 args=['a', 'b']"
PYTHONPATH="$T" run_mlrun --module cli_mod c
expect_rc 0
expect_pyargs -u -m cli_mod c

# 3. --no_python: a .py that is really a shell script runs as is.
printf '#!/bin/sh\necho "shell rank=$RANK args=$*"\n' >"$T/shell.py"
chmod +x "$T/shell.py"
run_mlrun --nproc_per_node=2 --no_python "$T/shell.py" x
expect_rc 0
[ "$(count_files "$T/pyargs.*")" -eq 0 ] || fail "--no_python ran \$PYTHON"
expect_line "$T/out" "[0] shell rank=0 args=x"
expect_line "$T/out" "[1] shell rank=1 args=x"
run_mlrun --no-python "$T/shell.py"
expect_rc 0
expect_line "$T/out" "[0] shell rank=0 args="

# 4. --run_path: a Python file without .py runs under $PYTHON -u.
cp "$T/script.py" "$T/trainer"
run_mlrun --run_path "$T/trainer" z
expect_rc 0
expect_pyargs -u "$T/trainer" z
expect_line "$T/out" "[0] script rank=0 role=default world=1 unbuffered=True args=['z']"

# 5. A torchrun command line, torchrun replaced by mlrun.
run_mlrun --nnodes=1 --nproc-per-node=2 --standalone --monitor-interval=5 --start-method=spawn \
  --max-restarts=0 --rdzv-backend=c10d --role x "$T/script.py" --flag
expect_rc 0
expect_pyargs -u "$T/script.py" --flag
expect_line "$T/out" "[0] script rank=0 role=x world=2 unbuffered=True args=['--flag']"
expect_line "$T/out" "[1] script rank=1 role=x world=2 unbuffered=True args=['--flag']"

# 6. The same in torchrun's other spellings, with the --redirects/--tee that Debian's torchrun 1.13
#    needs, and "--" before the script.
run_mlrun --nnodes 1:1 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint localhost:0 \
  --rdzv_id cli-job --max_restarts 0 --monitor_interval 1 --redirects 1 --tee 1 \
  --log_dir "$T/logs" -- "$T/script.py" --lr 0.1
expect_rc 0
expect_pyargs -u "$T/script.py" --lr 0.1
expect_line "$T/out" "[default0]:script rank=0 role=default world=2 unbuffered=True args=['--lr', '0.1']"
expect_line "$T/out" "[default1]:script rank=1 role=default world=2 unbuffered=True args=['--lr', '0.1']"

# 7. A Python program that fails reports Python's exit code.
printf 'import sys\nsys.exit(4)\n' >"$T/fails.py"
run_mlrun "$T/fails.py"
expect_rc 4
assert_no_marker_left
echo PASS
