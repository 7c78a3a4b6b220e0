#!/usr/bin/env bash
# Builds (once) a Debian 13 "trixie" chroot with Debian's python3-torch (torch 2.6) and prints its
# path. Tests run real torch 2.x clients in it against mlrun's store: Debian 12 only ships 1.13.
#
#   tools/torch26-chroot.sh [DIR]      DIR defaults to $MLRUN_TORCH26_ROOT or
#                                      /var/cache/mlrun/torch26-trixie
#
# The mirror is read from this machine's apt sources at run time (no registry host is written in
# the repository). Needs root and debootstrap (tools/install-deps.sh). About 2 minutes and 1.6 GB
# the first time; later calls return at once. Exit 0 with the path on stdout, or non-zero with the
# reason on stderr (callers skip their test with that reason).
set -euo pipefail

dir=${1:-${MLRUN_TORCH26_ROOT:-/var/cache/mlrun/torch26-trixie}}
ready="$dir/.mlrun-torch26-ready"
fail() { echo "torch26-chroot: $*" >&2; exit 1; }

if [ -e "$ready" ]; then echo "$dir"; exit 0; fi
[ "$(id -u)" -eq 0 ] || fail "needs root to build $dir (debootstrap, chroot)"
command -v debootstrap >/dev/null || fail "debootstrap is not installed (tools/install-deps.sh)"

# The first Debian archive URI of the apt sources (deb822 .sources or one-line .list), not the
# security archive: the chroot takes packages from where this machine does.
mirror_from_apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?//p' "$f" |
      tr ' ' '\n' | grep -E '^(https?|file)://' | grep -v -- '-security' | grep -v -- '-updates' |
      grep -E '/debian/?$' || true
  done | head -n1
}

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9 # another test or CI job may be building the same directory
if [ -e "$ready" ]; then echo "$dir"; exit 0; fi

mirror=$(mirror_from_apt_sources)
[ -n "$mirror" ] || fail "no Debian mirror found in /etc/apt/sources.list{,.d}"
tmp="$dir.building"
rm -rf "$tmp"
log="$dir.log"
echo "torch26-chroot: building $dir from $mirror (log: $log)" >&2
debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$log" 2>&1 ||
  fail "debootstrap trixie from $mirror failed; last lines of $log: $(tail -n3 "$log" | tr '\n' ' ')"
cp /etc/resolv.conf "$tmp/etc/resolv.conf" 2>/dev/null || true
{
  chroot "$tmp" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive chroot "$tmp" apt-get install -y -qq --no-install-recommends \
      python3-torch python3-numpy
} >>"$log" 2>&1 || fail "apt-get install python3-torch in the chroot failed; see $log"
chroot "$tmp" python3 -c 'import torch, torch.distributed' >>"$log" 2>&1 ||
  fail "torch does not import in the chroot; see $log"
chroot "$tmp" apt-get clean >/dev/null 2>&1 || true
chroot "$tmp" python3 -c 'import torch; print(torch.__version__)' >"$tmp/.mlrun-torch26-ready"
rm -rf "$dir"
mv "$tmp" "$dir"
echo "$dir"
