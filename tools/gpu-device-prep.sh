#!/usr/bin/env bash
# Prepares .devrt/ for tools/gpu-check.sh on a device machine (docs/backends.md, "The GPU
# checks"). That machine is a CUDA image that can fetch nothing, so everything comes from here:
# stripped copies of mlrun, mlrun-lifeline, mlrun-allreduce-sweep and examples/nccl_allreduce
# from BUILD (default build; built with CUDA and NCCL found, as on this machine), and the Debian
# runtime libraries they link that such an image may lack (fmt, libssh and Kerberos, Gloo and its
# verbs/netlink libraries), unpacked under .devrt/root, never into /. CUDA and NCCL are not
# carried: the image has its own. Then, on the device machine:
#   run(command="bash tools/gpu-check.sh", carry=[".devrt"], timeout_s=...)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=.devrt
for b in mlrun mlrun-lifeline mlrun-allreduce-sweep examples/nccl_allreduce/nccl_allreduce; do
  [ -x "$BUILD/$b" ] || { echo "gpu-device-prep: $BUILD/$b is missing: build first" >&2; exit 1; }
done
grep -qx '/.devrt/' .git/info/exclude 2>/dev/null || echo '/.devrt/' >>.git/info/exclude
rm -rf "$out"
mkdir -p "$out/bin" "$out/deb" "$out/root"
for b in mlrun mlrun-lifeline mlrun-allreduce-sweep examples/nccl_allreduce/nccl_allreduce; do
  strip -o "$out/bin/$(basename "$b")" "$BUILD/$b"
done
(cd "$out/deb" && apt-get download -q libfmt9 libssh-4 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
  libkrb5support0 libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200 >/dev/null)
for d in "$out"/deb/*.deb; do dpkg -x "$d" "$out/root"; done
rm -rf "$out/deb"
du -sh "$out"
