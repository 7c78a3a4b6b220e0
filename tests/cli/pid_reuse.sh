# A worker that ended early keeps its pid until its attempt ends: the attempt's end kills every
# worker's process group (what each left in it), and a pid already reaped could by then lead
# another process's group. Reproduced in a private pid namespace, where the next pid is ours to
# choose (/proc/sys/kernel/ns_last_pid): rank 1 exits at once, a stranger is started on the pid
# after the one before rank 1's, with a group of its own (setsid), and then the job ends. Needs
# root (unshare, ns_last_pid); skips otherwise (exit 77).
source "$(dirname "$0")/common.sh"

if [ "$(id -u)" -ne 0 ] || ! unshare --pid --fork --mount-proc true 2>/dev/null ||
  [ ! -w /proc/sys/kernel/ns_last_pid ]; then
  echo "SKIP: needs root, unshare --pid and /proc/sys/kernel/ns_last_pid"
  exit 77
fi

write_worker worker.sh '
if [ "$RANK" = 1 ]; then echo $$ > "$T/rank1.pid"; exit 0; fi
for _ in $(seq 400); do [ -e "$T/go" ] && exit 0; "$T/sleep" 0.05; done
exit 9'

# Inside the namespace: the job, the stranger on rank 1's pid if it is free, the job's end.
cat >"$T/scene.sh" <<SCENE
set -u
T="$T"
"$MLRUN" --nproc_per_node 2 --no_python "\$T/worker.sh" >"\$T/out" 2>"\$T/err" &
job=\$!
for _ in \$(seq 200); do [ -s "\$T/rank1.pid" ] && break; sleep 0.05; done
pid1=\$(cat "\$T/rank1.pid")
# Rank 1 has ended (a zombie, or reaped) once its state is no longer S or R.
for _ in \$(seq 200); do
  state=\$(awk '{print \$3}' "/proc/\$pid1/stat" 2>/dev/null || echo gone)
  case "\$state" in Z|gone) break ;; esac
  sleep 0.05
done
echo "\$state" >"\$T/rank1.state"
echo \$((pid1 - 1)) >/proc/sys/kernel/ns_last_pid
setsid "\$T/sleep" 100 &
stranger=\$!
echo "\$stranger" >"\$T/stranger.pid"
touch "\$T/go"
rc=0
wait "\$job" || rc=\$?
echo "\$rc" >"\$T/rc"
sleep 0.2
if kill -0 "\$stranger" 2>/dev/null; then echo alive; else echo killed; fi >"\$T/stranger.state"
kill -KILL "\$stranger" 2>/dev/null || true
SCENE
timeout 60 unshare --pid --fork --mount-proc bash "$T/scene.sh" || fail "the scene did not finish: $?"
[ "$(cat "$T/rc")" = 0 ] || fail "the job exited with $(cat "$T/rc"), expected 0"
pid1=$(cat "$T/rank1.pid")
stranger=$(cat "$T/stranger.pid")
[ "$(cat "$T/stranger.state")" = alive ] ||
  fail "the job's end killed an unrelated process group (pid $stranger; rank 1 had pid $pid1)"
[ "$(cat "$T/rank1.state")" = Z ] ||
  fail "rank 1 (pid $pid1) ended and was reaped while its attempt ran (state: $(cat "$T/rank1.state"))"
[ "$stranger" != "$pid1" ] || fail "the stranger was given rank 1's pid $pid1 while the job ran"
assert_no_marker_left
echo PASS
