# --store mlrun with real torch 2.6: Debian 13's python3-torch in a chroot made once by
# tools/torch26-chroot.sh (debootstrap from this machine's apt mirror, about 2 minutes and 1.6 GB
# the first time, then reused). The same worker as torch_store.sh: attempt 1 sees none of attempt
# 0's keys (torch 2.x adds no attempt prefix), Gloo with new_group, DDP. Debian's 2.6 has no
# libuv, so the worker passes use_libuv=False to every TCPStore, the env:// one included.
source "$(dirname "$0")/common.sh"

if ! ROOT=$(bash "$SRC/tools/torch26-chroot.sh" 2>"$T/chroot.err"); then
  echo "SKIP: no torch 2.6 chroot: $(tail -n 3 "$T/chroot.err" | tr '\n' ' ')"
  exit 77
fi
# The worker at the same path inside the chroot and here (mlrun checks nothing of it; the
# path carries the marker either way).
mkdir -p "$ROOT$T"
cp "$SRC/tests/cli/torch_store_worker.py" "$T/worker.py"
cp "$T/worker.py" "$ROOT$T/worker.py"
printf '#!/bin/sh\nexec chroot %s /usr/bin/python3 "$@"\n' "$ROOT" >"$T/python26"
chmod +x "$T/python26"
trap 'rm -rf "$ROOT$T"; cleanup' EXIT
PYTHON=$T/python26 run_mlrun --nproc_per_node=3 --max_restarts=1 "$T/worker.py"
[ "$RC" -eq 0 ] || fail "exit code $RC: $(grep -v -e cpuinfo -e UCX "$T/err" | tail -n 20)"
expect_grep "$T/out" '^\[1\] attempt 0: rank 1 fails on purpose$'
expect_grep "$T/out" '^\[0\] store ok: torch 2\.6.*, 3 ranks, attempt 1, MASTER_PORT [0-9]+ served by mlrun'
assert_no_marker_left 10
echo PASS
