#!/usr/bin/env bash
# A worker on a remote node (an agent over real sshd) starts a `setsid` daemon and a double-forked
# one (`setsid -f`), then fails: teardown on that node reaches both through the node's job cgroup,
# and no job cgroup is left on any node. Skipped (77) where the head can make no job cgroup (the
# hosts share this machine's cgroup file system).
source "$(dirname "$0")/multinode_lib.sh"

teardown=$("$MLRUN" --dry-run --no_python /bin/true 2>&1 | sed -n 's/^teardown: //p')
case "$teardown" in
  "cgroup v2 at "*) PARENT=${teardown#cgroup v2 at } ;;
  *) echo "SKIP: no job cgroup here: ${teardown:-no teardown line from --dry-run}"; exit 77 ;;
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
echo "ok: exit $RC; daemons on host3 gone; $teardown"
