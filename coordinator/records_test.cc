#include "coordinator/records.h"

#include <gtest/gtest.h>

namespace mlrun::coordinator {
namespace {

TEST(FailureRecord, RoundTrips) {
  FailureRecord r{2, "host3", 7, 1, 4242, "exit code 3", 3, "12:00:01.250", {"a", "b"}, "boom"};
  FailureRecord back = FailureRecord::decode(r.encode());
  EXPECT_EQ(back.node, 2);
  EXPECT_EQ(back.host, "host3");
  EXPECT_EQ(back.rank, 7);
  EXPECT_EQ(back.local_rank, 1);
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.status, "exit code 3");
  EXPECT_EQ(back.code, 3);
  EXPECT_EQ(back.time, "12:00:01.250");
  EXPECT_EQ(back.tail, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(back.error, "boom");
  // No error message: no "error" field, as launcher/summary.cc's reader expects.
  r.error.clear();
  EXPECT_EQ(r.encode().find("\"error\""), std::string::npos);
  EXPECT_EQ(FailureRecord::decode(r.encode()).error, "");
}

TEST(FailureRecord, MalformedIsAClearError) {
  for (const char* bad : {"", "not json", "[1,2]", "{\"node\":1}", "{\"code\":\"three\"}",
                          "{\"code\":3,\"tail\":\"x\"}"}) {
    try {
      FailureRecord::decode(bad);
      ADD_FAILURE() << "decoded: " << bad;
    } catch (const RecordError& e) {
      EXPECT_NE(std::string(e.what()).find("failure record"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(failure_code("{\"code\":137}"), 137);
  EXPECT_EQ(failure_code("{garbage"), 1);  // A failure it still is.
}

TEST(NodeResult, RoundTrips) {
  for (NodeResult r : {NodeResult{true, 0}, NodeResult{false, 3}, NodeResult{false, 1, true}}) {
    NodeResult back = NodeResult::decode(r.encode());
    EXPECT_EQ(back.ok, r.ok);
    EXPECT_EQ(back.code, r.code);
    EXPECT_EQ(back.lost, r.lost);
  }
  EXPECT_EQ((NodeResult{true, 0}.encode()), "{\"code\":0,\"ok\":true}");
}

TEST(NodeResult, MalformedIsAClearError) {
  for (const char* bad :
       {"{", "\"ok\"", "{\"ok\":true}", "{\"code\":0}", "{\"ok\":1,\"code\":0}"}) {
    try {
      NodeResult::decode(bad);
      ADD_FAILURE() << "decoded: " << bad;
    } catch (const RecordError& e) {
      EXPECT_NE(std::string(e.what()).find("a node's result record"), std::string::npos)
          << e.what();
    }
  }
}

TEST(MembershipChange, RoundTripsAndDescribes) {
  MembershipChange c{
      4, 2, 2, 3, {"host4#cd"}, {{1, "host2#ab", "its connection closed", "12:00:03", 31.0}}};
  MembershipChange back = MembershipChange::decode(c.encode());
  EXPECT_EQ(back.round, 4);
  EXPECT_EQ(back.alive, 2);
  EXPECT_EQ(back.min, 2);
  EXPECT_EQ(back.max, 3);
  EXPECT_EQ(back.joined, (std::vector<std::string>{"host4#cd"}));
  ASSERT_EQ(back.lost.size(), 1u);
  EXPECT_EQ(back.lost[0].member, "host2#ab");
  EXPECT_EQ(back.describe(),
            "node 1 (host2#ab) lost: its connection closed; last heard from at 12:00:03 (31.0 s "
            "ago); host4#cd is waiting to join");
}

TEST(MembershipChange, ReadsWhatTheServerWrites) {
  // rendezvous/server_elastic.cc publish_change's text.
  MembershipChange c = MembershipChange::decode(
      "{\"round\":0,\"alive\":1,\"min\":1,\"max\":2,\"joined\":[],\"lost\":[{\"node\":1,"
      "\"member\":\"h#1\",\"last_heard\":\"10:00:00\",\"silent_s\":2.5,\"why\":\"closed\"}]}");
  EXPECT_EQ(c.alive, 1);
  ASSERT_EQ(c.lost.size(), 1u);
  EXPECT_EQ(c.lost[0].node, 1);
  EXPECT_DOUBLE_EQ(c.lost[0].silent_s, 2.5);
  EXPECT_EQ(c.describe_lost(),
            "node 1 (h#1) lost: closed; last heard from at 10:00:00 (2.5 s ago)");
}

TEST(MembershipChange, MalformedIsAClearError) {
  for (const char* bad :
       {"nope", "{\"lost\":7}", "{\"lost\":[3]}", "{\"alive\":\"x\"}", "{\"joined\":[1]}"}) {
    try {
      MembershipChange::decode(bad);
      ADD_FAILURE() << "decoded: " << bad;
    } catch (const RecordError& e) {
      EXPECT_NE(std::string(e.what()).find("membership change"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace mlrun::coordinator
