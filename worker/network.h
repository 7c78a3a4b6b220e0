// Which network interface the backend should use on this node, and the variables that say so
// (docs/design.md §6). The choice is a pure function of the interface list, so it is unit-tested
// with made-up machines; list_interfaces() reads the real one.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlrun {

struct InterfaceAddress {
  int family = 0;  ///< AF_INET or AF_INET6.
  unsigned char bytes[16] = {};
  int prefix_len = 0;
  std::string text;  ///< "10.0.0.5/24".
};

struct NetInterface {
  std::string name;
  bool up = false;
  bool loopback = false;
  bool infiniband = false;  ///< ARPHRD_INFINIBAND, or an IPoIB "ib*" device.
  bool is_virtual = false;  ///< Under /sys/devices/virtual/net (bridges, veth, tun, docker...).
  int speed_mbps = -1;      ///< From sysfs; -1 when the driver does not say.
  std::vector<InterfaceAddress> addresses;
};

/// This node's interfaces (getifaddrs + sysfs). all_details false reads sysfs (kind, speed,
/// virtual) only for the interfaces interfaces_to_detail names; the others keep the defaults. A
/// host with a veth per container reads three files a veth otherwise, at every mlrun start.
std::vector<NetInterface> list_interfaces(bool all_details = true);

/// The interfaces whose sysfs facts can change choose_interface's answer: those up, not
/// loopback, with an address; of them the loopback/docker/virbr/veth kinds only when no other
/// kind is.
std::vector<bool> interfaces_to_detail(const std::vector<NetInterface>& interfaces);

struct InterfaceChoice {
  std::string name;     ///< Empty: nothing usable.
  std::string reason;   ///< One line: why this one.
  std::string warning;  ///< Non-empty when a faster interface is left unused.
  /// The chosen interface's IPv4 network, "10.77.0.0/24"; empty when it has none.
  std::string subnet;
};

/// Picks the interface: InfiniBand first; then, among interfaces that are up, have an address
/// and are not loopback/docker/virbr/veth, the fastest whose subnet holds master_ip (physical
/// before virtual); then the fastest of them; the excluded kinds only when nothing else is up.
/// master_ip may be empty or not on any local subnet.
InterfaceChoice choose_interface(const std::vector<NetInterface>& interfaces,
                                 const std::string& master_ip);

/// Whether name is one of the kinds never chosen while anything else is up.
bool is_excluded_interface_name(const std::string& name);

/// The network variables of every backend (NCCL, Gloo, Open MPI) for interface iface; all are
/// set whatever the backend, since a NCCL job still bootstraps PyTorch's Gloo groups and an MPI
/// program may use either. has_infiniband says whether an InfiniBand device exists
/// (NCCL_IB_DISABLE=1 where none does). Open MPI's take subnet (CIDR) when given: its values
/// travel with -x to every host, where interface names may differ but the network is the same.
/// They are defaults: a value the user set wins.
std::vector<std::pair<std::string, std::string>> network_variables(const std::string& iface,
                                                                   bool has_infiniband,
                                                                   const std::string& subnet = "");

/// Whether this node has an InfiniBand device (/sys/class/infiniband).
bool has_infiniband_device();

}  // namespace mlrun
