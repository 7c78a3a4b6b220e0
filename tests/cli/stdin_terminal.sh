# A terminal as mlrun's stdin: rank 0 gets what is typed (forwarded through a pipe, since a
# worker in its own process group may not read the terminal), so pdb works in rank 0; pdb's
# prompt, a line without a newline, shows after a short idle time; Ctrl-D ends rank 0's stdin;
# rank 1 reads EOF at once.
source "$(dirname "$0")/common.sh"
PY=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
unset PYTHONBREAKPOINT

cat >"$T/debug.py" <<'EOF'
import os, sys
if os.environ["RANK"] == "0":
    breakpoint()
    line = sys.stdin.readline()
    print("line", repr(line))
    print("rest", repr(sys.stdin.read()))
else:
    print("rank1 stdin", repr(sys.stdin.read()))
EOF

# The driver: mlrun on a fresh pseudo-terminal as its controlling terminal, in the terminal's
# foreground process group; every wait bounded; on failure it prints what it saw.
cat >"$T/drive.py" <<'EOF'
import fcntl, os, select, signal, subprocess, sys, termios, time

mlrun, script = sys.argv[1], sys.argv[2]
master, slave = os.openpty()

def take_terminal():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    os.tcsetpgrp(0, os.getpgrp())

proc = subprocess.Popen([mlrun, "--nproc_per_node=2", script], stdin=slave, stdout=slave,
                        stderr=slave, start_new_session=True, preexec_fn=take_terminal)
os.close(slave)
seen = b""

def bail(why):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    sys.stderr.write("FAIL: %s\n--- terminal output:\n%s\n" % (why, seen.decode(errors="replace")))
    sys.exit(1)

def wait_for(text, seconds=60):
    global seen
    deadline = time.monotonic() + seconds
    while text not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            bail("no %r within %d s" % (text, seconds))
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                bail("the terminal closed before %r" % text)
            seen += chunk

wait_for(b"(Pdb) ")
os.write(master, b"p 6*7\n")
wait_for(b"[0] 42")
os.write(master, b"c\n")
os.write(master, b"data\n")
wait_for(b"line 'data\\n'")
os.write(master, b"\x04")  # Ctrl-D at the start of a line: end of file.
wait_for(b"rest ''")
wait_for(b"rank1 stdin ''")
try:
    rc = proc.wait(timeout=60)
except subprocess.TimeoutExpired:
    bail("mlrun still running 60 s after rank 0's end of file")
if rc != 0:
    bail("mlrun exited %d" % rc)
print("driver: ok")
EOF

RC=0
timeout -s KILL 200 "$PY" "$T/drive.py" "$MLRUN" "$T/debug.py" >"$T/out" 2>"$T/err" || RC=$?
[ "$RC" -eq 0 ] || { cat "$T/err" >&2; fail "the terminal session failed (exit $RC)"; }
expect_grep "$T/out" "driver: ok"
assert_no_marker_left 10
echo PASS
