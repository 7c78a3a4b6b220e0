// The head's launch logic (launcher/launch_hosts.h) through a fake transport whose agents are
// threads of this process (launcher/fake_transport.h says how they take part in the job): the
// head's real rendezvous server, its watch or its own node, its loss reports, its signals and
// its exit codes, without SSH or root.
#include "launcher/launch_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "launcher/fake_transport.h"
#include "transport/local.h"

namespace mlrun {
namespace {

using fake::AgentEnd;
using fake::FakeTransport;
using namespace std::chrono_literals;

// Signals whose mask or action the head (HeadSignals, the node's loop) changes in this process.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};

// What launch_on_hosts owns and destroys: a view of the test's FakeTransport, which the test
// reads after the head has returned.
class Borrowed : public transport::Transport {
 public:
  explicit Borrowed(FakeTransport& t) : t_(t) {}
  std::string name() const override { return t_.name(); }
  std::string head_address() const override { return t_.head_address(); }
  void start(const transport::AgentJob& job, const std::vector<transport::AgentNode>& nodes,
             transport::LostCallback on_lost) override {
    t_.start(job, nodes, std::move(on_lost));
    if (after_start_) after_start_();
  }
  void finish(std::chrono::milliseconds bound) override { t_.finish(bound); }

  // Runs on the head's thread once its agents have started, before its own node's loop.
  std::function<void()> after_start_;

 private:
  FakeTransport& t_;
};

// No process is left in the group.
bool gone(pid_t pgid) {
  return pgid > 0 && kill(-pgid, 0) != 0 && errno == ESRCH;
}

// This process's threads that take SIGINT (do not block it), by name; this one too unless told.
std::vector<std::string> threads_taking_sigint(bool but_this_one = false) {
  std::vector<std::string> found;
  std::string self = std::to_string(gettid());
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    if (but_this_one && task.path().filename() == self) continue;
    std::ifstream status(task.path() / "status");
    std::string line, name;
    while (std::getline(status, line)) {
      if (line.rfind("Name:", 0) == 0) name = line.substr(6);
      if (line.rfind("SigBlk:", 0) != 0) continue;
      unsigned long long blocked = std::stoull(line.substr(7), nullptr, 16);
      if ((blocked & (1ULL << (SIGINT - 1))) == 0) {
        found.push_back(name + " (" + task.path().filename().string() + ")");
      }
    }
  }
  return found;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

class HeadLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pthread_sigmask(SIG_SETMASK, nullptr, &saved_mask_);
    for (int sig : kSignals) sigaction(sig, nullptr, &saved_actions_[sig]);
    // Teardown by process groups, root or not: the job's cgroup is not what these tests are about.
    if (const char* v = std::getenv("MLRUN_CGROUP")) saved_cgroup_ = v;
    setenv("MLRUN_CGROUP", "off", 1);
    char tmpl[] = "/tmp/mlrun-head-launch-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
    for (int sig : kSignals) sigaction(sig, &saved_actions_[sig], nullptr);
    if (saved_cgroup_) {
      setenv("MLRUN_CGROUP", saved_cgroup_->c_str(), 1);
    } else {
      unsetenv("MLRUN_CGROUP");
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // The options and plan of `mlrun ARGS...` as the launcher makes them (launcher/run.cc).
  void plan(std::vector<std::string> args) {
    ParseResult parsed = parse_options(args);
    o_ = parsed.options;
    std::vector<std::string> errors;
    for (auto& e : parsed.errors) errors.push_back(e.message);
    if (o_.launcher == "sim") {
      for (auto& e : transport::choose_sim_launcher(o_)) errors.push_back(e);
    }
    ASSERT_TRUE(plan_launch(o_, plan_, errors));
  }

  // The head, with fake_ as its transport; its exit code.
  int run_head() {
    return launch_on_hosts(o_, plan_, lifeline_,
                           [this](const Options&, const std::vector<transport::AgentNode>& nodes,
                                  std::chrono::milliseconds*) {
                             opened_ = nodes;
                             auto t = std::make_unique<Borrowed>(*fake_);
                             t->after_start_ = after_start_;
                             return t;
                           });
  }

  // Every fake agent ended, its worker too, and the head finished the transport once.
  void expect_nothing_left() {
    EXPECT_EQ(fake_->finish_calls(), 1);
    EXPECT_EQ(fake_->running(), 0);
    for (const auto& a : fake_->agents()) {
      EXPECT_TRUE(a.worker_pgid < 0 || gone(a.worker_pgid))
          << "node " << a.node_rank << "'s worker group " << a.worker_pgid << " is still there";
    }
  }

  std::unique_ptr<FakeTransport> fake_ = std::make_unique<FakeTransport>();
  Options o_;
  LaunchPlan plan_;
  Lifeline lifeline_;  // Inactive: the test process is no launcher to clean up after.
  std::vector<transport::AgentNode> opened_;
  std::function<void()> after_start_;  // Borrowed::after_start_
  std::filesystem::path dir_;

 private:
  sigset_t saved_mask_;
  std::map<int, struct sigaction> saved_actions_;
  std::optional<std::string> saved_cgroup_;
};

const std::vector<std::string> kSleep = {"/bin/sh", "-c", "exec sleep 30"};

TEST_F(HeadLaunchTest, ThreeNodesSucceed) {
  plan({"--launcher", "sim", "-H", "fake-a,fake-b,fake-c", "/bin/true"});
  EXPECT_EQ(run_head(), 0);
  // The transport got every node, and its agents the job: the head's rendezvous, a fresh
  // token, the job's id and size.
  ASSERT_EQ(opened_.size(), 3u);
  auto nodes = fake_->nodes();
  ASSERT_EQ(nodes.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(nodes[i].node_rank, i);
    EXPECT_EQ(nodes[i].host, std::string("fake-") + static_cast<char>('a' + i));
  }
  auto job = fake_->job();
  EXPECT_EQ(job.endpoint.rfind("127.0.0.1:", 0), 0u) << job.endpoint;
  EXPECT_EQ(job.token.size(), 32u);
  EXPECT_EQ(job.job_id, plan_.job_id);
  EXPECT_EQ(job.nnodes, 3);
  for (const auto& a : fake_->agents()) {
    EXPECT_EQ(a.end, AgentEnd::kSucceeded) << a.node_rank << ": " << a.detail;
    EXPECT_EQ(a.code, 0);
  }
  // Every agent's grace period and 10 s (launcher/run.cc).
  EXPECT_EQ(fake_->finish_bound(), 15s);
  expect_nothing_left();
}

TEST_F(HeadLaunchTest, AFailedWorkerStopsTheOthersWithItsCode) {
  fake_ = std::make_unique<FakeTransport>(fake::Workers{{"fake-b", {"/bin/sh", "-c", "exit 3"}}},
                                          kSleep);
  plan({"--launcher", "sim", "-H", "fake-a,fake-b,fake-c", "/bin/true"});
  ::testing::internal::CaptureStderr();
  auto began = std::chrono::steady_clock::now();
  int code = run_head();
  auto took = std::chrono::steady_clock::now() - began;
  std::string err = ::testing::internal::GetCapturedStderr();
  // The first failed worker's code, as the CLI exits (docs/design.md, failure semantics).
  EXPECT_EQ(code, 3);
  EXPECT_NE(err.find("First failure: rank 1 (local rank 0, node 1 (fake-b)"), std::string::npos)
      << err;
  auto agents = fake_->agents();
  ASSERT_EQ(agents.size(), 3u);
  EXPECT_EQ(agents[1].end, AgentEnd::kFailedHere) << agents[1].detail;
  for (int i : {0, 2}) {
    EXPECT_EQ(agents[i].end, AgentEnd::kStoppedByFailure) << i << ": " << agents[i].detail;
    EXPECT_EQ(agents[i].code, 3);
  }
  // Stopped, not run out: their workers sleep 30 s.
  EXPECT_LT(took, 20s);
  expect_nothing_left();
}

TEST_F(HeadLaunchTest, ALostNodeAbortsTheJobNamingItsHost) {
  fake_ = std::make_unique<FakeTransport>(fake::Workers{}, kSleep);
  plan({"--launcher", "sim", "-H", "fake-a,fake-b,fake-c", "/bin/true"});
  std::thread loser([this] {
    if (fake_->wait_joined(20s)) fake_->lose(1, "its connection closed (test)");
  });
  ::testing::internal::CaptureStderr();
  int code = run_head();
  std::string err = ::testing::internal::GetCapturedStderr();
  loser.join();
  EXPECT_NE(code, 0);
  EXPECT_NE(err.find("job aborted: node 1 (fake-b) lost: its connection closed (test)"),
            std::string::npos)
      << err;
  auto agents = fake_->agents();
  ASSERT_EQ(agents.size(), 3u);
  EXPECT_EQ(agents[1].end, AgentEnd::kLost);
  for (int i : {0, 2}) {
    EXPECT_EQ(agents[i].end, AgentEnd::kAborted) << i << ": " << agents[i].detail;
    EXPECT_NE(agents[i].detail.find("node 1 (fake-b) lost"), std::string::npos);
  }
  expect_nothing_left();
}

TEST_F(HeadLaunchTest, TheHeadRunsItsOwnNodeBesideTwoAgents) {
  // localhost is this host: node 0, two workers in the head's own process, no agent.
  std::string out = (dir_ / "rank.").string();
  plan({"--launcher", "ssh", "-H", "localhost:2,fake-b,fake-c", "/bin/sh", "-c",
        "echo \"$GROUP_RANK $WORLD_SIZE\" >" + out + "$RANK"});
  EXPECT_EQ(run_head(), 0);
  auto nodes = fake_->nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].node_rank, 1);
  EXPECT_EQ(nodes[0].host, "fake-b");
  EXPECT_EQ(nodes[1].node_rank, 2);
  EXPECT_EQ(nodes[1].host, "fake-c");
  // The head's workers ran as ranks 0 and 1 of node 0, in a world of 2 + 1 + 1.
  EXPECT_EQ(read_file(out + "0"), "0 4");
  EXPECT_EQ(read_file(out + "1"), "0 4");
  for (const auto& a : fake_->agents()) {
    EXPECT_EQ(a.end, AgentEnd::kSucceeded) << a.node_rank << ": " << a.detail;
  }
  expect_nothing_left();
}

TEST_F(HeadLaunchTest, SigintOnTheHeadStopsEveryNode) {
  fake_ = std::make_unique<FakeTransport>(fake::Workers{}, kSleep);
  plan({"--launcher", "sim", "-H", "fake-a,fake-b,fake-c", "/bin/true"});
  // Blocked here before the sender starts, so that the signal, sent to the process, can only
  // reach the head's signal thread (HeadSignals blocks it in every other thread it starts).
  sigset_t sigint;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigint, nullptr);
  // A thread an earlier test of this process left running that takes SIGINT would end the
  // process with it. ctest runs each test in a process of its own, where there is none.
  if (auto threads = threads_taking_sigint(); !threads.empty()) {
    GTEST_SKIP() << "threads of earlier tests take SIGINT (" << threads.size()
                 << "): run this test in a process of its own";
  }
  std::thread sender([this] {
    if (fake_->wait_joined(20s)) kill(getpid(), SIGINT);
  });
  auto began = std::chrono::steady_clock::now();
  int code = run_head();
  auto took = std::chrono::steady_clock::now() - began;
  sender.join();
  EXPECT_EQ(code, 130);
  for (const auto& a : fake_->agents()) {
    EXPECT_EQ(a.end, AgentEnd::kAborted) << a.node_rank << ": " << a.detail;
    EXPECT_EQ(a.detail, "interrupted: SIGINT on the head");
    EXPECT_EQ(a.code, 130);
  }
  EXPECT_LT(took, 20s);
  expect_nothing_left();
}

// A head that runs workers itself has no loop of its own until its node's starts, after the
// agents have. A Ctrl-C in between ended it by SIGINT's default action: no abort, no word, its
// agents left to find their connections gone. Now its signal thread takes it and aborts the job;
// its own node finds the abort at its join and starts no worker.
TEST_F(HeadLaunchTest, SigintBeforeTheHeadsOwnNodeStartsStopsEveryNode) {
  fake_ = std::make_unique<FakeTransport>(fake::Workers{}, kSleep);
  std::string out = (dir_ / "rank.").string();
  plan({"--launcher", "ssh", "-H", "localhost:2,fake-b,fake-c", "/bin/sh", "-c",
        "echo ran >" + out + "$RANK; exec sleep 30"});
  if (auto threads = threads_taking_sigint(true); !threads.empty()) {
    GTEST_SKIP() << "threads of earlier tests take SIGINT (" << threads.size()
                 << "): run this test in a process of its own";
  }
  // On the head's thread, which blocks it now: only the head's signal thread can take it.
  after_start_ = [] { kill(getpid(), SIGINT); };
  ::testing::internal::CaptureStderr();
  auto began = std::chrono::steady_clock::now();
  int code = run_head();
  auto took = std::chrono::steady_clock::now() - began;
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 130);
  EXPECT_NE(err.find("job aborted: interrupted: SIGINT on the head"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(out + "0")) << "the head's node started its workers";
  EXPECT_FALSE(std::filesystem::exists(out + "1"));
  for (const auto& a : fake_->agents()) {
    EXPECT_EQ(a.end, AgentEnd::kAborted) << a.node_rank << ": " << a.detail;
    EXPECT_EQ(a.detail, "interrupted: SIGINT on the head");
  }
  EXPECT_LT(took, 20s);
  expect_nothing_left();
}

// The head's own node can fail before it joins (here its log directory cannot be made). The
// others waited for its join until the join's timeout (minutes; 20 s for the fake agents); its
// error now aborts the job for them.
TEST_F(HeadLaunchTest, AHeadWhoseOwnNodeCannotStartAbortsTheJob) {
  fake_ = std::make_unique<FakeTransport>(fake::Workers{}, kSleep);
  plan({"--launcher", "ssh", "--log_dir", "/proc/nonexistent/logs", "-H",
        "localhost:1,fake-b,fake-c", "/bin/true"});
  ::testing::internal::CaptureStderr();
  auto began = std::chrono::steady_clock::now();
  int code = run_head();
  auto took = std::chrono::steady_clock::now() - began;
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("--log_dir /proc/nonexistent/logs: cannot create it"), std::string::npos)
      << err;
  for (const auto& a : fake_->agents()) {
    EXPECT_EQ(a.end, AgentEnd::kAborted) << a.node_rank << ": " << a.detail;
    EXPECT_EQ(a.detail.rfind("node 0 (", 0), 0u) << a.detail;
    EXPECT_NE(a.detail.find(") cannot start: --log_dir /proc/nonexistent/logs: cannot create it"),
              std::string::npos)
        << a.detail;
  }
  EXPECT_LT(took, 10s);
  expect_nothing_left();
}

TEST_F(HeadLaunchTest, NoTransportStartsNothing) {
  plan({"--launcher", "sim", "-H", "fake-a,fake-b", "/bin/true"});
  int calls = 0;
  int code =
      launch_on_hosts(o_, plan_, lifeline_,
                      [&](const Options&, const std::vector<transport::AgentNode>& nodes,
                          std::chrono::milliseconds*) -> std::unique_ptr<transport::Transport> {
                        ++calls;
                        EXPECT_EQ(nodes.size(), 2u);
                        return nullptr;  // Its errors would be printed by the transport's maker.
                      });
  EXPECT_EQ(code, 1);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(fake_->started());
}

}  // namespace
}  // namespace mlrun
