#!/usr/bin/env bash
# Issue 15's SSH fan-out sweep (bench/ssh_floor.sh: the libssh floor against mlrun at 3, 8, 16
# and 24 namespace hosts) on a device machine with 16 cores, twice: on every core, then confined
# to two cores with taskset (the development machine's count), so that the same machine shows
# what sharing two cores among every host's sshd, agent and workers does to the growth.
# Needs .devssh/ from tools/ssh-bench-device-prep.sh (that machine has no sshd and cannot
# install one); run there as root:
#   run(command="bash bench/ssh_floor_device.sh", carry=[".devssh"], timeout_s=480)
# REPEATS (default 11) and SIZES (default "3 8 16 24") as in ssh_floor.sh. Logs go to $OUT when
# set (the device tool's folder), else to a temporary directory. With the argument cpu it runs
# the sweep once, on every core, with CPU=1 (the machine's CPU per launch) and VV_RUNS (default
# 3) `mlrun -vv` logs a size in the log folder.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
D=$PWD/.devssh
if [ ! -x "$D/bin/mlrun" ]; then
  echo "ssh_floor_device: run tools/ssh-bench-device-prep.sh first" >&2
  exit 2
fi
log=${OUT:-$(mktemp -d)}
export PATH=$D/bin:$PATH MLRUN_SSHD=$D/bin/sshd
echo "== machine: $(uname -r), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
grep -E '^PRETTY_NAME' /etc/os-release 2>/dev/null
ldd --version 2>/dev/null | head -1
uptime
# What sshd and the hosts' login shells need that a container image may lack.
id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd ||
  echo 'sshd:x:74:74::/run/sshd:/usr/sbin/nologin' >>/etc/passwd
mkdir -p /run/sshd
command -v /usr/bin/hostname >/dev/null || cp "$D/real/hostname" /usr/local/bin/hostname
echo "root's shell: $(getent passwd root | cut -d: -f7)"
if ! ip netns add mlrt-probe; then
  echo "== no network namespaces here: nothing measured"
  exit 1
fi
ip netns del mlrt-probe
if [ "${1:-}" = cpu ]; then
  env MLRUN="$D/bin/mlrun" SIZES="${SIZES:-3 8 16 24}" CPU=1 VV_DIR="$log" \
    VV_RUNS="${VV_RUNS:-3}" OPENSSH=0 MPIRUN=0 bash bench/ssh_floor.sh "$D/bin/ssh_floor" \
    "${REPEATS:-11}" 2>&1 | tee "$log/ssh_cpu.log"
  exit "${PIPESTATUS[0]}"
fi
for mode in all two; do
  wrap=()
  [ "$mode" = all ] || wrap=(taskset -c "0,1")
  echo "== $mode cores: ${wrap[*]:-every core}"
  # The old build (tools/ssh-bench-device-prep.sh's OLD) runs as it is: its agents need no
  # libraries beyond the C library, and its head is given the carried libssh.
  old=$([ -x "$D/old/mlrun" ] && echo "$D/bin/mlrun-old")
  "${wrap[@]}" env MLRUN="$D/bin/mlrun" MLRUN_OLD="$old" SIZES="${SIZES:-3 8 16 24}" OPENSSH=0 \
    MPIRUN=0 bash bench/ssh_floor.sh "$D/bin/ssh_floor" "${REPEATS:-11}" 2>&1 |
    tee "$log/ssh_floor_$mode.log"
  echo "exit ${PIPESTATUS[0]}"
  uptime
done
