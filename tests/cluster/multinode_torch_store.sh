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
cp "$(dirname "$0")/store_worker.py" "$T/worker.py"
start_mlrun -H host1:1,host2:1 "$T/worker.py" "$T"
wait_until 90 test -e "$T/master" || fail "the workers never met in the store: $(tail -n 5 "$T/err")"
read -r addr port <"$T/master"
expect_store_refuses_host3 "$addr" "$port"
touch "$T/go"
wait_mlrun 120
expect_rc 0
expect_grep "$T/out" '^\[1\] worker 1 on host2 served by the store$'
assert_no_job_left 15
echo "ok: host3 refused ($(grep -o 'refused torch.*' "$T/err" | head -n1))"
