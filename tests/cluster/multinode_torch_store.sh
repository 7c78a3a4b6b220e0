#!/usr/bin/env bash
# --store mlrun over SSH hosts: the job runs on host1 and host2; a real torch 1.13 TCPStore client
# on host3 (a namespace host outside the job) connects to MASTER_ADDR:MASTER_PORT and is refused,
# and mlrun logs it with host3's address. The job's own workers, also plain TCPStore clients
# there, are served (docs/torch-store.md).
source "$(dirname "$0")/multinode_lib.sh"
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch, torch.distributed' 2>/dev/null ||
  { echo "SKIP: $PYTHON cannot import torch (apt-get install python3-torch)"; exit 77; }
export PYTHON
cat >"$T/worker.py" <<'PY'
import datetime, os, sys, time
from torch.distributed import TCPStore
addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), os.environ["RANK"]
s = TCPStore(addr, port, None, False, datetime.timedelta(seconds=30))
s.set(f"worker/{rank}", "here")
s.wait([f"worker/{r}" for r in range(int(os.environ["WORLD_SIZE"]))])
if rank == "0":
    with open(os.path.join(sys.argv[1], "master.tmp"), "w") as f:
        f.write(f"{addr} {port}\n")
    os.rename(os.path.join(sys.argv[1], "master.tmp"), os.path.join(sys.argv[1], "master"))
deadline = time.time() + 60
while not os.path.exists(os.path.join(sys.argv[1], "go")) and time.time() < deadline:
    time.sleep(0.05)
print(f"worker {rank} served by the store", flush=True)
PY
start_mlrun -H host1:1,host2:1 "$T/worker.py" "$T"
wait_until 90 test -e "$T/master" || fail "the workers never met in the store: $(tail -n 5 "$T/err")"
read -r addr port <"$T/master"
host3_ip=$("$CLUSTER" exec 3 hostname -I | awk '{print $1}')
if "$CLUSTER" exec 3 "$PYTHON" -c "
import datetime, sys
from torch.distributed import TCPStore
s = TCPStore('$addr', $port, None, False, datetime.timedelta(seconds=5))
s.set('stranger', 'x')
print(s.get('stranger'))
" >"$T/stranger.out" 2>&1; then
  fail "host3 ($host3_ip), outside the job, used the store: $(cat "$T/stranger.out")"
fi
touch "$T/go"
wait_mlrun 120
expect_rc 0
expect_grep "$T/err" "refused torch 1\.13 TCPStore connection from ${host3_ip//./\\.}:[0-9]+"
expect_grep "$T/out" '^\[1\] worker 1 served by the store$'
assert_no_job_left 15
echo "ok: host3 refused ($(grep -o 'refused torch.*' "$T/err" | head -n1))"
