#include "launcher/doctor.h"

#include <arpa/inet.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mlrun {
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
  auto b = choose_backend("auto", 8, nccl);
  EXPECT_EQ(b.name, "nccl");
  EXPECT_THAT(b.reason, HasSubstr("8 NVIDIA GPUs and NCCL 2.28.9"));
  b = choose_backend("auto", 0, nccl);
  EXPECT_EQ(b.name, "gloo");
  EXPECT_THAT(b.reason, HasSubstr("no NVIDIA GPU"));
  b = choose_backend("auto", 2, none);
  EXPECT_EQ(b.name, "gloo");
  EXPECT_THAT(b.reason, HasSubstr("no NCCL"));
  EXPECT_EQ(choose_backend("auto", 0, none).name, "gloo");
  b = choose_backend("mpi", 8, nccl);
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
  h.backend = choose_backend("auto", 0, h.nccl);
  h.variables = doctor_variables("gloo", network_variables("eth0", false), {"NCCL_IB_DISABLE=0"});
  DoctorReport r;
  r.hosts.push_back(h);
  r.remote_status = "not implemented yet";
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
  EXPECT_THAT(text, HasSubstr("remote checks: not implemented yet"));
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
  EXPECT_EQ(j["remote"]["status"], "not implemented yet");
}

}  // namespace
}  // namespace mlrun
