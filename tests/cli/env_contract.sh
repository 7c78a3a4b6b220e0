# The worker environment (docs/design.md §4) with torchrun's values, for --nproc_per_node=4.
source "$(dirname "$0")/common.sh"

write_worker dump.sh '
env >"$T/env.$$"
if [ "$RANK" = 0 ]; then
  # Rank 0 must be able to bind MASTER_PORT on the wildcard address, as PyTorch'"'"'s TCPStore does.
  python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind((\"\", int(sys.argv[1])))
s.listen(1)
" "$MASTER_PORT" 2>"$T/bind.err" && touch "$T/bound"
fi
exit 0'

# value FILE NAME: the value of NAME in an env dump, or "<unset>".
value() { local v; v=$(grep -m1 "^$2=" "$1") && echo "${v#*=}" || echo "<unset>"; }

# check_all NAME EXPECTED: every rank sees NAME=EXPECTED; "@RANK" stands for the file's rank.
check_all() {
  local f rank want got
  for f in "$T"/env.*; do
    rank=$(value "$f" RANK)
    want=${2//@RANK/$rank}
    got=$(value "$f" "$1")
    [ "$got" = "$want" ] || fail "rank $rank: $1='$got', expected '$want'"
  done
}

# the_same NAME: every rank sees one and the same value; prints it.
the_same() {
  local values
  values=$(for f in "$T"/env.*; do value "$f" "$1"; done | sort -u)
  [ "$(echo "$values" | wc -l)" -eq 1 ] || fail "$1 differs between ranks: $values"
  echo "$values"
}

fresh() { rm -f "$T"/env.* "$T/bound"; }

# 1. Defaults, four workers.
export FROM_X=exported-value
export KEPT_VAR=inherited
run_mlrun --nproc_per_node=4 -x SET_BY_X=set-by-x -x FROM_X -x KEPT_VAR=overridden "$T/dump.sh"
expect_rc 0
[ "$(count_files "$T/env.*")" -eq 4 ] || fail "expected 4 workers, got $(count_files "$T/env.*")"
ranks=$(for f in "$T"/env.*; do value "$f" RANK; done | sort | paste -sd,)
[ "$ranks" = "0,1,2,3" ] || fail "ranks are $ranks, expected 0,1,2,3"
check_all LOCAL_RANK @RANK
check_all WORLD_SIZE 4
check_all LOCAL_WORLD_SIZE 4
check_all GROUP_RANK 0
check_all GROUP_WORLD_SIZE 1
check_all ROLE_RANK @RANK
check_all ROLE_WORLD_SIZE 4
check_all ROLE_NAME default
check_all MASTER_ADDR 127.0.0.1
check_all TORCHELASTIC_RESTART_COUNT 0
check_all TORCHELASTIC_MAX_RESTARTS 0
check_all TORCHELASTIC_RUN_ID none
# --store mlrun (the default): mlrun's server is the TCPStore on MASTER_PORT (docs/torch-store.md).
check_all TORCHELASTIC_USE_AGENT_STORE True
check_all OMP_NUM_THREADS 1
check_all SET_BY_X set-by-x
check_all FROM_X exported-value
check_all KEPT_VAR overridden
port=$(the_same MASTER_PORT)
[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || fail "MASTER_PORT='$port'"
[ ! -e "$T/bound" ] || fail "rank 0 could bind MASTER_PORT $port: mlrun's store does not hold it"
grep -q "Address already in use" "$T/bind.err" || fail "binding MASTER_PORT: $(cat "$T/bind.err")"
job=$(the_same MLRUN_JOB_ID)
[ -n "$job" ] && [ "$job" != "<unset>" ] || fail "MLRUN_JOB_ID is empty"
backend=$(the_same MLRUN_BACKEND)
case "$backend" in gloo | nccl) ;; *) fail "MLRUN_BACKEND='$backend', expected gloo or nccl" ;; esac
for f in "$T"/env.*; do
  rank=$(value "$f" RANK)
  ef=$(value "$f" TORCHELASTIC_ERROR_FILE)
  # Without --log_dir: flat files in a private temporary directory (docs/launcher.md).
  [[ "$ef" == /*/mlrun-*/error-0-$rank.json ]] || fail "rank $rank: TORCHELASTIC_ERROR_FILE='$ef'"
done
[ "$(for f in "$T"/env.*; do value "$f" TORCHELASTIC_ERROR_FILE; done | sort -u | wc -l)" -eq 4 ] ||
  fail "TORCHELASTIC_ERROR_FILE is not one per rank"

# 2. The user's values: role, address, port, restarts, run id, backend, log dir, OMP_NUM_THREADS.
fresh
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')
# --store torch: rank 0 serves PyTorch's own store on the user's address and port.
OMP_NUM_THREADS=7 run_mlrun --store torch --nproc-per-node 2 --role trainer --master_addr=localhost \
  --master_port "$port" --max_restarts=3 --rdzv_id=job-42 --backend=gloo --log_dir "$T/logs" \
  "$T/dump.sh"
expect_rc 0
[ "$(count_files "$T/env.*")" -eq 2 ] || fail "expected 2 workers"
check_all ROLE_NAME trainer
check_all ROLE_RANK @RANK
check_all ROLE_WORLD_SIZE 2
check_all WORLD_SIZE 2
check_all MASTER_ADDR localhost
check_all MASTER_PORT "$port"
check_all TORCHELASTIC_MAX_RESTARTS 3
check_all TORCHELASTIC_RESTART_COUNT 0
check_all TORCHELASTIC_RUN_ID job-42
check_all MLRUN_JOB_ID job-42
check_all MLRUN_BACKEND gloo
check_all OMP_NUM_THREADS 7
check_all TORCHELASTIC_ERROR_FILE "$T/logs/attempt_0/@RANK/error.json"

# 3. --standalone: a run id of its own (torchrun: a random id), the same on every rank.
fresh
run_mlrun --standalone --nproc_per_node=2 "$T/dump.sh"
expect_rc 0
run_id=$(the_same TORCHELASTIC_RUN_ID)
[ -n "$run_id" ] && [ "$run_id" != none ] && [ "$run_id" != "<unset>" ] ||
  fail "--standalone: TORCHELASTIC_RUN_ID='$run_id'"

# 4. One worker: OMP_NUM_THREADS is left alone, as torchrun does.
fresh
run_mlrun "$T/dump.sh"
expect_rc 0
check_all WORLD_SIZE 1
check_all OMP_NUM_THREADS "<unset>"

# 5. -x of a variable that is not set is an error (the bad-input test checks the message).
fresh
run_mlrun -x "MLRUN_CLI_UNSET_$$" "$T/dump.sh"
expect_rc 2
[ "$(count_files "$T/env.*")" -eq 0 ] || fail "a worker started despite the -x error"
# A --master_port that another process holds (another job's store on this host): exit 1, the
# port, the cause and what to do; no worker.
"$PY3" -c "
import socket, time
s = socket.socket()
s.bind(('127.0.0.1', 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(60)
" >"$T/held" 2>/dev/null &
holder=$!
wait_until 30 test -s "$T/held" || fail "the port holder said no port: $(cat "$T/held")"
held=$(cat "$T/held")
run_mlrun --master_port "$held" "$T/dump.sh"
kill "$holder" 2>/dev/null || true
expect_rc 1
expect_grep "$T/err" "^mlrun: error: cannot serve the rendezvous on 127\.0\.0\.1:$held: .*Address already in use \(another process has that port, perhaps another job on this host: give another --master_port, the same on every node\)$"
[ "$(count_files "$T/env.*")" -eq 0 ] || fail "a worker started on a port in use"
assert_no_marker_left
echo PASS
