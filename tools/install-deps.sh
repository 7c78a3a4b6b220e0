#!/usr/bin/env bash
# Installs the Debian 12 packages mlrun builds, tests and benchmarks with. Idempotent.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libboost-dev libssh-dev libspdlog-dev libfmt-dev libgloo-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  openmpi-bin libopenmpi-dev openssh-server openssh-client python3-torch
  clang-14 libclang-rt-14-dev clang-tidy iproute2 procps psmisc time nftables
  debootstrap  # tools/torch26-chroot.sh: Debian 13's torch 2.6 for the --store mlrun tests
  slurmctld slurmd slurm-client munge
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
