#include "doctor/doctor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mlrun::doctor {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseDoctorArgs, FlagsInBothSpellings) {
  auto r = parse_doctor_args({"--json", "--hostfile", "hosts.txt", "--master-addr=10.0.0.1",
                              "--iface", "eth1", "--backend=gloo", "--python_timeout", "3"});
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.options.json);
  EXPECT_EQ(r.options.hostfile, "hosts.txt");
  EXPECT_EQ(r.options.master_addr, "10.0.0.1");
  EXPECT_EQ(r.options.iface, "eth1");
  EXPECT_EQ(r.options.backend, "gloo");
  EXPECT_EQ(r.options.python_timeout, 3);
  r = parse_doctor_args({"-H", "a:2,b:2"});
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.options.hosts, "a:2,b:2");
  EXPECT_FALSE(r.options.json);
}

TEST(ParseDoctorArgs, EveryErrorIsReported) {
  auto r = parse_doctor_args({"--bogus", "--backend", "rccl", "--python-timeout=-1", "--hostfile",
                              "f", "-H", "a", "--iface"});
  ASSERT_EQ(r.errors.size(), 5u);
  EXPECT_THAT(r.errors[0], HasSubstr("'--bogus'"));
  EXPECT_THAT(r.errors[1], HasSubstr("--backend=rccl"));
  EXPECT_THAT(r.errors[2], HasSubstr("--python-timeout=-1"));
  EXPECT_THAT(r.errors[3], HasSubstr("--iface needs a value"));
  EXPECT_THAT(r.errors[4], HasSubstr("not both"));
}

TEST(ChooseBackend, AutoPicksNcclOnlyWithGpusAndNccl) {
  Component nccl{true, true, "2.28.9", "/usr/lib/libnccl.so.2", "dlopen", ""};
  Component none;
  auto b = choose_backend("auto", 8, nccl.found, nccl.version);
  EXPECT_EQ(b.name, "nccl");
  EXPECT_THAT(b.reason, HasSubstr("8 NVIDIA GPUs and NCCL 2.28.9"));
  b = choose_backend("auto", 0, nccl.found, nccl.version);
  EXPECT_EQ(b.name, "gloo");
  EXPECT_THAT(b.reason, HasSubstr("no NVIDIA GPU"));
  b = choose_backend("auto", 2, none.found, none.version);
  EXPECT_EQ(b.name, "gloo");
  EXPECT_THAT(b.reason, HasSubstr("no NCCL"));
  EXPECT_EQ(choose_backend("auto", 0, none.found, none.version).name, "gloo");
  b = choose_backend("mpi", 8, nccl.found, nccl.version);
  EXPECT_EQ(b.name, "mpi");
  EXPECT_THAT(b.reason, HasSubstr("--backend mpi"));
}

TEST(DecodeNcclVersion, BothEncodings) {
  EXPECT_EQ(decode_nccl_version(22809), "2.28.9");
  EXPECT_EQ(decode_nccl_version(21803), "2.18.3");
  EXPECT_EQ(decode_nccl_version(2804), "2.8.4");  // Before 2.9: X*1000+Y*100+Z.
  EXPECT_EQ(decode_nccl_version(0), "");
}

TEST(ParseGpuModel, FromTheDriversInformationFile) {
  EXPECT_EQ(parse_gpu_model("Model: \t\t NVIDIA H200\nIRQ:   \t\t 30\nGPU UUID: \t GPU-1\n"),
            "NVIDIA H200");
  EXPECT_EQ(parse_gpu_model("IRQ: 1\nModel:\tTesla V100-SXM2-16GB"), "Tesla V100-SXM2-16GB");
  EXPECT_EQ(parse_gpu_model("IRQ: 1\n"), "");
}

TEST(DpkgInstalledVersion, OnlyAnInstalledPackage) {
  std::string status =
      "Package: libgloo-dev\nStatus: install ok installed\nVersion: 1-dev\n\n"
      "Package: libgloo0\nStatus: install ok installed\nPriority: optional\n"
      "Version: 0.0~git20220518.5b14351-3\nDescription: x\n\n"
      "Package: gone\nStatus: deinstall ok config-files\nVersion: 9\n";
  EXPECT_EQ(dpkg_installed_version(status, "libgloo0"), "0.0~git20220518.5b14351-3");
  EXPECT_EQ(dpkg_installed_version(status, "libgloo-dev"), "1-dev");
  EXPECT_EQ(dpkg_installed_version(status, "gone"), "");
  EXPECT_EQ(dpkg_installed_version(status, "libgloo"), "");
  EXPECT_EQ(dpkg_installed_version("", "libgloo0"), "");
}

TEST(InterfaceKind, Kinds) {
  NetInterface i;
  EXPECT_EQ(interface_kind(i), "ethernet");
  i.is_virtual = true;
  EXPECT_EQ(interface_kind(i), "virtual");
  i.loopback = true;
  EXPECT_EQ(interface_kind(i), "loopback");
  i.infiniband = true;
  EXPECT_EQ(interface_kind(i), "InfiniBand");
}

TEST(DoctorVariables, TheUsersValueIsShownAndWins) {
  auto vars = doctor_variables("gloo", network_variables("eth0", false),
                               {"NCCL_SOCKET_IFNAME=ib0", "HOME=/root"});
  ASSERT_EQ(vars.size(), 6u);
  EXPECT_EQ(vars[0].name, "MLRUN_BACKEND");
  EXPECT_FALSE(vars[0].is_default);
  EXPECT_EQ(vars[1].name, "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(vars[1].value, "eth0");
  ASSERT_TRUE(vars[1].user_value.has_value());
  EXPECT_EQ(*vars[1].user_value, "ib0");
  EXPECT_EQ(vars[5].name, "NCCL_IB_DISABLE");
  EXPECT_FALSE(vars[5].user_value.has_value());
}

DoctorReport sample_report() {
  HostReport h;
  h.host = "node1";
  h.gpus.device_files = 0;
  h.nccl = {true, true, "2.28.9", "/usr/local/cuda/lib/libnccl.so.2", "dlopen libnccl.so.2", ""};
  h.gloo = {true, true, "0.0~git", "/lib/libgloo.so.0", "dlopen libgloo.so.0", ""};
  h.mpi = {true, true, "mpirun (Open MPI) 4.1.4", "/usr/bin/mpirun", "mpirun --version", ""};
  h.torch = {false,
             true,
             "",
             "/usr/bin/python3",
             "python3 -c 'import torch'",
             "ModuleNotFoundError: No module named 'torch'"};
  NetInterface lo;
  lo.name = "lo";
  lo.up = lo.loopback = true;
  InterfaceAddress a;
  a.family = AF_INET;
  a.text = "127.0.0.1/8";
  lo.addresses.push_back(a);
  NetInterface eth;
  eth.name = "eth0";
  eth.up = true;
  eth.speed_mbps = 10000;
  a.text = "10.0.0.2/24";
  eth.addresses.push_back(a);
  h.interfaces = {lo, eth};
  h.iface = {"eth0", "eth0: the fastest usable interface (10 Gb/s)", ""};
  h.backend = choose_backend("auto", 0, h.nccl.found, h.nccl.version);
  h.variables = doctor_variables("gloo", network_variables("eth0", false), {"NCCL_IB_DISABLE=0"});
  DoctorReport r;
  r.hosts.push_back(h);
  r.remote_status = "none (give --hostfile or -H to check other hosts)";
  return r;
}

TEST(FormatDoctorText, SaysWhatWasFoundChosenAndSet) {
  std::string text = format_doctor_text(sample_report());
  EXPECT_THAT(text, HasSubstr("host node1 (this host)"));
  EXPECT_THAT(text, HasSubstr("0 NVIDIA GPUs"));
  EXPECT_THAT(text, HasSubstr("NCCL        2.28.9 (/usr/local/cuda/lib/libnccl.so.2)"));
  EXPECT_THAT(text, HasSubstr("PyTorch     not found; ModuleNotFoundError"));
  EXPECT_THAT(text, HasSubstr("eth0  ethernet    up    10 Gb/s        10.0.0.2/24"));
  EXPECT_THAT(text, HasSubstr("lo    loopback"));
  EXPECT_THAT(text, HasSubstr("Backend     gloo: no NVIDIA GPU"));
  EXPECT_THAT(text, HasSubstr("Interface   eth0: the fastest usable interface"));
  EXPECT_THAT(text, HasSubstr("NCCL_SOCKET_IFNAME=eth0\n"));
  EXPECT_THAT(text, HasSubstr("NCCL_IB_DISABLE=0  (yours; mlrun's default would be 1)"));
  EXPECT_THAT(text, HasSubstr("remote checks: none (give --hostfile or -H"));
  EXPECT_THAT(text, HasSubstr("no problems found"));
}

TEST(FormatDoctorText, ASkippedCheckIsNotReportedAsMissing) {
  DoctorReport r = sample_report();
  r.hosts[0].torch = {false,
                      false,
                      "",
                      "/usr/bin/python3",
                      "python3 -c 'import torch'",
                      "not checked: importing torch took more than 20 s"};
  r.hosts[0].gpus.cuda_visible_devices = "0,1";
  r.hosts[0].gpus.visible = 2;
  std::string text = format_doctor_text(r);
  EXPECT_THAT(text, HasSubstr("PyTorch     not checked: importing torch took more than 20 s"));
  EXPECT_THAT(text, Not(HasSubstr("not found")));
  EXPECT_THAT(text, HasSubstr("2 visible to workers (CUDA_VISIBLE_DEVICES=0,1); "
                              "CUDA_VISIBLE_DEVICES names more GPUs"));
  EXPECT_EQ(doctor_json(r)["hosts"][0]["torch"]["checked"], false);
}

TEST(DoctorJson, MachineReadableSchema) {
  DoctorReport r = sample_report();
  r.remote_hosts = "--hostfile hosts.txt";
  auto j = doctor_json(r);
  ASSERT_EQ(j["hosts"].size(), 1u);
  const auto& h = j["hosts"][0];
  EXPECT_EQ(h["host"], "node1");
  EXPECT_EQ(h["local"], true);
  EXPECT_EQ(h["nccl"]["version"], "2.28.9");
  EXPECT_EQ(h["torch"]["found"], false);
  EXPECT_EQ(h["torch"]["checked"], true);
  EXPECT_TRUE(h["torch"]["version"].is_null());
  EXPECT_EQ(h["backend"]["name"], "gloo");
  EXPECT_EQ(h["interface"]["name"], "eth0");
  EXPECT_TRUE(h["interface"]["warning"].is_null());
  EXPECT_EQ(h["interfaces"][1]["kind"], "ethernet");
  EXPECT_EQ(h["interfaces"][1]["speed_mbps"], 10000);
  EXPECT_TRUE(h["interfaces"][0]["speed_mbps"].is_null());
  const auto& ib = h["variables"][5];
  EXPECT_EQ(ib["name"], "NCCL_IB_DISABLE");
  EXPECT_EQ(ib["value"], "1");
  EXPECT_EQ(ib["user_value"], "0");
  EXPECT_EQ(ib["effective"], "0");
  EXPECT_EQ(j["remote"]["hosts"], "--hostfile hosts.txt");
  EXPECT_EQ(j["remote"]["status"], "none (give --hostfile or -H to check other hosts)");
  EXPECT_EQ(j["ok"], true);
  EXPECT_TRUE(j["problems"].empty());
}

TEST(ParseDoctorArgs, RemoteAndBandwidthFlags) {
  auto r = parse_doctor_args({"-H", "host1,host2", "--port", "29511", "--timeout-ms=500",
                              "--ssh-timeout-ms", "2000", "--connect-test", "10.0.0.1:29511"});
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_EQ(r.options.port, 29511);
  EXPECT_EQ(r.options.timeout_ms, 500);
  EXPECT_EQ(r.options.ssh_timeout_ms, 2000);
  EXPECT_EQ(r.options.connect_test, "10.0.0.1:29511");
  auto b = parse_doctor_args({"--bandwidth", "--nproc_per_node", "2", "-b", "8", "-e", "1M", "-f",
                              "4", "-n", "3", "-w", "1"});
  EXPECT_TRUE(b.errors.empty()) << b.errors.front();
  EXPECT_TRUE(b.options.bandwidth);
  EXPECT_EQ(b.options.sweep.max_bytes, 1u << 20);
  EXPECT_EQ(b.options.sweep.factor, 4);
  EXPECT_EQ(b.options.sweep.iters, 3);
  EXPECT_EQ(b.options.sweep.warmup, 1);
}

TEST(ParseDoctorArgs, RemoteAndBandwidthErrors) {
  auto r = parse_doctor_args(
      {"--port", "70000", "--connect-test", "nohost", "-e", "1M", "--timeout-ms", "0"});
  ASSERT_EQ(r.errors.size(), 4u);
  EXPECT_THAT(r.errors[0], HasSubstr("--port=70000"));
  EXPECT_THAT(r.errors[1], HasSubstr("--connect-test=nohost"));
  EXPECT_THAT(r.errors[2], HasSubstr("--timeout-ms=0"));
  EXPECT_THAT(r.errors[3], HasSubstr("go with --bandwidth"));
  auto b = parse_doctor_args({"--bandwidth", "-b", "1M", "-e", "8"});
  ASSERT_EQ(b.errors.size(), 2u);
  EXPECT_THAT(b.errors[0], HasSubstr("is larger than -e"));
  EXPECT_THAT(b.errors[1], HasSubstr("needs at least 2 ranks"));
  // One NCCL rank runs the whole GPU path (a 1-rank communicator): allowed.
  EXPECT_TRUE(parse_doctor_args({"--bandwidth", "--backend", "nccl"}).errors.empty());
  EXPECT_EQ(parse_doctor_args({"--bandwidth", "--backend", "gloo", "--nproc_per_node", "1"})
                .errors.size(),
            1u);
}

TEST(HostJson, ARemoteReportRoundTrips) {
  HostReport h = sample_report().hosts[0];
  h.gpus.cuda_visible_devices = "0";
  h.rendezvous_port = PortCheck{"10.0.0.1:29511", true, "", 3};
  h.master_addr = "10.0.0.1";
  HostReport back = host_from_json(host_json(h));
  EXPECT_EQ(host_json(back), host_json(h));
  EXPECT_EQ(format_doctor_text({{back}, "", 0, "x"}), format_doctor_text({{h}, "", 0, "x"}));
}

TEST(HostProblems, EachNamesItsHost) {
  DoctorReport r = sample_report();
  HostReport down;
  down.host = "host2";
  down.local = false;
  down.reachable = false;
  down.ssh_error = "host2: cannot connect to 10.77.0.12: Connection refused";
  HostReport blocked = sample_report().hosts[0];
  blocked.host = "host3";
  blocked.local = false;
  blocked.address = "10.77.0.1";
  blocked.rendezvous_port =
      PortCheck{"10.77.0.1:29511", false, "timed out after 500 ms (a firewall?)", 500};
  HostReport old = blocked;
  old.host = "host4";
  old.rendezvous_port.reset();
  old.probe_error = "`mlrun doctor --json` there exited with 2: unknown argument";
  r.hosts = {r.hosts[0], down, blocked, old};
  r.remote_hosts = "-H host2,host3,host4";
  std::string text = format_doctor_text(r);
  EXPECT_THAT(text, HasSubstr("host host2 (over SSH)\n  SSH         unreachable: host2: cannot "
                              "connect to 10.77.0.12: Connection refused\n"));
  EXPECT_THAT(text, HasSubstr("host host3 (over SSH; this host is 10.77.0.1 to it)\n"
                              "  SSH         ok\n"
                              "  Rendezvous  cannot reach 10.77.0.1:29511: timed out after 500 ms "
                              "(a firewall?)\n"));
  EXPECT_THAT(text, HasSubstr("3 problems:\n"));
  EXPECT_THAT(text, HasSubstr("  host3 cannot reach 10.77.0.1:29511: timed out after 500 ms "
                              "(a firewall?)\n"));
  EXPECT_THAT(text, HasSubstr("  host2 is unreachable over SSH: host2: cannot connect"));
  EXPECT_THAT(text, HasSubstr("  host4: probe failed: `mlrun doctor --json` there exited"));
  auto j = doctor_json(r);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["problems"].size(), 3u);
  EXPECT_EQ(j["hosts"][1]["reachable"], false);
  EXPECT_EQ(j["hosts"][1]["ssh"]["ok"], false);
  EXPECT_FALSE(j["hosts"][1].contains("gpus"));  // Nothing is known of an unreachable host.
  EXPECT_EQ(j["hosts"][2]["rendezvous_port"]["ok"], false);
  EXPECT_EQ(j["hosts"][2]["ssh"]["ok"], true);
  EXPECT_EQ(j["hosts"][2]["backend"]["name"], "gloo");
  HostReport back = host_from_json(j["hosts"][1]);
  EXPECT_FALSE(back.reachable);
  EXPECT_EQ(back.ssh_error, down.ssh_error);
}

// A host that accepted SSH but whose probe did not finish within the phase's bound is named,
// with the bound, and nothing else is claimed about it.
TEST(HostProblems, NoReportInTimeNamesTheHost) {
  DoctorReport r = sample_report();
  HostReport slow;
  slow.host = "host2";
  slow.local = false;
  slow.address = "10.77.0.1";
  slow.probe_timed_out = true;
  slow.probe_error = "no report within 20 s (--probe-timeout; ...)";
  r.hosts = {r.hosts[0], slow};
  r.remote_hosts = "-H host2";
  std::string text = format_doctor_text(r);
  EXPECT_THAT(text, HasSubstr("host host2 (over SSH; this host is 10.77.0.1 to it)\n"
                              "  SSH         ok\n"
                              "  Probe       no report within 20 s (--probe-timeout; ...)\n"));
  EXPECT_THAT(text, HasSubstr("1 problem:\n  host2: no report within 20 s"));
  EXPECT_THAT(text, Not(HasSubstr("probe failed")));
  auto j = doctor_json(r);
  EXPECT_EQ(j["hosts"][1]["probe_timed_out"], true);
  EXPECT_FALSE(j["hosts"][1].contains("gpus"));
  HostReport back = host_from_json(j["hosts"][1]);
  EXPECT_TRUE(back.probe_timed_out);
  EXPECT_EQ(back.probe_error, slow.probe_error);
}

TEST(RemoteProbeLimit, DefaultCoversTheProbesOwnBounds) {
  DoctorOptions o;  // SSH 10 s + mpirun 10 s + python 20 s + connect 3 s + 15 s: 58 s.
  EXPECT_EQ(remote_probe_limit_seconds(o), kProbeTimeoutSeconds);
  o.python_timeout = 100;  // 138 s: a slow but healthy host is not cut off.
  EXPECT_EQ(remote_probe_limit_seconds(o), 138);
  o.probe_timeout_s = 20;  // Given: kept as given.
  EXPECT_EQ(remote_probe_limit_seconds(o), 20);
  auto parsed = parse_doctor_args({"--probe-timeout", "5", "--stdin-lifeline"});
  EXPECT_TRUE(parsed.errors.empty());
  EXPECT_EQ(parsed.options.probe_timeout_s, 5);
  EXPECT_TRUE(parsed.options.stdin_lifeline);
  parsed = parse_doctor_args({"--probe_timeout=0"});
  ASSERT_EQ(parsed.errors.size(), 1u);
  EXPECT_THAT(parsed.errors[0], HasSubstr("--probe-timeout=0: expected seconds"));
}

// A port with a listener is reached; a port without one is refused at once.
TEST(TcpConnectTest, ReachedAndRefused) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string target = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  PortCheck ok = tcp_connect_test(target, 2000);
  EXPECT_TRUE(ok.ok) << ok.error;
  close(fd);
  PortCheck refused = tcp_connect_test(target, 2000);
  EXPECT_FALSE(refused.ok);
  EXPECT_THAT(refused.error, HasSubstr("refused"));
  EXPECT_LT(refused.elapsed_ms, 1000);
}

}  // namespace
}  // namespace mlrun::doctor
