# --numa_binding binds each worker to the CPUs and memory of its GPU's NUMA node. This machine's
# GPUs and NUMA layout come from a fake sysfs tree (MLRUN_SYSFS_ROOT): one GPU on node 0, whose
# CPUs are this machine's last CPU. The binding itself is real: the worker's Cpus_allowed_list and
# its memory policy (numa_maps' "prefer:0") are read from /proc.
source "$(dirname "$0")/common.sh"
last=$(($(nproc --all) - 1))
S="$T/sysfs"
mkdir -p "$S/sys/devices/system/node/node0" "$S/sys/bus/pci/devices/0000:01:00.0" \
  "$S/sys/devices/system/cpu/cpu$last/topology"
echo "$last" >"$S/sys/devices/system/node/node0/cpulist"
echo 0x10de >"$S/sys/bus/pci/devices/0000:01:00.0/vendor"
echo 0x030200 >"$S/sys/bus/pci/devices/0000:01:00.0/class"
echo -1 >"$S/sys/bus/pci/devices/0000:01:00.0/numa_node"
echo 0 >"$S/sys/devices/system/cpu/cpu$last/topology/physical_package_id"
echo "$last" >"$S/sys/devices/system/cpu/cpu$last/topology/thread_siblings_list"
write_worker numa.sh '
grep Cpus_allowed_list /proc/self/status | tr -d "\t " >"$T/cpus.$RANK"
grep -m1 " heap " /proc/$$/numa_maps | cut -d" " -f2 >"$T/policy.$RANK"
echo "$CUDA_DEVICE_ORDER" >"$T/order.$RANK"'

MLRUN_SYSFS_ROOT=$S run_mlrun --numa-binding=node "$T/numa.sh"
expect_rc 0
expect_line "$T/cpus.0" "Cpus_allowed_list:$last"
expect_line "$T/policy.0" "prefer:0"
expect_line "$T/order.0" "PCI_BUS_ID"

# The dry run shows it; without the option nothing is bound.
MLRUN_SYSFS_ROOT=$S run_mlrun --dry-run --numa_binding=socket "$T/numa.sh"
expect_rc 0
expect_line "$T/out" "    (bound: GPU 0 on NUMA node 0: CPUs $last, memory preferred on node 0)"
MLRUN_SYSFS_ROOT=$S run_mlrun "$T/numa.sh"
expect_rc 0
want=$(grep Cpus_allowed_list /proc/self/status | tr -d '\t ')
expect_line "$T/cpus.0" "$want"

# A machine without GPUs (an empty tree) or NUMA nodes: a clear error, nothing started.
mkdir -p "$T/empty"
MLRUN_SYSFS_ROOT=$T/empty run_mlrun --numa_binding=node "$T/numa.sh"
expect_rc 2
expect_grep "$T/err" "^mlrun: error: --numa_binding=node: .*no NVIDIA GPU"
rm -rf "$S/sys/devices/system/node"
MLRUN_SYSFS_ROOT=$S run_mlrun --numa_binding=exclusive "$T/numa.sh"
expect_rc 2
expect_grep "$T/err" "no NUMA node in /sys/devices/system/node"
run_mlrun --numa_binding=nodes "$T/numa.sh"
expect_rc 2
expect_grep "$T/err" "--numa_binding=nodes: must be one of node, socket, exclusive, core-complex"
echo PASS
