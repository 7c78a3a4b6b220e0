#!/usr/bin/env bash
# A worker on a remote node (an agent over real sshd) starts a `setsid` daemon and a double-forked
# one (`setsid -f`), then fails: teardown on that node reaches both through the node's job cgroup,
# and no job cgroup is left on any node. `mlrun doctor` reports host3's teardown mode as host3
# finds it.
source "$(dirname "$0")/multinode_lib.sh"

# Each node finds its own teardown mode, and `mlrun doctor` reports a remote host's. The hosts
# (ip netns exec) get a fresh /sys; cluster.sh mounts this machine's cgroup2 at /sys/fs/cgroup
# there (the plain v2 layout; the head here may be hybrid). Where it could not, the daemon part is
# skipped with a message.
remote=$("$CLUSTER" exec 3 "$MLRUN" --dry-run --no_python /bin/true 2>&1 | sed -n 's/^teardown: //p')
[ -n "$remote" ] || fail "--dry-run on host3 printed no teardown line"
"$MLRUN" doctor --json -H host3 >"$T/doctor.json" 2>"$T/doctor.err" || true
reported=$(/usr/bin/python3 -c '
import json, sys
hosts = json.load(open(sys.argv[1]))["hosts"]
print([h for h in hosts if h["host"] == "host3"][0].get("teardown", ""))' "$T/doctor.json") ||
  fail "mlrun doctor --json -H host3 did not parse: $(head -c 300 "$T/doctor.json") $(head -c 300 "$T/doctor.err")"
[ "$reported" = "$remote" ] || fail "doctor says host3's teardown is '$reported', host3 says '$remote'"
# The hosts' cgroups as the head sees them: the same hierarchy, under the head's own mount.
head=$("$MLRUN" --dry-run --no_python /bin/true 2>&1 | sed -n 's/^teardown: //p')
case "$remote/$head" in
  "cgroup v2 at "*"/cgroup v2 at "*) PARENT=${head#cgroup v2 at } ;;
  *)
    echo "SKIP: no job cgroup on host3 ($remote) or the head ($head); doctor reports host3's correctly"
    exit 77
    ;;
esac

write_worker worker.sh '
touch "$T/up.$RANK"
if [ "$RANK" = 2 ]; then
  setsid "$T/sleep" 7001 </dev/null >/dev/null 2>&1 &
  echo $! >"$T/daemons"
  setsid -f "$T/sleep" 7002 </dev/null >/dev/null 2>&1
  for i in $(seq 100); do p=$(pgrep -f -- "$T/sleep 7002\$") && break; sleep 0.05; done
  echo "$p" >>"$T/daemons"
  cat /proc/self/cgroup >"$T/cgroup"
  hostname >"$T/host"
  while [ "$(ls "$T" | grep -c "^up\.")" -lt 3 ]; do sleep 0.1; done
  exit 4
fi
exec "$T/sleep" 1000'

start_mlrun --rdzv_id="$MARKER" -H host1:1,host2:1,host3:1 "$T/worker.sh"
wait_mlrun 120
expect_rc 4
[ "$(cat "$T/host")" = host3 ] || fail "rank 2 ran on '$(cat "$T/host")', not host3"
grep -q "^0::.*/mlrun-$MARKER-[0-9]" "$T/cgroup" || fail "rank 2 ran outside a job cgroup: $(cat "$T/cgroup")"
[ "$(wc -w <"$T/daemons")" -eq 2 ] || fail "rank 2 recorded no daemons: $(cat "$T/daemons")"
gone() { local p; for p in $(cat "$T/daemons"); do kill -0 "$p" 2>/dev/null && return 1; done; true; }
wait_until 5 gone || fail "daemons of rank 2 outlived teardown on host3: $(describe_pids $(cat "$T/daemons"))"
no_cgroup() { [ -z "$(ls -d "$PARENT"/mlrun-"$MARKER"-* 2>/dev/null)" ]; }
wait_until 5 no_cgroup || fail "job cgroups left: $(ls -d "$PARENT"/mlrun-"$MARKER"-*)"
assert_no_job_left 15

# MLRUN_CGROUP=off on the head holds on host3 too: its agent makes no job cgroup.
rm -f "$T"/up.* "$T/cgroup"
MLRUN_CGROUP=off start_mlrun --rdzv_id="$MARKER" -H host1:1,host2:1,host3:1 "$T/worker.sh"
wait_mlrun 120
expect_rc 4
grep -q "^0::.*/mlrun-$MARKER" "$T/cgroup" && fail "MLRUN_CGROUP=off: rank 2 on host3 ran in a job cgroup"
kill -KILL $(cat "$T/daemons") 2>/dev/null || true
assert_no_job_left 15
echo "ok: exit $RC; daemons on host3 gone; $remote; MLRUN_CGROUP=off reached host3"
