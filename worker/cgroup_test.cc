// Parsing of /proc/self/mountinfo and /proc/self/cgroup, and a job cgroup's life where this
// machine allows one (skipped elsewhere).
#include "worker/cgroup.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

// This machine's kind: hybrid, cgroup2 at /sys/fs/cgroup/unified among v1 mounts.
constexpr const char* kHybrid =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(CgroupParse, FindsTheCgroup2MountAmongV1Mounts) {
  auto m = parse_cgroup2_mount(kHybrid);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m->root, "/");
}

TEST(CgroupParse, PlainV2WithOptionalFieldsAndEscapes) {
  // Optional fields (shared:N) come before the dash; a space in a path is \040.
  auto m = parse_cgroup2_mount(
      "22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
      "25 22 0:23 / /sys/fs/cgroup rw,nosuid shared:9 master:2 - cgroup2 cgroup2 rw,nsdelegate\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mount_point, "/sys/fs/cgroup");
  auto spaced = parse_cgroup2_mount("25 22 0:23 /sub /my\\040cg rw - cgroup2 none rw\n");
  ASSERT_TRUE(spaced);
  EXPECT_EQ(spaced->mount_point, "/my cg");
  EXPECT_EQ(spaced->root, "/sub");
}

TEST(CgroupParse, NoCgroup2MountAndMalformedLines) {
  EXPECT_FALSE(parse_cgroup2_mount(""));
  EXPECT_FALSE(parse_cgroup2_mount("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"));
  // A mount point named cgroup2 is not the file system type; no dash at all is no entry.
  EXPECT_FALSE(parse_cgroup2_mount("1 2 3:4 / /cgroup2 rw - tmpfs cgroup2 rw\n"));
  EXPECT_FALSE(parse_cgroup2_mount("1 2 3:4 / /x rw cgroup2\n"));
  EXPECT_FALSE(parse_cgroup2_mount("garbage\n - cgroup2\n"));
}

TEST(CgroupParse, OwnCgroupFromTheZeroLine) {
  EXPECT_EQ(parse_own_cgroup("9:name=systemd:/\n4:memory:/x/y\n0::/\n"), "/");
  EXPECT_EQ(
      parse_own_cgroup("0::/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope\n"),
      "/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope");
  // Pure v1 (no 0:: line), or a v1 hierarchy whose name starts with 0.
  EXPECT_FALSE(parse_own_cgroup("4:memory:/\n1:cpu:/\n"));
  EXPECT_FALSE(parse_own_cgroup("10:cpu:/\n"));
  EXPECT_FALSE(parse_own_cgroup(""));
}

TEST(CgroupParse, DirectoryUnderTheMountsRoot) {
  Cgroup2Mount plain{"/sys/fs/cgroup", "/"};
  EXPECT_EQ(cgroup_directory(plain, "/"), "/sys/fs/cgroup");
  EXPECT_EQ(cgroup_directory(plain, "/a/b"), "/sys/fs/cgroup/a/b");
  Cgroup2Mount sub{"/mnt/cg", "/job"};
  EXPECT_EQ(cgroup_directory(sub, "/job"), "/mnt/cg");
  EXPECT_EQ(cgroup_directory(sub, "/job/x"), "/mnt/cg/x");
  EXPECT_EQ(cgroup_directory(sub, "/jobx"), "");  // Not under the mount's root.
  EXPECT_EQ(cgroup_directory(sub, "/other"), "");
  EXPECT_EQ(cgroup_directory(plain, "/gone (deleted)"), "");
}

TEST(CgroupParse, NamePartIsOnePathComponent) {
  EXPECT_EQ(cgroup_name_part("job-1.a_b"), "job-1.a_b");
  EXPECT_EQ(cgroup_name_part("../x/y z"), ".._x_y_z");
  EXPECT_EQ(cgroup_name_part(".."), "job");
  EXPECT_EQ(cgroup_name_part(""), "job");
  EXPECT_EQ(cgroup_name_part(std::string(100, 'a')).size(), 64u);
}

TEST(JobCgroupTest, MadeUnderOurOwnAndRemovedAtTheEnd) {
  std::string reason;
  auto cg = JobCgroup::create("unit test", &reason);
  if (!cg) GTEST_SKIP() << "no job cgroup here: " << reason;
  std::string path = cg->path();
  struct stat st;
  ASSERT_EQ(stat((path + "/cgroup.kill").c_str(), &st), 0) << path;
  EXPECT_NE(path.find("/mlrun-unit_test-"), std::string::npos) << path;
  // A leaf per attempt: the first made with the cgroup, the next after a kill.
  EXPECT_GE(cg->procs_fd(), 0);
  EXPECT_GE(cg->dir_fd(), 0);
  EXPECT_EQ(stat((path + "/attempt-0").c_str(), &st), 0);
  EXPECT_TRUE(cg->kill_all());  // Empty: nothing to wait for.
  EXPECT_EQ(cg->procs_fd(), -1);
  EXPECT_NE(stat((path + "/attempt-0").c_str(), &st), 0) << "the ended attempt's leaf is left";
  std::string error;
  ASSERT_TRUE(cg->open_attempt(&error)) << error;
  EXPECT_EQ(stat((path + "/attempt-1").c_str(), &st), 0);
  cg.reset();
  EXPECT_NE(stat(path.c_str(), &st), 0) << path << " is left";
  EXPECT_EQ(probe_cgroup_support().describe().rfind("cgroup v2 at /", 0), 0u);
}

}  // namespace
}  // namespace mlrun
