#!/usr/bin/env bash
# Prepares .devssh/ for bench/ssh_floor_device.sh: issue 15's SSH fan-out benchmark
# (bench/ssh_floor.sh) on a device machine, whose 16 cores let the namespace hosts' sshd, agents
# and workers run side by side instead of on this machine's two (bench/README.md, "TCP_NODELAY,
# the interface list read once, and 16 cores"). That machine is a CUDA image that can fetch nothing and has no sshd, so this
# copies from here: stripped mlrun and mlrun-lifeline from BUILD (default build), the floor
# program (bench/ssh_floor.cc, built here), sshd, ssh-keygen, ip, unshare, flock, setsid and
# hostname, and every library they link except glibc's own (the image's glibc is newer than
# Debian 12's; mixing glibc's parts breaks). Each program runs through a wrapper that gives it
# the carried libraries, so nothing on the device picks them up by accident (mlrun hands its
# LD_LIBRARY_PATH to the hosts' agents, whose `hostname` workers link only the C library). OLD=PATH also
# carries another mlrun build, timed beside this one as "old" (ssh_floor.sh's MLRUN_OLD). Then:
#   run(command="bash bench/ssh_floor_device.sh", carry=[".devssh"], timeout_s=...)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=.devssh
for b in mlrun mlrun-lifeline; do
  [ -x "$BUILD/$b" ] ||
    { echo "ssh-bench-device-prep: $BUILD/$b is missing: build first" >&2; exit 1; }
done
grep -qx '/.devssh/' .git/info/exclude 2>/dev/null || echo '/.devssh/' >>.git/info/exclude
rm -rf "$out"
mkdir -p "$out/bin" "$out/real" "$out/lib"
strip -o "$out/real/mlrun" "$BUILD/mlrun"
strip -o "$out/real/mlrun-lifeline" "$BUILD/mlrun-lifeline"
if [ -n "${OLD:-}" ]; then
  mkdir -p "$out/old"
  strip -o "$out/old/mlrun" "$OLD"
  strip -o "$out/old/mlrun-lifeline" "$(dirname "$OLD")/mlrun-lifeline"
fi
# shellcheck disable=SC2046 # pkg-config's words
g++ -O2 -std=c++20 bench/ssh_floor.cc -o "$out/real/ssh_floor" \
  $(pkg-config --cflags --libs libssh) -pthread
programs=(/usr/sbin/sshd /usr/bin/ssh-keygen /usr/bin/ip /usr/bin/unshare /usr/bin/flock
  /usr/bin/setsid /usr/bin/hostname /usr/bin/taskset)
for p in "${programs[@]}"; do cp "$p" "$out/real/"; done
# glibc's libraries stay behind; the rest of each program's closure (libssh for mlrun's dlopen).
glibc='/(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64)\.so'
ldd "${programs[@]}" "$out/real/ssh_floor" /usr/lib/x86_64-linux-gnu/libssh.so.4 |
  awk '/=> \//{print $3}' | sort -u | grep -Ev "$glibc" |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libssh.so.4 "$out/lib/"
for p in "$out"/real/*; do
  name=$(basename "$p")
  cat >"$out/bin/$name" <<WRAP
#!/bin/sh
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH=\$here/lib exec "\$here/real/$name" "\$@"
WRAP
  chmod +x "$out/bin/$name"
done
if [ -d "$out/old" ]; then
  cat >"$out/bin/mlrun-old" <<'WRAP'
#!/bin/sh
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH=$here/lib exec "$here/old/mlrun" "$@"
WRAP
  chmod +x "$out/bin/mlrun-old"
fi
du -sh "$out"
