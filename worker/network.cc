#include "worker/network.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "worker/text_file.h"

namespace mlrun {
namespace {

int prefix_of(const sockaddr* mask) {
  int bits = 0;
  const unsigned char* p;
  std::size_t n;
  if (mask->sa_family == AF_INET) {
    p = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else {
    p = reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr.s6_addr;
    n = 16;
  }
  for (std::size_t i = 0; i < n; ++i) bits += __builtin_popcount(p[i]);
  return bits;
}

bool parse_ip(const std::string& text, InterfaceAddress& out) {
  if (inet_pton(AF_INET, text.c_str(), out.bytes) == 1) {
    out.family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), out.bytes) == 1) {
    out.family = AF_INET6;
    return true;
  }
  return false;
}

bool in_subnet(const InterfaceAddress& net, const InterfaceAddress& ip) {
  if (net.family != ip.family) return false;
  int bits = net.prefix_len;
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    unsigned char mask = bits >= 8 ? 0xff : static_cast<unsigned char>(0xff << (8 - bits));
    if ((net.bytes[i] & mask) != (ip.bytes[i] & mask)) return false;
  }
  return true;
}

bool usable(const NetInterface& i) {
  return i.up && !i.loopback && !i.addresses.empty();
}

std::string speed_text(int mbps) {
  if (mbps < 0) return "unknown speed";
  if (mbps >= 1000) return fmt::format("{} Gb/s", mbps / 1000);
  return fmt::format("{} Mb/s", mbps);
}

}  // namespace

bool is_excluded_interface_name(const std::string& name) {
  for (const char* prefix : {"lo", "docker", "virbr", "veth"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::vector<bool> interfaces_to_detail(const std::vector<NetInterface>& interfaces) {
  std::vector<bool> out(interfaces.size(), false);
  bool any_other = false;
  for (size_t k = 0; k < interfaces.size(); ++k) {
    const NetInterface& i = interfaces[k];
    out[k] = usable(i) && !is_excluded_interface_name(i.name);
    any_other = any_other || out[k];
  }
  if (!any_other) {
    for (size_t k = 0; k < interfaces.size(); ++k) out[k] = usable(interfaces[k]);
  }
  return out;
}

namespace {

// What sysfs says of an interface: its kind, speed, and whether it is virtual.
void read_sysfs_facts(NetInterface& i) {
  std::string sys = "/sys/class/net/" + i.name;
  i.infiniband = read_int_file(sys + "/type").value_or(0) == ARPHRD_INFINIBAND;
  i.speed_mbps = read_int_file(sys + "/speed").value_or(-1);
  struct stat st;
  i.is_virtual = stat(("/sys/devices/virtual/net/" + i.name).c_str(), &st) == 0;
}

}  // namespace

std::vector<NetInterface> list_interfaces(bool all_details) {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  auto find = [&out](const std::string& name) -> NetInterface& {
    for (auto& i : out) {
      if (i.name == name) return i;
    }
    NetInterface i;
    i.name = name;
    out.push_back(std::move(i));
    return out.back();
  };
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    NetInterface& i = find(a->ifa_name);
    i.up = i.up || (a->ifa_flags & IFF_UP && a->ifa_flags & IFF_RUNNING);
    i.loopback = i.loopback || (a->ifa_flags & IFF_LOOPBACK);
    if (a->ifa_addr == nullptr || a->ifa_netmask == nullptr) continue;
    int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress addr;
    addr.family = family;
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    std::memcpy(addr.bytes, raw, family == AF_INET ? 4 : 16);
    addr.prefix_len = prefix_of(a->ifa_netmask);
    char text[INET6_ADDRSTRLEN];
    inet_ntop(family, raw, text, sizeof text);
    addr.text = fmt::format("{}/{}", text, addr.prefix_len);
    i.addresses.push_back(addr);
  }
  freeifaddrs(list);
  const std::vector<bool> detail =
      all_details ? std::vector<bool>(out.size(), true) : interfaces_to_detail(out);
  for (size_t k = 0; k < out.size(); ++k) {
    if (detail[k]) read_sysfs_facts(out[k]);
  }
  return out;
}

InterfaceChoice choose_interface(const std::vector<NetInterface>& interfaces,
                                 const std::string& master_ip) {
  InterfaceChoice choice;
  InterfaceAddress master;
  bool have_master = !master_ip.empty() && parse_ip(master_ip, master);
  auto reaches_master = [&](const NetInterface& i) {
    if (!have_master) return false;
    return std::any_of(i.addresses.begin(), i.addresses.end(),
                       [&](const InterfaceAddress& a) { return in_subnet(a, master); });
  };
  // Ordered best first: reaches the master, physical, fast.
  auto better = [&](const NetInterface* a, const NetInterface* b) {
    bool ra = reaches_master(*a), rb = reaches_master(*b);
    if (ra != rb) return ra;
    if (a->is_virtual != b->is_virtual) return !a->is_virtual;
    return a->speed_mbps > b->speed_mbps;
  };
  std::vector<const NetInterface*> ib, normal, excluded;
  for (const auto& i : interfaces) {
    if (!usable(i)) continue;
    if (i.infiniband) {
      ib.push_back(&i);
    } else if (is_excluded_interface_name(i.name)) {
      excluded.push_back(&i);
    } else {
      normal.push_back(&i);
    }
  }
  const NetInterface* chosen = nullptr;
  if (!ib.empty()) {
    std::stable_sort(ib.begin(), ib.end(), better);
    chosen = ib.front();
    choice.reason = fmt::format("{}: InfiniBand, chosen first", chosen->name);
  } else if (!normal.empty()) {
    std::stable_sort(normal.begin(), normal.end(), better);
    chosen = normal.front();
    if (reaches_master(*chosen)) {
      choice.reason = fmt::format("{}: {} on the master's subnet ({})", chosen->name,
                                  speed_text(chosen->speed_mbps), master_ip);
    } else {
      choice.reason = fmt::format("{}: the fastest usable interface ({}){}", chosen->name,
                                  speed_text(chosen->speed_mbps),
                                  have_master ? "; none shares a subnet with the master" : "");
    }
  } else if (!excluded.empty()) {
    std::stable_sort(excluded.begin(), excluded.end(), better);
    chosen = excluded.front();
    choice.reason =
        fmt::format("{}: nothing but loopback/docker/virbr/veth interfaces is up", chosen->name);
  } else {
    for (const auto& i : interfaces) {
      if (i.up && i.loopback) {
        choice.name = i.name;
        choice.reason = fmt::format("{}: loopback, the only interface up", i.name);
        return choice;
      }
    }
    choice.reason = "no network interface is up";
    return choice;
  }
  choice.name = chosen->name;
  for (const auto& a : chosen->addresses) {
    if (a.family != AF_INET) continue;
    unsigned char net[4];
    for (int i = 0; i < 4; ++i) {
      int bits = std::clamp(a.prefix_len - 8 * i, 0, 8);
      net[i] = a.bytes[i] & static_cast<unsigned char>(bits == 0 ? 0 : 0xff << (8 - bits));
    }
    choice.subnet = fmt::format("{}.{}.{}.{}/{}", net[0], net[1], net[2], net[3], a.prefix_len);
    break;
  }
  for (const auto* other : normal) {
    if (other != chosen && chosen->speed_mbps > 0 && other->speed_mbps >= 2 * chosen->speed_mbps) {
      choice.warning = fmt::format(
          "{} ({}) is in use while {} ({}) is faster; pass --iface={} if it reaches every node",
          chosen->name, speed_text(chosen->speed_mbps), other->name, speed_text(other->speed_mbps),
          other->name);
      break;
    }
  }
  return choice;
}

std::vector<std::pair<std::string, std::string>> network_variables(const std::string& iface,
                                                                   bool has_infiniband,
                                                                   const std::string& subnet) {
  std::vector<std::pair<std::string, std::string>> vars;
  if (!iface.empty()) {
    vars.emplace_back("NCCL_SOCKET_IFNAME", iface);
    vars.emplace_back("GLOO_SOCKET_IFNAME", iface);
    const std::string& ompi = subnet.empty() ? iface : subnet;
    vars.emplace_back("OMPI_MCA_btl_tcp_if_include", ompi);
    vars.emplace_back("OMPI_MCA_oob_tcp_if_include", ompi);
  }
  if (!has_infiniband) vars.emplace_back("NCCL_IB_DISABLE", "1");
  return vars;
}

bool has_infiniband_device() {
  DIR* dir = opendir("/sys/class/infiniband");
  if (dir == nullptr) return false;
  bool any = false;
  while (dirent* e = readdir(dir)) any = any || e->d_name[0] != '.';
  closedir(dir);
  return any;
}

}  // namespace mlrun
