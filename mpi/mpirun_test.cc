#include "mpi/mpirun.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mlrun::mpi {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::Not;

MpiJob local_job(int ranks, int cores) {
  MpiJob job;
  job.hosts = {{"localhost", ranks, cores}};
  job.world_size = ranks;
  job.argv = {"/opt/app/mpi_allreduce", "--iters", "3"};
  job.base_env = {"PATH=/usr/bin:/bin", "HOME=/root"};
  job.hostfile_dir = "/tmp/mlrun-x";
  return job;
}

// The value of NAME in a "NAME=value" list, or "(unset)".
std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& e : env) {
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  }
  return "(unset)";
}

// The names passed with -x, in order.
std::vector<std::string> exported(const std::vector<std::string>& argv) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i + 1 < argv.size() && argv[i] != "--"; ++i) {
    if (argv[i] == "-x") names.push_back(argv[i + 1]);
  }
  return names;
}

TEST(BuildMpirunCommand, FourRanksOnTwoCoresAsRoot) {
  MpiJob job = local_job(4, 2);
  job.as_root = true;
  MpiCommand c = build_mpirun_command(job);
  EXPECT_THAT(c.argv,
              ElementsAreArray<std::string>(
                  {"mpirun", "--allow-run-as-root", "--hostfile", "/tmp/mlrun-x/hostfile", "-np",
                   "4", "--map-by", "slot", "--bind-to", "none", "--oversubscribe", "--tag-output",
                   "-x", "PATH", "--", "/opt/app/mpi_allreduce", "--iters", "3"}));
  EXPECT_EQ(c.hostfile_path, "/tmp/mlrun-x/hostfile");
  EXPECT_EQ(c.hostfile_text, "localhost slots=4\n");
}

TEST(BuildMpirunCommand, NoRootFlagForOtherUsersNoOversubscribeWithinCores) {
  MpiCommand c = build_mpirun_command(local_job(2, 8));
  EXPECT_THAT(c.argv, Not(Contains("--allow-run-as-root")));
  EXPECT_THAT(c.argv, Not(Contains("--oversubscribe")));
  EXPECT_THAT(c.argv, Contains("--tag-output"));
}

TEST(BuildMpirunCommand, UnknownCoresDoNotOversubscribe) {
  MpiCommand c = build_mpirun_command(local_job(64, 0));
  EXPECT_THAT(c.argv, Not(Contains("--oversubscribe")));
}

TEST(BuildMpirunCommand, HostfileInRankOrderAndOversubscribeOnlyForTheRanksPlaced) {
  MpiJob job = local_job(1, 0);
  job.hosts = {{"node1", 2, 2}, {"10.0.0.7", 4, 2}, {"fe80::1", 1, 1}};
  job.world_size = 3;  // node1 runs 2 ranks, 10.0.0.7 one: within every host's cores.
  MpiCommand c = build_mpirun_command(job);
  EXPECT_EQ(c.hostfile_text, "node1 slots=2\n10.0.0.7 slots=4\nfe80::1 slots=1\n");
  EXPECT_THAT(c.argv, Not(Contains("--oversubscribe")));
  job.world_size = 5;  // Now 10.0.0.7 runs 3 ranks on 2 cores.
  EXPECT_THAT(build_mpirun_command(job).argv, Contains("--oversubscribe"));
}

TEST(BuildMpirunCommand, ValuesTravelInTheEnvironmentNamesInArgv) {
  MpiJob job = local_job(2, 2);
  job.base_env.push_back("NCCL_SOCKET_IFNAME=ib0");  // The user's own value.
  job.base_env.push_back("LD_LIBRARY_PATH=/opt/mpi/lib");
  job.overrides = {{"MLRUN_BACKEND", "mpi"}, {"MLRUN_RDZV_TOKEN", "s3cret"}, {"FOO", "a b=c"}};
  job.defaults = {{"NCCL_SOCKET_IFNAME", "eth0"}, {"NCCL_IB_DISABLE", "1"}};
  MpiCommand c = build_mpirun_command(job);
  EXPECT_THAT(exported(c.argv),
              ElementsAre("MLRUN_BACKEND", "MLRUN_RDZV_TOKEN", "FOO", "NCCL_SOCKET_IFNAME",
                          "NCCL_IB_DISABLE", "PATH", "LD_LIBRARY_PATH"));
  EXPECT_EQ(env_value(c.env, "MLRUN_BACKEND"), "mpi");
  EXPECT_EQ(env_value(c.env, "FOO"), "a b=c");
  EXPECT_EQ(env_value(c.env, "NCCL_SOCKET_IFNAME"), "ib0");  // The user wins over a default.
  EXPECT_EQ(env_value(c.env, "NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(env_value(c.env, "HOME"), "/root");
  // No value, the token above all, appears in mpirun's argv.
  for (const auto& arg : c.argv) {
    EXPECT_EQ(arg.find("s3cret"), std::string::npos) << arg;
    EXPECT_EQ(arg.find('='), std::string::npos) << arg;
  }
}

TEST(BuildMpirunCommand, AnOverrideReplacesTheLaunchersValueAndIsExportedOnce) {
  MpiJob job = local_job(1, 1);
  job.base_env.push_back("OMP_NUM_THREADS=8");
  job.overrides = {{"OMP_NUM_THREADS", "1"}, {"PATH", "/x/bin"}};
  job.defaults = {{"OMP_NUM_THREADS", "4"}};
  MpiCommand c = build_mpirun_command(job);
  EXPECT_EQ(env_value(c.env, "OMP_NUM_THREADS"), "1");
  EXPECT_EQ(env_value(c.env, "PATH"), "/x/bin");
  EXPECT_THAT(exported(c.argv), ElementsAre("OMP_NUM_THREADS", "PATH"));
}

TEST(BuildMpirunCommand, PrefixAndMpirunPath) {
  MpiJob job = local_job(1, 1);
  job.mpirun = "/opt/openmpi/bin/mpirun";
  job.prefix = "/opt/openmpi";
  MpiCommand c = build_mpirun_command(job);
  EXPECT_EQ(c.argv.front(), "/opt/openmpi/bin/mpirun");
  auto it = std::find(c.argv.begin(), c.argv.end(), "--prefix");
  ASSERT_NE(it, c.argv.end());
  EXPECT_EQ(*(it + 1), "/opt/openmpi");
}

TEST(BuildMpirunCommand, ProgramArgumentsThatLookLikeMpirunOptionsStayThePrograms) {
  MpiJob job = local_job(1, 1);
  job.argv = {"/bin/prog", "-np", "7", "-x", "Y"};
  MpiCommand c = build_mpirun_command(job);
  auto dashdash = std::find(c.argv.begin(), c.argv.end(), "--");
  ASSERT_NE(dashdash, c.argv.end());
  EXPECT_EQ(std::vector<std::string>(dashdash + 1, c.argv.end()), job.argv);
  EXPECT_THAT(exported(c.argv), ElementsAre("PATH"));
}

TEST(BuildMpirunCommand, RejectsJobsMpirunCannotRunAsPlanned) {
  MpiJob job = local_job(2, 2);
  job.world_size = 3;
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.hosts.clear();
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.argv.clear();
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.hosts[0].host = "-H";
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.hosts[0].host = "a b";
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.hosts[0].slots = 0;
  job.world_size = 0;
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.overrides = {{"BAD=NAME", "1"}};
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
  job = local_job(2, 2);
  job.defaults = {{"", "1"}};
  EXPECT_THROW(build_mpirun_command(job), std::invalid_argument);
}

TEST(WriteMpiHostfile, WritesTheTextAndNamesTheFileOnError) {
  char dir[] = "/tmp/mlrun-mpi-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  MpiJob job = local_job(3, 3);
  job.hostfile_dir = dir;
  MpiCommand c = build_mpirun_command(job);
  write_mpi_hostfile(c);
  std::ifstream in(c.hostfile_path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "localhost slots=3\n");
  std::remove(c.hostfile_path.c_str());
  rmdir(dir);
  c.hostfile_path = std::string(dir) + "/missing/hostfile";
  try {
    write_mpi_hostfile(c);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(c.hostfile_path), std::string::npos);
  }
}

TEST(ParseMpiOutputLine, TaggedStreams) {
  auto p = parse_mpi_output_line("[1,3]<stdout>:hello world");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rank, 3);
  EXPECT_EQ(p[0].stream, MpiStream::kStdout);
  EXPECT_EQ(p[0].text, "hello world");
  p = parse_mpi_output_line("[12,1024]<stderr>:");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rank, 1024);
  EXPECT_EQ(p[0].stream, MpiStream::kStderr);
  EXPECT_EQ(p[0].text, "");
  p = parse_mpi_output_line("[1,0]<stddiag>:a warning");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].stream, MpiStream::kStddiag);
}

TEST(ParseMpiOutputLine, MpirunsOwnLinesAreUntagged) {
  for (std::string_view line :
       {"--------------------------------------------------------------------------",
        "There are not enough slots available in the system", "", "[1,x]<stdout>:no",
        "[1,2]<stdin>:no", "[1 2]<stdout>:no", "[,2]<stdout>:no", "[1,2]", " [1,2]<stdout>:x"}) {
    auto p = parse_mpi_output_line(line);
    ASSERT_EQ(p.size(), 1u) << line;
    EXPECT_EQ(p[0].rank, -1) << line;
    EXPECT_EQ(p[0].stream, MpiStream::kUntagged) << line;
    EXPECT_EQ(p[0].text, line);
  }
}

TEST(ParseMpiOutputLine, AnUnterminatedWriteIsFollowedByTheNextTag) {
  // What Open MPI 4.1 printed here for `printf partial` in three ranks.
  auto p = parse_mpi_output_line("[1,0]<stdout>:partial[1,1]<stdout>:hi");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].rank, 0);
  EXPECT_EQ(p[0].text, "partial");
  EXPECT_EQ(p[1].rank, 1);
  EXPECT_EQ(p[1].text, "hi");
  p = parse_mpi_output_line("[1,1]<stdout>:partial[1,2]<stdout>:partial[1,0]<stderr>:x");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].rank, 0);
  EXPECT_EQ(p[2].stream, MpiStream::kStderr);
  EXPECT_EQ(p[2].text, "x");
}

TEST(ParseMpiOutputLine, BracketsInTheTextAreText) {
  auto p = parse_mpi_output_line("[1,2]<stdout>:a[0] = [1,2] [3,4]<x>: done");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].text, "a[0] = [1,2] [3,4]<x>: done");
}

}  // namespace
}  // namespace mlrun::mpi
