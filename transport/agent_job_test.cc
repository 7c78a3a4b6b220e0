#include "transport/agent_job.h"

#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "transport/tree.h"

namespace mlrun::transport {
namespace {

AgentJob sample_job() {
  AgentJob job;
  job.endpoint = "10.0.0.1:29400";
  job.port = 29400;
  job.token = "0123456789abcdef";
  job.job_id = "job-7";
  job.nnodes = 8;
  job.cwd = "/work/dir";
  job.env = {{"PATH", "/usr/bin:/bin"}, {"PYTHON", "python3"}};
  job.args = {"--max_restarts=2", "--", "python3", "train.py", "--lr", "0.1"};
  job.grace = std::chrono::milliseconds(2500);
  job.heartbeat_interval = std::chrono::milliseconds(1000);
  job.heartbeat_timeout = std::chrono::milliseconds(15000);
  job.log_level = "debug";
  return job;
}

void expect_same_job_fields(const AgentJob& a, const AgentJob& b) {
  EXPECT_EQ(a.endpoint, b.endpoint);
  EXPECT_EQ(a.port, b.port);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.nnodes, b.nnodes);
  EXPECT_EQ(a.cwd, b.cwd);
  EXPECT_EQ(a.env, b.env);
  EXPECT_EQ(a.args, b.args);
  EXPECT_EQ(a.grace, b.grace);
  EXPECT_EQ(a.heartbeat_interval, b.heartbeat_interval);
  EXPECT_EQ(a.heartbeat_timeout, b.heartbeat_timeout);
  EXPECT_EQ(a.log_level, b.log_level);
}

std::vector<AgentNode> nodes(int n) {
  std::vector<AgentNode> out;
  for (int i = 0; i < n; ++i) out.push_back({i + 1, "host" + std::to_string(i + 2), "", 0, 2, {}});
  return out;
}

TEST(AgentJob, OneNodesRecordRoundTripsWithItsSubtree) {
  auto n = nodes(7);
  n[5].user = "me";
  n[5].port = 2222;
  n[5].gpus = {2, 3};
  auto roots = plan_tree(n, 2);  // node index 5 is child 1 of node index 1
  AgentJob job = job_for_node(sample_job(), roots[1], "head-host");
  AgentJob back = decode_agent_job(encode_agent_job(job));
  expect_same_job_fields(back, job);
  EXPECT_EQ(back.token, job.token);
  EXPECT_EQ(back.node_rank, n[1].node_rank);
  EXPECT_EQ(back.nproc, 2);
  EXPECT_EQ(back.parent, "head-host");
  EXPECT_TRUE(back.nodes.empty());
  ASSERT_EQ(back.children.size(), 2u);
  const auto& deep = back.children[1].node;
  EXPECT_EQ(deep.node_rank, n[5].node_rank);
  EXPECT_EQ(deep.host, n[5].host);
  EXPECT_EQ(deep.user, "me");
  EXPECT_EQ(deep.port, 2222);
  EXPECT_EQ(deep.gpus, (std::vector<int>{2, 3}));
  EXPECT_FALSE(back.simulated);
  // Encoding is a function of the record: what is decoded encodes to the same text.
  EXPECT_EQ(encode_agent_job(back), encode_agent_job(job));
  // A simulated job's interior agents start their children on their own machine.
  job.simulated = true;
  EXPECT_TRUE(decode_agent_job(encode_agent_job(job)).simulated);
}

TEST(AgentJob, EveryNodesRecordRoundTripsWithoutAToken) {
  AgentJob job = sample_job();
  job.token.clear();
  job.nodes = {{0, "sn01", "", 0, 0, {}}, {1, "sn02", "", 0, 2, {0, 1}}};
  std::string text = encode_agent_job(job);
  EXPECT_EQ(text.find("token"), std::string::npos);
  AgentJob back = decode_agent_job(text);
  expect_same_job_fields(back, job);
  EXPECT_EQ(back.token, "");
  EXPECT_EQ(back.node_rank, -1);
  ASSERT_EQ(back.nodes.size(), 2u);
  EXPECT_EQ(back.nodes[1].node_rank, 1);
  EXPECT_EQ(back.nodes[1].host, "sn02");
  EXPECT_EQ(back.nodes[1].nproc, 2);
  EXPECT_EQ(back.nodes[1].gpus, (std::vector<int>{0, 1}));
}

TEST(AgentJob, FieldsOlderHeadsDidNotSendTakeTheirDefaults) {
  AgentJob back = decode_agent_job(
      R"({"endpoint":"h:1","port":1,"job_id":"j","nnodes":2,"cwd":"/","env":{},"args":[],)"
      R"("token":"t","node_rank":1,"nproc":0})");
  EXPECT_EQ(back.grace.count(), 0);
  EXPECT_EQ(back.heartbeat_interval.count(), 0);
  EXPECT_EQ(back.log_level, "warning");
  EXPECT_TRUE(back.children.empty());
  EXPECT_FALSE(back.simulated);
  EXPECT_TRUE(back.gpus.empty());
}

// The message of decoding text, which must fail.
std::string error_of(const std::string& text) {
  try {
    decode_agent_job(text);
  } catch (const AgentJobError& e) {
    return e.what();
  }
  return "(decoded)";
}

TEST(AgentJob, AMalformedRecordNamesTheField) {
  AgentJob job = job_for_node(sample_job(), {nodes(1)[0], {}}, "");
  const std::string good = encode_agent_job(job);
  auto without = [&](const std::string& field) {
    std::string text = good;
    auto at = text.find("\"" + field + "\":");
    EXPECT_NE(at, std::string::npos) << field;
    text.replace(at, 1, "\"x_");  // The key is another one now: the field is missing.
    return text;
  };
  for (const char* field :
       {"endpoint", "port", "job_id", "nnodes", "cwd", "env", "args", "token", "nproc"}) {
    EXPECT_EQ(error_of(without(field)), fmt::format("field {}: missing", field));
  }
  // Without node_rank it is the record of every node: then the list is what is missing.
  EXPECT_EQ(error_of(without("node_rank")), "field nodes: missing");
  std::string text = good;
  text.replace(text.find("\"nnodes\":8"), 10, "\"nnodes\":\"8\"");
  EXPECT_EQ(error_of(text), "field nnodes: not an integer");
  text = good;
  text.replace(text.find("\"node_rank\":1"), 13, "\"node_rank\":9");
  EXPECT_EQ(error_of(text), "field node_rank: 9 is not a node of 8");
  EXPECT_EQ(error_of(R"({"endpoint":"h:1","port":1,"job_id":"j","nnodes":2,"cwd":"/",)"
                     R"("env":{"PATH":3},"args":[]})"),
            "field env.PATH: not a string");
  EXPECT_EQ(error_of(R"({"endpoint":"h:1","port":1,"job_id":"j","nnodes":2,"cwd":"/","env":{},)"
                     R"("args":[],"nodes":[{"host":"a","nproc":1},{"host":"b"}]})"),
            "field nodes[1].nproc: missing");
  EXPECT_EQ(error_of(R"({"endpoint":"h:1","port":1,"job_id":"j","nnodes":2,"cwd":"/","env":{},)"
                     R"("args":[],"token":"t","node_rank":0,"nproc":1,)"
                     R"("children":[{"host":"x","nproc":1}]})"),
            "field children[0].node_rank: missing");
  EXPECT_EQ(error_of("[1,2]"), "the record: not an object");
  EXPECT_EQ(error_of("{\"endpoint\":").rfind("not JSON: ", 0), 0u);
}

}  // namespace
}  // namespace mlrun::transport
