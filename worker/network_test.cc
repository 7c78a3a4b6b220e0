#include "worker/network.h"
#include "worker/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

NetInterface iface(std::string name, std::string cidr, int speed = -1, bool is_virtual = false) {
  NetInterface i;
  i.name = std::move(name);
  i.up = true;
  i.loopback = i.name == "lo";
  i.is_virtual = is_virtual;
  i.speed_mbps = speed;
  InterfaceAddress a;
  auto slash = cidr.find('/');
  std::string ip = cidr.substr(0, slash);
  a.prefix_len = std::stoi(cidr.substr(slash + 1));
  a.family = ip.find(':') == std::string::npos ? AF_INET : AF_INET6;
  inet_pton(a.family, ip.c_str(), a.bytes);
  a.text = cidr;
  i.addresses.push_back(a);
  return i;
}

TEST(ChooseInterface, InfinibandFirst) {
  auto ib = iface("ib0", "192.168.5.2/24", 100000);
  ib.infiniband = true;
  auto c = choose_interface({iface("eth0", "10.0.0.2/24", 1000), ib}, "10.0.0.1");
  EXPECT_EQ(c.name, "ib0");
}

TEST(ChooseInterface, TheOneOnTheMastersSubnetWins) {
  auto c = choose_interface({iface("lo", "127.0.0.1/8"), iface("eth0", "10.0.0.2/24", 10000),
                             iface("eth1", "10.77.0.12/24", 1000)},
                            "10.77.0.1");
  EXPECT_EQ(c.name, "eth1");
  EXPECT_NE(c.reason.find("master's subnet"), std::string::npos);
  // eth0 is ten times faster: say so.
  EXPECT_NE(c.warning.find("eth0"), std::string::npos);
}

TEST(ChooseInterface, NeverDockerVirbrVethOrLoopbackWhileAnythingElseIsUp) {
  auto c = choose_interface({iface("docker0", "172.17.0.1/16"), iface("veth12", "10.77.0.5/24"),
                             iface("virbr0", "192.168.122.1/24"), iface("lo", "127.0.0.1/8"),
                             iface("eth0", "10.1.0.2/24", 1000)},
                            "10.77.0.1");
  EXPECT_EQ(c.name, "eth0");
}

TEST(ChooseInterface, ExcludedKindsWhenNothingElseIsUp) {
  auto c = choose_interface({iface("lo", "127.0.0.1/8"), iface("veth3", "10.77.0.5/24")}, "");
  EXPECT_EQ(c.name, "veth3");
  c = choose_interface({iface("lo", "127.0.0.1/8")}, "");
  EXPECT_EQ(c.name, "lo");
}

TEST(ChooseInterface, PhysicalAndFasterBeforeVirtualWithoutAMaster) {
  auto c =
      choose_interface({iface("br0", "10.0.0.2/24", 10000, true),
                        iface("eno1", "10.1.0.2/24", 1000), iface("eno2", "10.2.0.2/24", 25000)},
                       "");
  EXPECT_EQ(c.name, "eno2");
}

TEST(ChooseInterface, DownInterfacesAreSkipped) {
  auto down = iface("eth0", "10.77.0.2/24", 1000);
  down.up = false;
  auto c = choose_interface({down, iface("eth1", "10.1.0.2/24")}, "10.77.0.1");
  EXPECT_EQ(c.name, "eth1");
}

TEST(ChooseInterface, Ipv6Master) {
  auto c =
      choose_interface({iface("eth0", "fd00:1::2/64"), iface("eth1", "10.1.0.2/24")}, "fd00:1::1");
  EXPECT_EQ(c.name, "eth0");
}

TEST(NetworkVariables, EveryBackendAndIbDisabledWithoutInfiniband) {
  auto v = network_variables("eth1", false);
  std::vector<std::pair<std::string, std::string>> want = {{"NCCL_SOCKET_IFNAME", "eth1"},
                                                           {"GLOO_SOCKET_IFNAME", "eth1"},
                                                           {"OMPI_MCA_btl_tcp_if_include", "eth1"},
                                                           {"OMPI_MCA_oob_tcp_if_include", "eth1"},
                                                           {"NCCL_IB_DISABLE", "1"}};
  EXPECT_EQ(v, want);
  EXPECT_EQ(network_variables("ib0", true).size(), 4u);
  auto with_subnet = network_variables("eth1", false, "10.77.0.0/24");
  EXPECT_EQ(with_subnet[2],
            (std::pair<std::string, std::string>{"OMPI_MCA_btl_tcp_if_include", "10.77.0.0/24"}));
}

TEST(ChooseInterface, GivesTheChosenInterfacesSubnet) {
  auto c = choose_interface({iface("eth1", "10.77.0.12/24")}, "10.77.0.1");
  EXPECT_EQ(c.subnet, "10.77.0.0/24");
  c = choose_interface({iface("eth1", "172.20.5.9/20")}, "");
  EXPECT_EQ(c.subnet, "172.20.0.0/20");
}

TEST(InterfacesToDetail, OnlyThoseTheChoiceCanUse) {
  auto down = iface("eth1", "10.1.0.2/24", 25000);
  down.up = false;
  auto bare = iface("eth2", "10.2.0.2/24");
  bare.addresses.clear();
  std::vector<NetInterface> all = {iface("lo", "127.0.0.1/8"),
                                   iface("eth0", "10.0.0.2/24"),
                                   iface("veth1a2b", "fe80::1/64"),
                                   iface("docker0", "172.17.0.1/16"),
                                   down,
                                   bare};
  EXPECT_EQ(interfaces_to_detail(all),
            (std::vector<bool>{false, true, false, false, false, false}));
}

TEST(InterfacesToDetail, TheExcludedKindsWhenNothingElseIsUp) {
  std::vector<NetInterface> all = {iface("lo", "127.0.0.1/8"), iface("veth1a2b", "fe80::1/64"),
                                   iface("docker0", "172.17.0.1/16")};
  EXPECT_EQ(interfaces_to_detail(all), (std::vector<bool>{false, true, true}));
}

// The launcher reads sysfs only for what interfaces_to_detail names; on this machine that gives
// the same choice as reading it for every interface.
TEST(ListInterfaces, FewerDetailsSameChoice) {
  for (const char* master : {"", "127.0.0.1", "10.77.0.1"}) {
    auto full = choose_interface(list_interfaces(), master);
    auto lean = choose_interface(list_interfaces(/*all_details=*/false), master);
    EXPECT_EQ(lean.name, full.name) << master;
    EXPECT_EQ(lean.reason, full.reason) << master;
    EXPECT_EQ(lean.warning, full.warning) << master;
    EXPECT_EQ(lean.subnet, full.subnet) << master;
  }
}

TEST(ListInterfaces, FindsLoopback) {
  auto all = list_interfaces();
  bool lo = false;
  for (auto& i : all) lo = lo || (i.loopback && i.up);
  EXPECT_TRUE(lo);
}

// MASTER_PORT: free, and where no outgoing connection takes it before rank 0 binds it.
TEST(FreeTcpPort, BelowTheEphemeralRangeAndBindable) {
  auto [lo, hi] = ephemeral_port_range();
  ASSERT_LE(lo, hi);
  for (int i = 0; i < 20; ++i) {
    int port = free_tcp_port();
    if (lo - 1 - 20000 >= 1000) {  // free_tcp_port's own test for room below the range
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, lo);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << port;
    close(fd);
  }
}

}  // namespace
}  // namespace mlrun
