# Sourced by every tests/cluster/*.sh test: skips where the cluster cannot run, makes sure it
# is up (the ctest fixture normally did that), and points HOME at the cluster's fake home so
# that the libssh wrapper reads its ssh config, key and known_hosts.
set -euo pipefail
CLUSTER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.sh"
"$CLUSTER" can-run || exit 77
if ! "$CLUSTER" status >/dev/null 2>&1; then
  "$CLUSTER" up 3 >/dev/null
fi
eval "$("$CLUSTER" env)"
# The cluster's network (cluster.sh: 10.77.0 for instance 1, 10.79.0 for instance 2): host I is
# $NET.(10 + I), the head (the root namespace) $NET.1.
NET=$MLRUN_CLUSTER_SUBNET
NET_RE=${NET//./\\.}  # the same, as an extended regular expression
unset SSH_AUTH_SOCK  # a developer's agent must not decide what the tests see
PROBE=${MLRUN_SSH_PROBE:-}
SSH=(ssh -F "$MLRUN_CLUSTER_SSH_CONFIG")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_in TEXT NEEDLE [WHAT]: fails unless NEEDLE occurs in TEXT.
expect_in() {
  case "$1" in
    *"$2"*) ;;
    *) fail "${3:-output} lacks '$2'; it was:"$'\n'"$1" ;;
  esac
}

now_ms() { date +%s%3N; }

# A private copy of the fake home, for tests that break known_hosts or the key.
private_home() {
  local d
  d=$(mktemp -d "${TMPDIR:-/tmp}/mlrt-home.XXXXXX")
  cp -a "$MLRUN_CLUSTER_HOME/." "$d/"
  echo "$d"
}

need_probe() {
  [ -n "$PROBE" ] && [ -x "$PROBE" ] || fail "MLRUN_SSH_PROBE must name the built ssh_probe"
}

# block_head_port I TABLE PORT VERDICT: host I's TCP connections to the head's PORT ($NET.1)
# get VERDICT ("drop", "reject with tcp reset"), by a rule in an nft table of the caller's own in
# host I's namespace; `"$CLUSTER" exec I nft delete table inet TABLE` undoes it. (cluster.sh's
# block-port matches inbound traffic to a port on the host, not the host's egress to the head.)
block_head_port() {
  "$CLUSTER" exec "$1" nft delete table inet "$2" 2>/dev/null || true
  "$CLUSTER" exec "$1" nft add table inet "$2"
  "$CLUSTER" exec "$1" nft "add chain inet $2 out { type filter hook output priority 0; policy accept; }"
  "$CLUSTER" exec "$1" nft add rule inet "$2" out ip daddr "$NET.1" tcp dport "$3" "$4"
}
