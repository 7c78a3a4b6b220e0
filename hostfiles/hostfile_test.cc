#include "hostfiles/hostfile.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

std::string sample(const std::string& name) {
  return std::string(MLRUN_HOSTFILE_SAMPLES) + "/" + name;
}

// "host:slots" for each host, for compact expectations.
std::vector<std::string> summary(const HostList& list) {
  std::vector<std::string> out;
  for (const auto& h : list.hosts) {
    std::string s = h.user.empty() ? h.host : h.user + "@" + h.host;
    s += ":" + std::to_string(h.slots);
    if (h.max_slots > 0) s += "/" + std::to_string(h.max_slots);
    if (h.port > 0) s += " port " + std::to_string(h.port);
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> messages(const HostList& list) {
  std::vector<std::string> out;
  for (const auto& e : list.errors) out.push_back(format_error(e));
  return out;
}

using Strings = std::vector<std::string>;

// One-line files whose single error is expected verbatim.
std::string only_error(std::string_view text) {
  auto list = parse_hostfile(text, "h.txt");
  EXPECT_EQ(list.errors.size(), 1u) << testing::PrintToString(messages(list));
  EXPECT_TRUE(list.hosts.empty());
  return list.errors.empty() ? "" : format_error(list.errors[0]);
}

// A hostfile's own bytes in a message are made harmless: an escape sequence is shown, not run.
TEST(Hostfile, ControlBytesInAnErrorAreShownEscaped) {
  auto list = parse_hostfile("node\x1b[2K\x1b[1A slots=2\n", "esc.txt");
  ASSERT_EQ(list.errors.size(), 1u);
  std::string m = format_error(list.errors[0]);
  EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
  EXPECT_NE(m.find("\\x1b[2K"), std::string::npos) << m;
}

// A binary file given as the hostfile: twenty errors and a count, not one for each "line".
TEST(Hostfile, ABinaryFileGetsTwentyErrorsAndACount) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "h slots=x\n";
  auto list = parse_hostfile(text, "bin");
  ASSERT_EQ(list.errors.size(), kMaxHostfileErrors + 1);
  EXPECT_EQ(format_error(list.errors.back()), "bin: 80 more errors not shown (is it a hostfile?)");
  EXPECT_EQ(list.errors[0].line, 1);
}

TEST(Hostfile, OpenMpiLines) {
  auto list = parse_hostfile(
      "a slots=4 max_slots=8\n"
      "b slots=2\n"
      "bob@c slots=3\n"
      "d\n",
      "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:4/8", "b:2", "bob@c:3", "d:1"}));
  EXPECT_EQ(list.hosts[0].line, 1);
  EXPECT_EQ(list.hosts[3].line, 4);
  EXPECT_EQ(list.hosts[0].source, "h.txt");
  EXPECT_TRUE(list.hosts[0].slots_given);
  EXPECT_FALSE(list.hosts[3].slots_given);
}

TEST(Hostfile, MaxSlotsAliasesAndSpacesAroundEquals) {
  auto list = parse_hostfile(
      "a slots=1 max-slots=2\nb slots=1 slots_max=3\nc slots=1 slots-max=4\n"
      "d slots = 2 max_slots= 5\ne\tslots =3\n",
      "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:1/2", "b:1/3", "c:1/4", "d:2/5", "e:3"}));
}

TEST(Hostfile, MaxSlotsAloneSetsSlotsAsOpenMpiDoes) {
  auto list = parse_hostfile("a max_slots=3\n", "h.txt");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(summary(list), (Strings{"a:3/3"}));
  EXPECT_TRUE(list.hosts[0].slots_given);
}

TEST(Hostfile, UserAndPortKeys) {
  auto list =
      parse_hostfile("a username=bob port=2222\nc user-name=x\ncarol@d user_name=carol\n", "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"bob@a:1 port 2222", "x@c:1", "carol@d:1"}));
}

TEST(Hostfile, MpichColonForm) {
  auto list = parse_hostfile("a:4\nalice@b:2\nc\n", "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:4", "alice@b:2", "c:1"}));
  EXPECT_TRUE(list.hosts[0].slots_given);
}

TEST(Hostfile, DeepSpeedForm) {
  auto list = parse_hostfile("worker-0 slots=8\nworker-1 slots=8\n", "h.txt");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(summary(list), (Strings{"worker-0:8", "worker-1:8"}));
}

TEST(Hostfile, CommentsBlankLinesWhitespaceCrlfAndBom) {
  auto list = parse_hostfile(
      "\xEF\xBB\xBF# header\r\n"
      "\r\n"
      "   a slots=2   # trailing comment\r\n"
      "\t\n"
      "#b slots=9\n"
      "c#no space before the comment\n"
      "d",  // No final newline.
      "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:2", "c:1", "d:1"}));
  EXPECT_EQ(list.hosts[0].line, 3);
  EXPECT_EQ(list.hosts[2].line, 7);
}

TEST(Hostfile, NamesAndAddresses) {
  auto list = parse_hostfile("gpu-a.cluster.local\nnode_1\n10.0.0.7\n", "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"gpu-a.cluster.local:1", "node_1:1", "10.0.0.7:1"}));
}

TEST(Hostfile, SlurmRangesOnALine) {
  auto list = parse_hostfile("node[01-03,07] slots=4\nr[1-2]n[1-2]:2\n", "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"node01:4", "node02:4", "node03:4", "node07:4", "r1n1:2",
                                    "r1n2:2", "r2n1:2", "r2n2:2"}));
  EXPECT_EQ(list.hosts[3].line, 1);
  EXPECT_EQ(list.hosts[4].line, 2);
}

TEST(Hostfile, Ipv6) {
  auto list = parse_hostfile(
      "fe80::1\n"
      "2001:DB8:0::10 slots=4\n"
      "[2001:db8::11]:2\n"
      "root@[2001:db8::12]:3\n"
      "fe80::2%eth0 slots=2\n"
      "fe80::1:2\n",  // A bare address never takes a ":N" suffix: this is the address fe80::1:2.
      "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"fe80::1:1", "2001:db8::10:4", "2001:db8::11:2",
                                    "root@2001:db8::12:3", "fe80::2%eth0:2", "fe80::1:2:1"}));
}

TEST(Hostfile, DuplicatesAddUpAtTheFirstMention) {
  // Open MPI 4.1: "a" three times is three slots; "a slots=2" then "a" is three.
  auto list = parse_hostfile("a\nb slots=2\na\nA\nb\nb:3\n", "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:3", "b:6"}));
  EXPECT_EQ(list.hosts[0].line, 1);
  EXPECT_TRUE(list.hosts[0].slots_given);  // Counted by repetition.
}

TEST(Hostfile, DuplicatesMergeUserPortMaxSlotsAndIpv6Spellings) {
  auto list = parse_hostfile(
      "bob@a slots=2 max_slots=8\na slots=2 port=22\nfe80::1\n[fe80:0::1]:2\n", "h.txt");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"bob@a:4/8 port 22", "fe80::1:3"}));
}

TEST(Hostfile, DuplicatesThatDisagree) {
  auto list = parse_hostfile(
      "bob@a\nalice@a\nb port=22\nb port=23\nc max_slots=4\nc max_slots=5\nd slots=2 "
      "max_slots=3\nd slots=2\n",
      "h.txt");
  EXPECT_EQ(messages(list), (Strings{
                                "h.txt:2: a: user 'alice' here, 'bob' on line 1",
                                "h.txt:4: b: port 23 here, 22 on line 3",
                                "h.txt:6: c: max_slots=5 here, max_slots=4 on line 5",
                                "h.txt:7: d: 4 slots over all its lines exceed max_slots=3",
                            }));
  EXPECT_TRUE(list.hosts.empty());
}

TEST(Hostfile, EmptyFileIsAnError) {
  EXPECT_EQ(only_error(""), "h.txt: no hosts: the file has only blank lines and comments");
  EXPECT_EQ(only_error("# only\n\n   \n"),
            "h.txt: no hosts: the file has only blank lines and comments");
}

TEST(Hostfile, EachErrorNamesTokenAndWhy) {
  EXPECT_EQ(only_error("a slots=abc"), "h.txt:1: slots=abc: not a positive integer");
  EXPECT_EQ(only_error("a slots=0"), "h.txt:1: slots=0: not a positive integer");
  EXPECT_EQ(only_error("a slots=-1"), "h.txt:1: slots=-1: not a positive integer");
  EXPECT_EQ(only_error("a slots=99999999999"),
            "h.txt:1: slots=99999999999: more than the limit of 65536");
  EXPECT_EQ(only_error("a slots="), "h.txt:1: slots=: not a positive integer");
  EXPECT_EQ(only_error("a max_slots=x"), "h.txt:1: max_slots=x: not a positive integer");
  EXPECT_EQ(only_error("a slots=4 max_slots=2"), "h.txt:1: max_slots=2: less than slots=4");
  EXPECT_EQ(only_error("a colour=blue"),
            "h.txt:1: colour=blue: unknown key 'colour' (known: slots, max_slots, username, "
            "port)");
  EXPECT_EQ(only_error("a =4"), "h.txt:1: =4: missing key before '='");
  EXPECT_EQ(only_error("a slots 4"), "h.txt:1: slots 4: write slots=4");
  EXPECT_EQ(only_error("a slots"), "h.txt:1: slots: missing '=' and value");
  EXPECT_EQ(only_error("a slots=2 extra"),
            "h.txt:1: extra: unexpected text after the host; expected key=value");
  EXPECT_EQ(only_error("a slots=1 slots=2"), "h.txt:1: slots=2: slots given twice on this line");
  EXPECT_EQ(only_error("a:2 slots=2"), "h.txt:1: slots=2: slots given twice on this line");
  EXPECT_EQ(only_error("a max_slots=2 max_slots=2"),
            "h.txt:1: max_slots=2: max_slots given twice on this line");
  EXPECT_EQ(only_error("a port=0"), "h.txt:1: port=0: not a port number (1-65535)");
  EXPECT_EQ(only_error("a port=70000"), "h.txt:1: port=70000: not a port number (1-65535)");
  EXPECT_EQ(only_error("a port=1 port=2"), "h.txt:1: port=2: port given twice on this line");
  EXPECT_EQ(only_error("bob@a username=carol"),
            "h.txt:1: username=carol: user given twice on this line");
  EXPECT_EQ(only_error("a username="), "h.txt:1: username=: empty user");
  EXPECT_EQ(only_error("slots=4"), "h.txt:1: slots=4: a line starts with a host, not key=value");
  EXPECT_EQ(only_error("a:x"), "h.txt:1: a:x: slot count 'x': not a positive integer");
  EXPECT_EQ(only_error("a:0"), "h.txt:1: a:0: slot count '0': not a positive integer");
  EXPECT_EQ(only_error("a:"), "h.txt:1: a:: slot count '': not a positive integer");
  EXPECT_EQ(only_error(":2"), "h.txt:1: :2: empty host");
  EXPECT_EQ(only_error("user@"), "h.txt:1: user@: empty host");
  EXPECT_EQ(only_error("@a"), "h.txt:1: @a: empty user before '@'");
  EXPECT_EQ(only_error("a@b@c"), "h.txt:1: a@b@c: more than one '@'");
  EXPECT_EQ(only_error("bad!@a"), "h.txt:1: bad!@a: '!' is not allowed in a user name");
  EXPECT_EQ(only_error("-oProxyCommand"),
            "h.txt:1: -oProxyCommand: a host name cannot start with '-'");
  EXPECT_EQ(only_error("a/b"), "h.txt:1: a/b: '/' is not allowed in a host name");
  EXPECT_EQ(only_error("a..b"), "h.txt:1: a..b: empty label '..' in host name");
  EXPECT_EQ(only_error("300.1.1.1"), "h.txt:1: 300.1.1.1: bad IPv4 address");
  EXPECT_EQ(only_error("node[04-01]"), "h.txt:1: node[04-01]: bad range: 04-01 runs backwards");
  EXPECT_EQ(only_error("node[01-02"), "h.txt:1: node[01-02: bad range: '[' without ']'");
  EXPECT_EQ(only_error("node[a-b]"),
            "h.txt:1: node[a-b]: bad range: 'a-b' is not a number or a range N-M");
  EXPECT_EQ(only_error("n[1-2]x[-]"),
            "h.txt:1: n[1-2]x[-]: bad range: '-' is not a number or a range N-M");
  EXPECT_EQ(only_error("n[1-2]!"),
            "h.txt:1: n[1-2]!: '!' is not allowed in a host name (in "
            "'n1!')");
  EXPECT_EQ(only_error("[fe80::1"), "h.txt:1: [fe80::1: '[' of an IPv6 address without ']'");
  EXPECT_EQ(only_error("[fe80::1]x"), "h.txt:1: [fe80::1]x: unexpected 'x' after ']'");
  EXPECT_EQ(only_error("fe80::zz::1"), "h.txt:1: fe80::zz::1: bad IPv6 address");
  EXPECT_EQ(only_error("[fe80::1]:two"),
            "h.txt:1: [fe80::1]:two: slot count 'two': not a positive integer");
  EXPECT_EQ(only_error("fe80::1%"), "h.txt:1: fe80::1%: bad IPv6 zone '%'");
  EXPECT_EQ(only_error("^a"),
            "h.txt:1: ^a: Open MPI's exclusion lines are not supported; use --exclude");
  EXPECT_EQ(only_error("+n0"), "h.txt:1: +n0: Open MPI's relative-node lines are not supported");
  EXPECT_EQ(only_error(std::string("a\x01")),
            "h.txt:1: a\\x01: byte 0x01 is not allowed in a "
            "host name");  // the byte itself escaped
}

TEST(Hostfile, EveryBadLineIsReportedInFileOrderAndNoHostsSurvive) {
  auto list = parse_hostfile("ok slots=2\nx slots=abc\ny colour=red slots=0\nok2\nz:0\n", "f");
  EXPECT_EQ(messages(list), (Strings{
                                "f:2: slots=abc: not a positive integer",
                                "f:3: colour=red: unknown key 'colour' (known: slots, "
                                "max_slots, username, port)",
                                "f:3: slots=0: not a positive integer",
                                "f:5: z:0: slot count '0': not a positive integer",
                            }));
  EXPECT_TRUE(list.hosts.empty());
}

TEST(Hostfile, RangeExpansionIsBounded) {
  auto list = parse_hostfile("n[0-99999999]\n", "h.txt");
  ASSERT_EQ(list.errors.size(), 1u);
  EXPECT_EQ(format_error(list.errors[0]),
            "h.txt:1: n[0-99999999]: bad range: [0-99999999] stands for more than 65536 hosts");
  list = parse_hostfile("n[0-999]m[0-999]\n", "h.txt");
  ASSERT_EQ(list.errors.size(), 1u);
  EXPECT_EQ(format_error(list.errors[0]),
            "h.txt:1: n[0-999]m[0-999]: bad range: stands for more than 65536 hosts");
}

TEST(Hostfile, SlotSumIsBounded) {
  auto list = parse_hostfile("a slots=65536\na\n", "h.txt");
  EXPECT_EQ(messages(list), (Strings{"h.txt:2: a: more than 65536 slots over all its lines"}));
}

TEST(HostfileRead, MissingFileNamesItAndWhy) {
  auto list = read_hostfile("/nonexistent/hosts.txt");
  EXPECT_EQ(messages(list), (Strings{"/nonexistent/hosts.txt: cannot read: No such file or "
                                     "directory"}));
}

TEST(HostfileRead, DirectoryIsAnError) {
  auto list = read_hostfile("/tmp");
  EXPECT_EQ(messages(list), (Strings{"/tmp: cannot read: is a directory"}));
}

TEST(HostfileRead, ReadsAFile) {
  char path[] = "/tmp/mlrun_hostfile_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "a slots=2\nb\n";
  auto list = read_hostfile(path);
  std::remove(path);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(summary(list), (Strings{"a:2", "b:1"}));
  EXPECT_EQ(list.hosts[0].source, path);
}

// --- The sample files, one per dialect. ---

TEST(HostfileSamples, OpenMpi) {
  auto list = read_hostfile(sample("openmpi.txt"));
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"node01:8/16", "node02:8", "alice@node03:4", "node04:2/4",
                                    "bob@node05:1 port 2222", "node06:3"}));
}

TEST(HostfileSamples, Mpich) {
  auto list = read_hostfile(sample("mpich.txt"));
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"node01:8", "node02:8", "node03:4", "node04:1"}));
}

TEST(HostfileSamples, DeepSpeed) {
  auto list = read_hostfile(sample("deepspeed.txt"));
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"worker-0:8", "worker-1:8", "worker-2:8", "worker-3:8"}));
}

TEST(HostfileSamples, Plain) {
  auto list = read_hostfile(sample("plain.txt"));
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"gpu-a.cluster.local:1", "gpu-b.cluster.local:1", "10.0.0.7:1",
                                    "10.0.0.8:1"}));
  for (const auto& h : list.hosts) EXPECT_FALSE(h.slots_given);
}

TEST(HostfileSamples, SlurmRanges) {
  auto list = read_hostfile(sample("slurm_ranges.txt"));
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list),
            (Strings{"node01:4", "node02:4", "node03:4", "node04:4", "node07:4", "rack1-gpu1:2",
                     "rack1-gpu2:2", "rack2-gpu1:2", "rack2-gpu2:2"}));
}

TEST(HostfileSamples, Ipv6) {
  auto list = read_hostfile(sample("ipv6.txt"));
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"fe80::1:1", "2001:db8::10:4", "2001:db8::11:2",
                                    "root@2001:db8::12:2", "fe80::2%eth0:2"}));
}

TEST(HostfileSamples, BadReportsEveryError) {
  const std::string f = sample("bad.txt");
  auto list = read_hostfile(f);
  EXPECT_TRUE(list.hosts.empty());
  EXPECT_EQ(messages(list),
            (Strings{
                f + ":3: slots=abc: not a positive integer",
                f + ":4: slots=0: not a positive integer",
                f + ":5: max_slots=2: less than slots=4",
                f + ":6: colour=blue: unknown key 'colour' (known: slots, max_slots, username, "
                    "port)",
                f + ":7: slots 4: write slots=4",
                f + ":8: extra: unexpected text after the host; expected key=value",
                f + ":9: node[04-01]: bad range: 04-01 runs backwards",
                f + ":10: node[01-02: bad range: '[' without ']'",
                f + ":11: [fe80::1: '[' of an IPv6 address without ']'",
                f + ":12: fe80::zz::1: bad IPv6 address",
                f + ":13: -oProxyCommand: a host name cannot start with '-'",
                f + ":14: node07:x: slot count 'x': not a positive integer",
                f + ":15: slots=2: slots given twice on this line",
                f + ":16: user@: empty host",
                f + ":17: bad_user!@node09: '!' is not allowed in a user name",
                f + ":18: slots=2: slots given twice on this line",
                f + ":19: slots=4: a line starts with a host, not key=value",
                f + ":20: ^node11: Open MPI's exclusion lines are not supported; use --exclude",
            }));
}

// --- -H / --hosts ---

TEST(HostList, ItemsSlotsUsersRangesAndIpv6) {
  auto list = parse_host_list("a:2,b,node[01-02,07]:4,[fe80::1]:2,user@c, d ,fe80::9");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:2", "b:1", "node01:4", "node02:4", "node07:4", "fe80::1:2",
                                    "user@c:1", "d:1", "fe80::9:1"}));
  EXPECT_EQ(list.hosts[0].source, "-H");
  EXPECT_EQ(list.hosts[0].line, 0);
  EXPECT_TRUE(list.hosts[0].slots_given);
  EXPECT_FALSE(list.hosts[1].slots_given);
}

TEST(HostList, DuplicatesAddUpAsOpenMpiDoes) {
  auto list = parse_host_list("a:2,b,a:3,a");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(summary(list), (Strings{"a:6", "b:1"}));
}

TEST(HostList, ErrorsNameTheItem) {
  auto list = parse_host_list("a:0,,b:x,node[3-1],[fe80::1,c,");
  EXPECT_EQ(messages(list), (Strings{
                                "-H: 'a:0': slot count '0': not a positive integer",
                                "-H: item 2: empty host (a stray ',')",
                                "-H: 'b:x': slot count 'x': not a positive integer",
                                "-H: 'node[3-1]': bad range: 3-1 runs backwards",
                                "-H: '[fe80::1,c,': '[' of an IPv6 address without ']'",
                            }));
  EXPECT_TRUE(list.hosts.empty());
  EXPECT_EQ(messages(parse_host_list("")), (Strings{"-H: empty host list"}));
  EXPECT_EQ(messages(parse_host_list("a,")), (Strings{"-H: item 2: empty host (a stray ',')"}));
  EXPECT_EQ(messages(parse_host_list("bob@a,carol@a")),
            (Strings{"-H: a: user 'carol' here, 'bob' on an earlier item"}));
}

// --- Ranges ---

TEST(HostRanges, ExpandsWithZeroPadding) {
  std::string error;
  EXPECT_EQ(expand_ranges("node[01-04,07]", &error),
            (Strings{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_ranges("n[8-10]", &error), (Strings{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_ranges("n[08-10]", &error), (Strings{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_ranges("n[098-100]", &error), (Strings{"n098", "n099", "n100"}));
  EXPECT_EQ(expand_ranges("[1-2].x", &error), (Strings{"1.x", "2.x"}));
  EXPECT_EQ(expand_ranges("plain", &error), (Strings{"plain"}));
  EXPECT_EQ(expand_ranges("r[1-2]n[1,3]", &error), (Strings{"r1n1", "r1n3", "r2n1", "r2n3"}));
  EXPECT_EQ(expand_ranges("n[5]", &error), (Strings{"n5"}));
  EXPECT_TRUE(error.empty());
}

TEST(HostRanges, Errors) {
  auto why = [](std::string_view pattern) {
    std::string error;
    auto names = expand_ranges(pattern, &error);
    EXPECT_TRUE(names.empty()) << pattern;
    return error;
  };
  EXPECT_EQ(why("n[]"), "empty range []");
  EXPECT_EQ(why("n[1,,2]"), "empty item in [1,,2]");
  EXPECT_EQ(why("n[2-1]"), "2-1 runs backwards");
  EXPECT_EQ(why("n[1-2"), "'[' without ']'");
  EXPECT_EQ(why("n[1-[2]]"), "nested '['");
  EXPECT_EQ(why("n1-2]"), "']' without '['");
  EXPECT_EQ(why("n[x]"), "'x' is not a number or a range N-M");
  EXPECT_EQ(why("n[1-2-3]"), "'1-2-3' is not a number or a range N-M");
  EXPECT_EQ(why("n[1234567890]"), "'1234567890' has more than 9 digits");
  EXPECT_EQ(why("n[0-70000]"), "[0-70000] stands for more than 65536 hosts");
}

// --- --include / --exclude ---

std::vector<HostEntry> four_gpu_hosts() {
  return parse_hostfile("a slots=4\nb slots=4\nc slots=4\n", "h.txt").hosts;
}

TEST(HostFilter, ParsesDeepSpeedSyntax) {
  std::vector<HostfileError> errors;
  auto filter = parse_slot_filter("a:0,2@b@n[1-2]:1@[fe80::1]:3", "--include", &errors);
  ASSERT_TRUE(errors.empty());
  using Item = SlotFilter::Item;
  EXPECT_EQ(
      filter.items,
      (std::vector<Item>{{"a", {0, 2}}, {"b", {}}, {"n1", {1}}, {"n2", {1}}, {"fe80::1", {3}}}));
}

TEST(HostFilter, IncludeKeepsNamedHostsAndSlotsInHostOrder) {
  auto list = apply_include_exclude(four_gpu_hosts(), "c:1,3@a", "");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:4", "c:2"}));
  EXPECT_TRUE(list.hosts[0].slot_ids.empty());  // Whole host: all its slots.
  EXPECT_EQ(list.hosts[1].slot_ids, (std::vector<int>{1, 3}));
}

TEST(HostFilter, ExcludeRemovesSlotsAndWholeHosts) {
  auto list = apply_include_exclude(four_gpu_hosts(), "", "a:0@b");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"a:3", "c:4"}));
  EXPECT_EQ(list.hosts[0].slot_ids, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(list.hosts[1].slot_ids.empty());
}

TEST(HostFilter, ExcludingEverySlotDropsTheHost) {
  auto list = apply_include_exclude(four_gpu_hosts(), "", "b:0,1,2,3");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(summary(list), (Strings{"a:4", "c:4"}));
}

TEST(HostFilter, NoFilterReturnsHostsUnchanged) {
  auto list = apply_include_exclude(four_gpu_hosts(), "", "");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list.hosts, four_gpu_hosts());
}

TEST(HostFilter, MatchesNamesWithoutCaseAndIpv6ByCanonicalForm) {
  auto hosts = parse_hostfile("Node1 slots=2\nfe80::1 slots=2\n", "h.txt").hosts;
  auto list = apply_include_exclude(hosts, "node1:1@[fe80:0::1]:0", "");
  ASSERT_TRUE(list.ok()) << messages(list)[0];
  EXPECT_EQ(summary(list), (Strings{"Node1:1", "fe80::1:1"}));
}

TEST(HostFilter, Errors) {
  EXPECT_EQ(messages(apply_include_exclude(four_gpu_hosts(), "a", "b")),
            (Strings{"--include: cannot be combined with --exclude"}));
  EXPECT_EQ(messages(apply_include_exclude(four_gpu_hosts(), "x@a:4@b:-1@c:@@d:z", "")),
            (Strings{
                "--include: 'b:-1': slot '-1': not a non-negative integer",
                "--include: 'c:': empty slot list after ':'",
                "--include: empty host (a stray '@'; a user@ prefix is not allowed here)",
                "--include: 'd:z': slot 'z': not a non-negative integer",
                "--include: 'x': not in the host list",
                "--include: 'a': slot 4 out of range: a has slots 0-3",
            }));
  EXPECT_EQ(messages(apply_include_exclude(four_gpu_hosts(), "", "a@b@c")),
            (Strings{"--exclude: leaves no host to run on"}));
  EXPECT_EQ(messages(apply_include_exclude(four_gpu_hosts(), "", "n[2-1]")),
            (Strings{"--exclude: 'n[2-1]': bad range: 2-1 runs backwards"}));
}

TEST(HostFilter, SecondFilterSeesTheFirstOnesSlots) {
  auto first = apply_include_exclude(four_gpu_hosts(), "a:1,3", "");
  ASSERT_TRUE(first.ok());
  auto second = apply_include_exclude(first.hosts, "", "a:3");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second.hosts[0].slot_ids, (std::vector<int>{1}));
  EXPECT_EQ(messages(apply_include_exclude(first.hosts, "a:0", "")),
            (Strings{"--include: 'a': slot 0 out of range: a has slots 1,3"}));
}

TEST(HostKey, NamesWithoutCaseIpv6Canonical) {
  EXPECT_EQ(host_key("Node01.Cluster"), host_key("node01.cluster"));
  EXPECT_EQ(host_key("FE80:0::1"), host_key("fe80::1"));
  EXPECT_NE(host_key("node1"), host_key("node01"));
}

TEST(HostfileError, Format) {
  EXPECT_EQ(format_error({"hosts.txt", 3, "slots=abc: not a positive integer"}),
            "hosts.txt:3: slots=abc: not a positive integer");
  EXPECT_EQ(format_error({"-H", 0, "empty host list"}), "-H: empty host list");
}

}  // namespace
}  // namespace mlrun
