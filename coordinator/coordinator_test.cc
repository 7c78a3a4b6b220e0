// NodeCoordinator (coordinator/coordinator.h) with N nodes as threads against an in-process
// rendezvous server, each with a fake spawner: no process is started; a fake worker ends when
// its script says so or when a signal reaches it.
#include "coordinator/coordinator.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "coordinator/keys.h"

namespace mlrun::coordinator {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "coordinator-test-token";
constexpr const char* kJobId = "coordinator-test";

// What a fake worker does: end at once with a code, or run until a signal reaches it.
struct Behaviour {
  bool runs = false;
  int code = 0;
};
Behaviour exits(int code) {
  return {false, code};
}
Behaviour runs_until_signalled() {
  return {true, 0};
}
// A worker's group is swept with SIGKILL once it ended (worker/supervisor.h): the stop is the
// first signal it got.
// By attempt (TORCHELASTIC_RESTART_COUNT, or the elastic round) and global rank.
using Script = std::function<Behaviour(int attempt, int rank)>;

std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& e : env) {
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  }
  return "";
}

// A spawner without processes: spawn hands out a fake pid and two pipes; an exit is reported to
// the node's supervisor through NodeCoordinator::post, as the Agent reports a real one.
class FakeSpawner final : public ProcessSpawner {
 public:
  struct Spawned {
    int attempt, rank, world_size;
    pid_t pid;
    std::vector<int> signals;  // Signals that reached it.
    bool running;
  };

  explicit FakeSpawner(Script script) : script_(std::move(script)) {}
  ~FakeSpawner() override {
    for (auto& [pid, fds] : write_ends_) close_pipes(pid);
  }
  void attach(NodeCoordinator* node) { node_ = node; }

  SpawnedProcess spawn(const SpawnRequest& request) override {
    std::string round = env_value(request.env, "MLRUN_RDZV_ROUND");
    int attempt =
        std::stoi(round.empty() ? env_value(request.env, "TORCHELASTIC_RESTART_COUNT") : round);
    int rank = std::stoi(env_value(request.env, "RANK"));
    int world = std::stoi(env_value(request.env, "WORLD_SIZE"));
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw SpawnError("pipe2 failed");
    }
    Behaviour b = script_(attempt, rank);
    std::lock_guard lock(mu_);
    pid_t pid = next_pid_++;
    write_ends_[pid] = {out[1], err[1]};
    spawned_.push_back({attempt, rank, world, pid, {}, true});
    if (!b.runs) end(pid, b.code << 8);
    changed_.notify_all();
    return {pid, out[0], err[0]};
  }
  void signal_group(pid_t pgid, int sig) override { signal_process(pgid, sig); }
  void signal_process(pid_t pid, int sig) override {
    std::lock_guard lock(mu_);
    for (auto& s : spawned_) {
      if (s.pid != pid) continue;
      s.signals.push_back(sig);
      if (s.running) end(pid, sig);  // Any signal ends a fake worker, as by its default action.
    }
    changed_.notify_all();
  }

  std::vector<Spawned> spawned() {
    std::lock_guard lock(mu_);
    return spawned_;
  }
  // Waits (bounded) until n fake workers run at once.
  bool wait_running(std::size_t n, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, limit, [&] {
      std::size_t running = 0;
      for (const auto& s : spawned_) running += s.running;
      return running == n;
    });
  }

 private:
  // Called with mu_ held: the worker's pipes close and its exit reaches the supervisor.
  void end(pid_t pid, int wait_status) {
    for (auto& s : spawned_) {
      if (s.pid == pid) s.running = false;
    }
    close_pipes(pid);
    node_->post([pid, wait_status](Supervisor& s) { s.on_exit(pid, wait_status); });
  }
  void close_pipes(pid_t pid) {
    auto& fds = write_ends_[pid];
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

  Script script_;
  NodeCoordinator* node_ = nullptr;
  std::mutex mu_;
  std::condition_variable changed_;
  pid_t next_pid_ = 4000000;
  std::map<pid_t, std::array<int, 2>> write_ends_;
  std::vector<Spawned> spawned_;
};

// A connector that counts its connections (and so proves every one goes through it).
class CountingConnector final : public RendezvousConnector {
 public:
  explicit CountingConnector(std::string endpoint) : endpoint_(std::move(endpoint)) {}
  rdzv::Client connect(const rdzv::ClientOptions& options) override {
    ++connections;
    return rdzv::Client::connect(endpoint_, kToken, options);
  }
  std::atomic<int> connections{0};

 private:
  std::string endpoint_;
};

// One node: its job, fake spawner and coordinator, run on a thread of its own.
struct TestNode {
  NodeJob job;
  NodeHooks hooks;
  FakeSpawner spawner;
  CountingConnector rendezvous;
  Lifeline lifeline;  // Inactive: there is nothing to sweep.
  std::atomic<NodeCoordinator*> coordinator{nullptr};
  NodeOutcome outcome;
  std::string error;  // What the coordinator threw, if it did.
  std::thread thread;

  TestNode(const NodeJob& j, Script script, const std::string& endpoint)
      : job(j), spawner(std::move(script)), rendezvous(endpoint) {
    hooks.routes = [](int, const WorkerSpec&) { return WorkerRoutes{}; };
    hooks.error_file = [](int, int) { return std::string(); };
    thread = std::thread([this] {
      try {
        NodeCoordinator node(job, hooks, spawner, rendezvous, lifeline);
        spawner.attach(&node);
        // A coordinator thread that never wakes is a failure here, whatever the node's code.
        node.on_stuck_coordinator([this](int code) {
          fprintf(stderr, "%s: the coordinator thread is stuck (exit code %d)\n", job.host.c_str(),
                  code);
          std::abort();
        });
        coordinator = &node;
        outcome = node.run();
        coordinator = nullptr;
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
};

class NodeCoordinatorTest : public ::testing::Test {
 protected:
  NodeCoordinatorTest() {
    rdzv::ServerOptions options;
    options.token = kToken;
    options.job_id = kJobId;
    options.log = [](std::string_view) {};
    server_.emplace(rdzv::Server::start(std::move(options)));
  }

  NodeJob job(int node_rank, int nnodes, int nproc, int max_restarts = 0) {
    NodeJob j;
    j.endpoint = server_->endpoint();
    j.token = kToken;
    j.job_id = kJobId;
    j.nnodes = nnodes;
    j.node_rank = node_rank;
    j.nproc = nproc;
    j.master_addr = "127.0.0.1";
    j.master_port = 29500;
    j.argv = {"/bin/true"};
    j.max_restarts = max_restarts;
    j.grace = 2s;
    j.join_timeout = 10s;
    j.host = fmt::format("host{}", node_rank + 1);
    j.signals.stop.clear();  // Signals come through deliver_signal.
    j.signals.forward.clear();
    j.print_summary = false;
    return j;
  }

  void start(int nnodes, int nproc, int max_restarts, Script script) {
    for (int n = 0; n < nnodes; ++n) {
      nodes_.push_back(std::make_unique<TestNode>(job(n, nnodes, nproc, max_restarts), script,
                                                  server_->endpoint()));
    }
  }

  // Waits (bounded) for every node's end. A node that hangs fails the whole binary at once: a
  // thread cannot be unwound, and a test must not hang.
  void finish(std::chrono::seconds limit = 30s) {
    auto all = std::async(std::launch::async, [&] {
      for (auto& n : nodes_) n->thread.join();
    });
    if (all.wait_for(limit) != std::future_status::ready) {
      fprintf(stderr, "a node did not end within %ld s\n", static_cast<long>(limit.count()));
      std::abort();
    }
    for (auto& n : nodes_) EXPECT_EQ(n->error, "") << n->job.host;
  }

  // Starts one more node and waits (bounded) until its join has reached the server.
  TestNode& start_joining(const NodeJob& j, Script script) {
    nodes_.push_back(std::make_unique<TestNode>(j, std::move(script), server_->endpoint()));
    TestNode& node = *nodes_.back();
    for (int i = 0; i < 500 && node.coordinator.load() == nullptr; ++i)
      std::this_thread::sleep_for(10ms);
    if (node.coordinator.load() == nullptr) {
      fprintf(stderr, "%s did not start within 5 s\n", j.host.c_str());
      std::abort();
    }
    std::this_thread::sleep_for(300ms);
    return node;
  }

  // A member of an elastic job of 2 to 3 nodes, by hand: it heartbeats once and joins a round
  // of one worker a node; returns the round's node count.
  int join_by_hand(const char* member, std::chrono::milliseconds last_call) {
    rdzv::ClientOptions options;
    options.job_id = kJobId;
    auto beat = rdzv::Client::connect(server_->endpoint(), kToken, options);
    beat.heartbeat(kElasticGroup, member);
    auto c = rdzv::Client::connect(server_->endpoint(), kToken, options);
    rdzv::ElasticJoinOptions eo;
    eo.min_nodes = 2;
    eo.max_nodes = 3;
    eo.local_world_size = 1;
    eo.member = member;
    eo.last_call = last_call;
    eo.heartbeat_timeout = 5s;
    eo.timeout = 10s;
    return c.join_elastic(kElasticGroup, eo).node.nnodes;
  }

  std::optional<rdzv::Server> server_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
};

TEST_F(NodeCoordinatorTest, EveryNodeJoinsAndSucceeds) {
  // A restart is there to spend: a verdict that got success wrong would start attempt 1.
  start(3, 2, 1, [](int, int) { return exits(0); });
  finish();
  std::set<int> ranks;
  for (auto& n : nodes_) {
    EXPECT_EQ(n->outcome.exit_code, 0) << n->job.host;
    EXPECT_FALSE(n->outcome.failure);
    auto spawned = n->spawner.spawned();
    ASSERT_EQ(spawned.size(), 2u);
    for (const auto& s : spawned) {
      EXPECT_EQ(s.attempt, 0);
      EXPECT_EQ(s.world_size, 6);
      ranks.insert(s.rank);
    }
    // Every connection went through the connector: control, heartbeats, the attempt's join.
    EXPECT_EQ(n->rendezvous.connections, 3) << n->job.host;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5}));
}

TEST_F(NodeCoordinatorTest, AFailureRestartsEveryNodeWhileRestartsRemain) {
  // Attempt 0: rank 3 (node 1) fails; everyone else runs until stopped. Attempt 1 succeeds.
  start(3, 2, 1, [](int attempt, int rank) {
    if (attempt > 0) return exits(0);
    return rank == 3 ? exits(5) : runs_until_signalled();
  });
  finish();
  for (auto& n : nodes_) {
    EXPECT_EQ(n->outcome.exit_code, 0) << n->job.host;
    auto spawned = n->spawner.spawned();
    ASSERT_EQ(spawned.size(), 4u) << n->job.host;  // Two workers in each of two attempts.
    for (const auto& s : spawned) {
      if (s.attempt == 0 && s.rank != 3) {
        ASSERT_FALSE(s.signals.empty()) << "rank " << s.rank << " was not stopped";
        EXPECT_EQ(s.signals[0], SIGTERM) << "rank " << s.rank;
      }
    }
    EXPECT_EQ(spawned[2].attempt, 1);
    EXPECT_EQ(spawned[3].attempt, 1);
  }
}

TEST_F(NodeCoordinatorTest, AFailureOnOneNodeStopsTheOthersAndNamesIt) {
  start(3, 2, 0, [](int, int rank) { return rank == 3 ? exits(7) : runs_until_signalled(); });
  finish();
  for (auto& n : nodes_) {
    EXPECT_EQ(n->outcome.exit_code, 7) << n->job.host;
    ASSERT_TRUE(n->outcome.failure) << n->job.host;
    EXPECT_EQ(n->outcome.failure->node, 1);
    EXPECT_EQ(n->outcome.failure->host, "host2");
    EXPECT_EQ(n->outcome.failure->rank, 3);
    EXPECT_EQ(n->outcome.failure->code, 7);
    EXPECT_EQ(n->outcome.failure->status, "exit code 7");
    for (const auto& s : n->spawner.spawned()) {
      if (s.rank != 3) {
        ASSERT_FALSE(s.signals.empty()) << "rank " << s.rank << " was not stopped";
        EXPECT_EQ(s.signals[0], SIGTERM) << "rank " << s.rank;
      }
    }
  }
}

TEST_F(NodeCoordinatorTest, AStopSignalOnOneNodeEndsEveryNode) {
  start(3, 2, 3, [](int, int) { return runs_until_signalled(); });
  for (auto& n : nodes_) ASSERT_TRUE(n->spawner.wait_running(2)) << n->job.host;
  nodes_[1]->coordinator.load()->deliver_signal(SIGINT);
  finish();
  for (auto& n : nodes_) {
    // 128 + SIGINT: no restart follows an interrupt, though restarts remain.
    EXPECT_EQ(n->outcome.exit_code, 130) << n->job.host;
    auto spawned = n->spawner.spawned();
    EXPECT_EQ(spawned.size(), 2u) << n->job.host;
    for (const auto& s : spawned) {
      ASSERT_FALSE(s.signals.empty()) << n->job.host << " rank " << s.rank;
      EXPECT_EQ(s.signals[0], n->job.node_rank == 1 ? SIGINT : SIGTERM);
    }
  }
  EXPECT_NE(nodes_[0]->outcome.abort_message.find("interrupted: SIGINT on node 1 (host2)"),
            std::string::npos)
      << nodes_[0]->outcome.abort_message;
}

// A stop signal that reaches a node as its join returns (queued on the loop before the attempt's
// start): that node starts none of its workers, and the others stop theirs.
TEST_F(NodeCoordinatorTest, AStopSignalAsTheJoinReturnsStartsNoWorkerThere) {
  Script script = [](int, int) { return runs_until_signalled(); };
  TestNode& node = start_joining(job(0, 2, 1, 3), script);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  node.coordinator.load()->post([released](Supervisor&) { released.wait(); });
  node.coordinator.load()->deliver_signal(SIGINT);
  nodes_.push_back(std::make_unique<TestNode>(job(1, 2, 1, 3), script, server_->endpoint()));
  EXPECT_TRUE(nodes_[1]->spawner.wait_running(1));
  std::this_thread::sleep_for(300ms);  // Node 0's join returns too, and its start is queued.
  release.set_value();
  finish();
  EXPECT_TRUE(node.spawner.spawned().empty());
  for (auto& n : nodes_) EXPECT_EQ(n->outcome.exit_code, 130) << n->job.host;
  EXPECT_NE(nodes_[1]->outcome.abort_message.find("interrupted: SIGINT on node 0 (host1)"),
            std::string::npos)
      << nodes_[1]->outcome.abort_message;
}

// An elastic job of 2 to 3 nodes: the third is lost while round 0 runs (its connections close,
// as when its machine dies); the two others stop their workers, fill in its result and go on
// in round 1 without it, spending no restart.
TEST_F(NodeCoordinatorTest, ALostNodeOfAnElasticJobStartsANewRoundWithoutIt) {
  Script script = [](int round, int) { return round == 0 ? runs_until_signalled() : exits(0); };
  for (int n = 0; n < 2; ++n) {
    NodeJob j = job(n, 3, 2);
    j.nnodes_min = 2;
    j.last_call = 300ms;
    j.heartbeat_interval = 100ms;
    j.heartbeat_timeout = 5s;
    nodes_.push_back(std::make_unique<TestNode>(j, script, server_->endpoint()));
  }
  // The third node, by hand: it heartbeats and joins as a node does, then its connections close.
  rdzv::ClientOptions options;
  options.job_id = kJobId;
  auto beat = rdzv::Client::connect(server_->endpoint(), kToken, options);
  auto joiner = rdzv::Client::connect(server_->endpoint(), kToken, options);
  beat.heartbeat(kElasticGroup, "host3#lost");
  rdzv::ElasticJoinOptions eo;
  eo.min_nodes = 2;
  eo.max_nodes = 3;
  eo.local_world_size = 2;
  eo.member = "host3#lost";
  eo.preferred_rank = 2;
  eo.last_call = 300ms;
  eo.heartbeat_timeout = 5s;
  eo.timeout = 10s;
  rdzv::ElasticAssignment lost = joiner.join_elastic(kElasticGroup, eo);
  EXPECT_EQ(lost.round, 0);
  EXPECT_EQ(lost.node.nnodes, 3);
  for (auto& n : nodes_) ASSERT_TRUE(n->spawner.wait_running(2)) << n->job.host;
  beat.close();
  joiner.close();
  finish();
  for (auto& n : nodes_) {
    EXPECT_EQ(n->outcome.exit_code, 0) << n->job.host;
    auto spawned = n->spawner.spawned();
    ASSERT_EQ(spawned.size(), 4u) << n->job.host;
    EXPECT_EQ(spawned[0].world_size, 6);  // Round 0: three nodes.
    EXPECT_EQ(spawned[2].attempt, 1);     // Round 1: two.
    EXPECT_EQ(spawned[2].world_size, 4);
    ASSERT_FALSE(spawned[0].signals.empty());
    EXPECT_EQ(spawned[0].signals[0], SIGTERM);
  }
}

// SIGTERM to an elastic node still waiting for its first round: it leaves that wait at once
// (not after join_timeout) with 128 + SIGTERM, starts nothing, and the server no longer counts it
// among the round's waiters.
TEST_F(NodeCoordinatorTest, AnElasticNodeSignalledBeforeItsFirstRoundLeavesAtOnce) {
  NodeJob j = job(0, 3, 1);
  j.nnodes_min = 2;
  j.last_call = 300ms;
  j.join_timeout = 20s;
  TestNode& node = start_joining(j, [](int, int) { return exits(0); });
  auto signalled = std::chrono::steady_clock::now();
  node.coordinator.load()->deliver_signal(SIGTERM);
  finish(15s);
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, 5s);
  EXPECT_EQ(node.outcome.exit_code, 128 + SIGTERM);
  EXPECT_TRUE(node.spawner.spawned().empty());
  // Two nodes by hand now make the round: it has two members, not three.
  auto join = [&](const char* member) {
    return std::async(std::launch::async, [&, member] { return join_by_hand(member, 300ms); });
  };
  auto a = join("hostA#1");
  auto b = join("hostB#2");
  EXPECT_EQ(a.get(), 2);
  EXPECT_EQ(b.get(), 2);
}

// SIGTERM that reaches an elastic node as its join returns (queued on the loop before the
// attempt's start): the node leaves and starts none of that round's workers.
TEST_F(NodeCoordinatorTest, AnElasticNodeSignalledAsItsRoundFormsStartsNoWorker) {
  NodeJob j = job(0, 3, 1);
  j.nnodes_min = 2;
  j.last_call = 100ms;
  j.heartbeat_timeout = 5s;
  TestNode& node = start_joining(j, [](int, int) { return exits(0); });
  // The loop is held while the signal queues and the round forms behind it.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  node.coordinator.load()->post([released](Supervisor&) { released.wait(); });
  node.coordinator.load()->deliver_signal(SIGTERM);
  EXPECT_EQ(join_by_hand("hostB#2", 100ms), 2);
  std::this_thread::sleep_for(300ms);  // The node's join returns too, and its start is queued.
  release.set_value();
  finish(15s);
  EXPECT_EQ(node.outcome.exit_code, 128 + SIGTERM);
  EXPECT_TRUE(node.spawner.spawned().empty());
}

}  // namespace
}  // namespace mlrun::coordinator
