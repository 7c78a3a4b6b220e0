#include "hostfiles/slurm_lists.h"

#include <gtest/gtest.h>

namespace mlrun {
namespace {

using Strings = std::vector<std::string>;

Strings hosts(std::string_view list) {
  std::string error;
  auto names = expand_slurm_hostlist(list, &error);
  EXPECT_EQ(error, "") << list;
  return names;
}

std::string host_error(std::string_view list) {
  std::string error;
  auto names = expand_slurm_hostlist(list, &error);
  EXPECT_TRUE(names.empty()) << list;
  return error;
}

TEST(SlurmHostlist, ExpandsAsScontrolShowHostnames) {
  EXPECT_EQ(hosts("sn[01-03]"), (Strings{"sn01", "sn02", "sn03"}));
  EXPECT_EQ(hosts("node[01-02,07],gpu5"), (Strings{"node01", "node02", "node07", "gpu5"}));
  EXPECT_EQ(hosts("rack[1-2]-n[01-02]"),
            (Strings{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}));
  EXPECT_EQ(hosts("a,b[9-11],c"), (Strings{"a", "b9", "b10", "b11", "c"}));
  EXPECT_EQ(hosts("n[098-100]"), (Strings{"n098", "n099", "n100"}));
  EXPECT_EQ(hosts("single"), (Strings{"single"}));
  EXPECT_EQ(hosts("x[1-2],x[1]"), (Strings{"x1", "x2", "x1"}));
}

TEST(SlurmHostlist, MalformedListsSayWhichItemAndWhy) {
  EXPECT_EQ(host_error(""), "empty host list");
  EXPECT_EQ(host_error("a,,b"), "'': empty item");
  EXPECT_EQ(host_error("sn[03-01]"), "'sn[03-01]': bad range: 03-01 runs backwards");
  EXPECT_EQ(host_error("sn[01-03"), "'sn[01-03': bad range: '[' without ']'");
  EXPECT_EQ(host_error("sn01]"), "'sn01]': bad range: ']' without '['");
  EXPECT_EQ(host_error("sn[a-b]"), "'sn[a-b]': bad range: 'a-b' is not a number or a range N-M");
  EXPECT_EQ(host_error("sn[]"), "'sn[]': bad range: empty range []");
  EXPECT_EQ(host_error("-x"), "'-x': a host name cannot start with '-'");
  EXPECT_EQ(host_error("a b"), "'a b': ' ' is not allowed in a host name");
  EXPECT_EQ(host_error("n[0-99999]"),
            "'n[0-99999]': bad range: [0-99999] stands for more than 65536 hosts");
  EXPECT_EQ(host_error("a[1-60000],b[1-60000]"),
            "'a[1-60000],b[1-60000]': the list stands for more than 65536 hosts");
}

std::vector<int> counts(std::string_view text) {
  std::string error;
  auto out = expand_slurm_counts(text, &error);
  EXPECT_EQ(error, "") << text;
  return out;
}

std::string count_error(std::string_view text) {
  std::string error;
  auto out = expand_slurm_counts(text, &error);
  EXPECT_TRUE(out.empty()) << text;
  return error;
}

TEST(SlurmCounts, RunLengthForm) {
  EXPECT_EQ(counts("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(counts("4"), (std::vector<int>{4}));
  EXPECT_EQ(counts("1,2,3"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(counts("8(x2),0,3(x1)"), (std::vector<int>{8, 8, 0, 3}));
}

TEST(SlurmCounts, MalformedCountsSayWhichItemAndWhy) {
  EXPECT_EQ(count_error(""), "empty list of counts");
  EXPECT_EQ(count_error("2(x0)"), "'2(x0)': repeat count not a positive integer");
  EXPECT_EQ(count_error("2(3)"), "'2(3)': expected N or N(xR)");
  EXPECT_EQ(count_error("2(x3"), "'2(x3': expected N or N(xR)");
  EXPECT_EQ(count_error("a"), "'a': count not a non-negative integer");
  EXPECT_EQ(count_error("1,,2"), "'': count not a non-negative integer");
  EXPECT_EQ(count_error("-1"), "'-1': count not a non-negative integer");
  EXPECT_EQ(count_error("1(x99999)"), "'1(x99999)': repeat count more than the limit of 65536");
  EXPECT_EQ(count_error("1(x65536),1"), "'1(x65536),1' stands for more than 65536 counts");
}

}  // namespace
}  // namespace mlrun
