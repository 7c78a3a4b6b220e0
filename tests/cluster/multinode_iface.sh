#!/usr/bin/env bash
# Backend variables on namespace hosts with several interfaces (issue 5): host1 also gets a
# docker0, a veth9 and an eth1 on other subnets; the interface on the master's subnet (eth0) is
# chosen on every host, docker/veth never are, a variable the user exports wins, Open MPI's get
# the subnet, and NCCL_IB_DISABLE=1 without InfiniBand. A master on eth1's subnet makes eth1 the
# choice.
source "$(dirname "$0")/multinode_lib.sh"

ns=$MLRUN_CLUSTER_PREFIX-h1  # host1 (tests/cluster/cluster.sh: namespace PREFIX-hI)
undo() {
  for dev in docker0 veth9 eth1; do ip netns exec "$ns" ip link del "$dev" 2>/dev/null || true; done
}
trap 'undo; cleanup' EXIT
undo
# Each is one end of a veth pair kept inside host1 (the kernel here has no dummy devices); with
# both ends up, each is up and running, as a real interface would be.
n=0
for spec in docker0=172.17.0.1/16 veth9=10.99.0.1/24 eth1=10.88.0.11/24; do
  dev=${spec%%=*}
  ip netns exec "$ns" ip link add "$dev" type veth peer name "mlrtpeer$n" ||
    fail "cannot add $dev to $ns"
  ip netns exec "$ns" ip addr add "${spec#*=}" dev "$dev"
  ip netns exec "$ns" ip link set "$dev" up
  ip netns exec "$ns" ip link set "mlrtpeer$n" up
  n=$((n + 1))
done

write_worker worker.sh '
echo "$(hostname) gloo=$GLOO_SOCKET_IFNAME nccl=$NCCL_SOCKET_IFNAME ompi=$OMPI_MCA_btl_tcp_if_include/$OMPI_MCA_oob_tcp_if_include ib=$NCCL_IB_DISABLE backend=$MLRUN_BACKEND" >"$T/vars.$RANK"'
(cd "$T" && NCCL_SOCKET_IFNAME=user0 "$MLRUN" -H host1:1,host2:1 -x NCCL_SOCKET_IFNAME \
  "$T/worker.sh") >"$T/out" 2>"$T/err" || fail "exit $? for the job"
for r in 0 1; do
  want="host$((r + 1)) gloo=eth0 nccl=user0 ompi=$NET.0/24/$NET.0/24 ib=1 backend=gloo"
  [ "$(cat "$T/vars.$r")" = "$want" ] || fail "rank $r: $(cat "$T/vars.$r"), want $want"
done
echo "ok: eth0 (the master's subnet) on both hosts; docker0, veth9 and eth1 left alone; the user's NCCL_SOCKET_IFNAME kept"

# The plan on host1 for a master on eth1's subnet: eth1, and why.
plan=$(ip netns exec "$ns" "$MLRUN" --dry-run --nnodes=2 --node_rank=1 --master_addr=10.88.0.1 \
  --no_python /bin/true) || fail "dry run failed"
grep -q "interface eth1: .*on the master's subnet (10.88.0.1)" <<<"$plan" ||
  fail "with the master on 10.88.0.0/24: $(grep interface <<<"$plan")"
grep -qx "    GLOO_SOCKET_IFNAME=eth1" <<<"$plan" || fail "GLOO_SOCKET_IFNAME is not eth1"
# A master only veth9 reaches: veth is never chosen while eth0/eth1 are up.
plan=$(ip netns exec "$ns" "$MLRUN" --dry-run --nnodes=2 --node_rank=1 --master_addr=10.99.0.1 \
  --no_python /bin/true) || fail "dry run failed"
grep -q "    GLOO_SOCKET_IFNAME=veth9\|GLOO_SOCKET_IFNAME=docker0" <<<"$plan" &&
  fail "a veth or docker interface was chosen: $(grep interface <<<"$plan")"
echo "ok: eth1 for a master on its subnet; never veth9 or docker0"
