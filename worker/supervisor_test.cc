// The supervisor's scheduling, teardown and restart logic against a fake spawner and fake
// timers: no process is forked here.
#include "worker/supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

int exited(int code) {
  return code << 8;
}
int killed(int sig) {
  return sig;
}

struct FakeSpawner : ProcessSpawner {
  pid_t next_pid = 100;
  std::vector<std::pair<pid_t, int>> signals;
  std::vector<SpawnRequest> spawned;
  int fail_at = -1;  // Index of the spawn that throws.
  SpawnedProcess spawn(const SpawnRequest& r) override {
    if (static_cast<int>(spawned.size()) == fail_at) {
      spawned.push_back(r);
      throw SpawnError("boom: no such program");
    }
    spawned.push_back(r);
    return {next_pid++, -1, -1};
  }
  void signal_group(pid_t pgid, int sig) override { signals.emplace_back(pgid, sig); }
  std::vector<std::pair<pid_t, int>> process_signals;
  void signal_process(pid_t pid, int sig) override { process_signals.emplace_back(pid, sig); }
  // How many processes had been spawned at each sweep.
  std::vector<std::size_t> sweeps;
  void sweep() override { sweeps.push_back(spawned.size()); }
  int count(int sig) const {
    int n = 0;
    for (auto& [p, s] : signals) n += s == sig;
    return n;
  }
};

struct FakeHooks : SupervisorHooks {
  std::vector<std::chrono::milliseconds> armed;
  int cancelled = 0;
  std::vector<AttemptResult> ends;
  std::vector<bool> restarts;
  std::vector<int> first_failures;
  void on_spawned(const WorkerState&, const SpawnedProcess&) override {}
  void on_first_failure(const WorkerState& w) override { first_failures.push_back(w.spec.rank); }
  void on_attempt_end(const AttemptResult& r, bool restarting) override {
    ends.push_back(r);
    restarts.push_back(restarting);
  }
  void arm_timer(std::chrono::milliseconds d) override { armed.push_back(d); }
  void cancel_timer() override { ++cancelled; }
  WallTime clock{};
  WallTime now() override { return clock; }
};

struct SupervisorTest : ::testing::Test {
  FakeSpawner spawner;
  FakeHooks hooks;
  std::vector<int> attempts_planned;
  std::unique_ptr<Supervisor> make(int workers, int max_restarts = 0) {
    auto planner = [this, workers](int attempt) {
      attempts_planned.push_back(attempt);
      std::vector<WorkerSpec> specs;
      for (int i = 0; i < workers; ++i) {
        specs.push_back({i, i, SpawnRequest{{"/bin/true", std::to_string(attempt)}, {}, {}}});
      }
      return specs;
    };
    return std::make_unique<Supervisor>(spawner, hooks, planner,
                                        SupervisorConfig{max_restarts, std::chrono::seconds(5)});
  }
};

TEST_F(SupervisorTest, AllSucceedMeansExitZero) {
  auto s = make(3);
  s->start();
  EXPECT_EQ(spawner.spawned.size(), 3u);
  s->on_exit(100, exited(0));
  s->on_exit(101, exited(0));
  EXPECT_FALSE(s->finished());
  s->on_exit(102, exited(0));
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 0);
  EXPECT_EQ(spawner.count(SIGTERM), 0);
}

TEST_F(SupervisorTest, FirstFailureStopsTheOthersAndSetsTheExitCode) {
  auto s = make(3);
  s->start();
  s->on_exit(101, exited(3));
  EXPECT_EQ(hooks.first_failures, std::vector<int>{1});
  // SIGTERM to the two live groups, then a grace timer.
  EXPECT_EQ(spawner.signals, (std::vector<std::pair<pid_t, int>>{{100, SIGTERM}, {102, SIGTERM}}));
  ASSERT_EQ(hooks.armed.size(), 1u);
  s->on_exit(100, killed(SIGTERM));
  s->on_exit(102, exited(1));  // Exits non-zero after being told to stop: stopped, not failed.
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 3);
  const AttemptResult& r = hooks.ends.at(0);
  EXPECT_EQ(r.first_failure, 1u);
  EXPECT_EQ(r.workers[0].end, WorkerEnd::kStopped);
  EXPECT_EQ(r.workers[2].end, WorkerEnd::kStopped);
  EXPECT_GE(hooks.cancelled, 1);
}

TEST_F(SupervisorTest, GraceExpiryKillsWhatIsLeft) {
  auto s = make(2);
  s->start();
  s->on_exit(100, killed(SIGSEGV));
  s->on_grace_expired();
  EXPECT_EQ(spawner.signals.back(), (std::pair<pid_t, int>{101, SIGKILL}));
  s->on_exit(101, killed(SIGKILL));
  EXPECT_EQ(s->exit_code(), 128 + SIGSEGV);
}

TEST_F(SupervisorTest, LaterStopsDoNotExtendTheGracePeriod) {
  auto s = make(2);
  s->start();
  s->on_signal(SIGTERM);  // the launcher is told to stop...
  s->abort(1);            // ...and an abort arrives from the rendezvous meanwhile
  s->on_remote_failure(3);
  EXPECT_EQ(spawner.count(SIGTERM), 4);  // both stops reached both groups
  EXPECT_EQ(hooks.armed.size(), 1u);     // one grace period, from the first
  s->on_grace_expired();
  EXPECT_EQ(spawner.count(SIGKILL), 2);
  EXPECT_EQ(hooks.armed.size(), 1u);
}

TEST_F(SupervisorTest, EndedGroupsAreSweptWithSigkill) {
  auto s = make(2);
  s->start();
  s->on_exit(100, exited(0));
  s->on_exit(101, exited(0));
  // Children a worker left in its group go with the group.
  EXPECT_EQ(spawner.count(SIGKILL), 2);
}

// What escaped the groups (daemons in the job's cgroup) is swept once per attempt, after its
// last worker ended and before the next attempt's first spawn.
TEST_F(SupervisorTest, EveryAttemptIsSweptBeforeTheNextStarts) {
  auto s = make(2, 1);
  s->start();
  s->on_exit(100, exited(1));
  EXPECT_TRUE(spawner.sweeps.empty());  // Rank 1 still runs.
  s->on_exit(101, killed(SIGTERM));
  EXPECT_EQ(spawner.sweeps, std::vector<std::size_t>{2});
  EXPECT_EQ(spawner.spawned.size(), 4u);  // Attempt 1 started after the sweep.
  s->on_exit(102, exited(0));
  s->on_exit(103, exited(0));
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(spawner.sweeps, (std::vector<std::size_t>{2, 4}));
}

TEST_F(SupervisorTest, SignalIsForwardedAndSecondSigintKills) {
  auto s = make(2);
  s->start();
  s->on_signal(SIGINT);
  EXPECT_EQ(spawner.count(SIGINT), 2);
  // The same Ctrl-C again an instant later (a wrapper passing it on) is not a second one.
  hooks.clock += std::chrono::milliseconds(1);
  s->on_signal(SIGINT);
  EXPECT_EQ(spawner.count(SIGKILL), 0);
  hooks.clock += kRepeatedSignal;
  s->on_signal(SIGINT);
  EXPECT_EQ(spawner.count(SIGKILL), 2);
  s->on_exit(100, killed(SIGKILL));
  s->on_exit(101, killed(SIGKILL));
  EXPECT_EQ(s->exit_code(), 130);
  EXPECT_FALSE(hooks.ends.at(0).first_failure.has_value());
}

TEST_F(SupervisorTest, ForwardedSignalReachesEachRunningWorkerAndTheJobGoesOn) {
  auto s = make(3);
  s->start();
  s->on_exit(101, exited(0));
  EXPECT_EQ(s->forward_signal(SIGUSR1), 2);  // the worker that ended is not signalled
  EXPECT_EQ(s->forward_signal(SIGUSR1), 2);  // once per delivery
  EXPECT_EQ(spawner.process_signals,
            (std::vector<std::pair<pid_t, int>>{
                {100, SIGUSR1}, {102, SIGUSR1}, {100, SIGUSR1}, {102, SIGUSR1}}));
  EXPECT_TRUE(spawner.signals.empty());  // no group, no teardown
  EXPECT_TRUE(hooks.armed.empty());
  s->on_exit(100, exited(0));
  s->on_exit(102, exited(0));
  EXPECT_EQ(s->exit_code(), 0);
}

TEST_F(SupervisorTest, WorkerKilledByAForwardedSignalHasFailed) {
  auto s = make(2);
  s->start();
  s->forward_signal(SIGUSR2);
  s->on_exit(100, killed(SIGUSR2));  // no handler: its default action ended it
  EXPECT_EQ(hooks.first_failures, std::vector<int>{0});
  s->on_exit(101, killed(SIGTERM));
  EXPECT_EQ(s->exit_code(), 128 + SIGUSR2);
}

TEST_F(SupervisorTest, SigtermToTheLauncherExitsWith143AndNeverRestarts) {
  auto s = make(1, 5);
  s->start();
  s->on_signal(SIGTERM);
  s->on_exit(100, killed(SIGTERM));
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 143);
  EXPECT_EQ(attempts_planned, std::vector<int>{0});
}

TEST_F(SupervisorTest, RestartsUntilAnAttemptSucceeds) {
  auto s = make(2, 3);
  s->start();
  s->on_exit(100, exited(1));
  s->on_exit(101, killed(SIGTERM));
  EXPECT_EQ(hooks.restarts, std::vector<bool>{true});
  EXPECT_EQ(s->attempt(), 1);
  EXPECT_FALSE(s->finished());
  s->on_exit(102, exited(0));
  s->on_exit(103, exited(0));
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 0);
  EXPECT_EQ(attempts_planned, (std::vector<int>{0, 1}));
  EXPECT_EQ(spawner.spawned[2].argv[1], "1");  // The planner was asked for attempt 1.
}

TEST_F(SupervisorTest, RestartsRunOut) {
  auto s = make(1, 2);
  s->start();
  s->on_exit(100, exited(4));
  s->on_exit(101, exited(5));
  s->on_exit(102, exited(6));
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 6);
  EXPECT_EQ(hooks.restarts, (std::vector<bool>{true, true, false}));
}

TEST_F(SupervisorTest, SpawnFailureIsTheFirstFailure) {
  spawner.fail_at = 1;
  auto s = make(3);
  s->start();
  // Worker 0 started and is being stopped; worker 2 was never started.
  EXPECT_EQ(spawner.spawned.size(), 2u);
  EXPECT_EQ(spawner.signals.front(), (std::pair<pid_t, int>{100, SIGTERM}));
  s->on_exit(100, killed(SIGTERM));
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 127);
  EXPECT_EQ(hooks.ends[0].workers[1].spawn_error, "boom: no such program");
}

TEST_F(SupervisorTest, UnknownPidsAreIgnored) {
  auto s = make(1);
  s->start();
  s->on_exit(999, exited(1));
  EXPECT_FALSE(s->finished());
}

TEST_F(SupervisorTest, RemoteFailureStopsThisNodeAndRestartsWithTheOthers) {
  auto s = make(2, 1);
  s->start();
  s->on_remote_failure(7);
  EXPECT_EQ(spawner.count(SIGTERM), 2);
  s->on_exit(100, killed(SIGTERM));
  s->on_exit(101, exited(1));
  EXPECT_EQ(hooks.restarts, std::vector<bool>{true});
  EXPECT_TRUE(hooks.ends[0].remote_failure);
  EXPECT_FALSE(hooks.ends[0].first_failure.has_value());
  s->on_remote_failure(7);
  s->on_exit(102, killed(SIGTERM));
  s->on_exit(103, killed(SIGTERM));
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 7);
}

TEST_F(SupervisorTest, PlannerErrorEndsTheJobWithoutStartingAnything) {
  Supervisor s(
      spawner, hooks,
      [](int) -> std::vector<WorkerSpec> {
        throw std::runtime_error("rendezvous: timed out waiting for node 2");
      },
      SupervisorConfig{3, std::chrono::seconds(1)});
  s.start();
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 1);
  EXPECT_TRUE(spawner.spawned.empty());
  EXPECT_EQ(hooks.ends.at(0).plan_error, "rendezvous: timed out waiting for node 2");
  EXPECT_EQ(hooks.restarts, std::vector<bool>{false});
}

TEST(DescribeStatus, NamesCodesAndSignals) {
  EXPECT_EQ(describe_status(exited(3)), "exit code 3");
  EXPECT_EQ(describe_status(killed(SIGKILL)), "signal SIGKILL (9)");
  EXPECT_EQ(exit_code_from_status(killed(SIGSEGV)), 139);
}

}  // namespace
}  // namespace mlrun

namespace mlrun {
namespace {

// Multi-node: attempts begin when the coordinator says so and end with its verdict.
struct SettledElsewhereTest : SupervisorTest {
  std::unique_ptr<Supervisor> make_multi(int max_restarts) {
    return std::make_unique<Supervisor>(
        spawner, hooks, nullptr,
        SupervisorConfig{max_restarts, std::chrono::seconds(5), /*settled_elsewhere=*/true});
  }
  std::vector<WorkerSpec> specs(int n) {
    std::vector<WorkerSpec> out;
    for (int i = 0; i < n; ++i) out.push_back({10 + i, i, SpawnRequest{{"/bin/true"}, {}, {}}});
    return out;
  }
};

TEST_F(SettledElsewhereTest, LocalSuccessButAFailureElsewhereRestarts) {
  auto s = make_multi(1);
  s->begin_attempt(0, specs(2));
  s->on_exit(100, exited(0));
  s->on_exit(101, exited(0));
  EXPECT_FALSE(s->finished());  // Waiting for the job-wide verdict.
  s->settle(true, 5);
  EXPECT_EQ(hooks.restarts, std::vector<bool>{true});
  EXPECT_EQ(s->attempt(), 1);
  EXPECT_EQ(spawner.spawned.size(), 2u);  // Nothing starts before begin_attempt.
  s->begin_attempt(1, specs(2));
  s->on_exit(102, exited(0));
  s->on_exit(103, exited(0));
  s->settle(false, 0);
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 0);
}

TEST_F(SettledElsewhereTest, VerdictWithoutRestartsLeftGivesTheJobsCode) {
  auto s = make_multi(0);
  s->begin_attempt(0, specs(1));
  s->on_remote_failure(9);
  s->on_exit(100, killed(SIGTERM));
  s->settle(true, 9);
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 9);
}

TEST_F(SettledElsewhereTest, AbortStopsWorkersAndFinishesWithItsCode) {
  auto s = make_multi(3);
  s->begin_attempt(0, specs(2));
  s->abort(130);
  EXPECT_EQ(spawner.count(SIGTERM), 2);
  s->on_exit(100, killed(SIGTERM));
  s->on_exit(101, killed(SIGTERM));
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 130);
  EXPECT_EQ(hooks.restarts, std::vector<bool>{false});
}

TEST_F(SettledElsewhereTest, AbortWhileWaitingFinishesAtOnce) {
  auto s = make_multi(3);
  s->abort(1);
  EXPECT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 1);
}

// A stop signal between attempts (it came as this node's join returned) starts none of the
// next attempt's workers: they would run on, never signalled.
TEST_F(SettledElsewhereTest, AStopSignalBeforeTheAttemptBeginsStartsNoWorker) {
  auto s = make_multi(3);
  s->on_signal(SIGTERM);
  EXPECT_FALSE(s->finished());  // The coordinator may still be joining.
  s->begin_attempt(0, specs(2));
  EXPECT_TRUE(spawner.spawned.empty());
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->exit_code(), 128 + SIGTERM);
  EXPECT_EQ(hooks.restarts, std::vector<bool>{false});
}

TEST_F(SettledElsewhereTest, SweptBeforeTheResultIsReported) {
  auto s = make_multi(0);
  s->begin_attempt(0, specs(1));
  s->on_exit(100, exited(0));
  EXPECT_EQ(spawner.sweeps, std::vector<std::size_t>{1});
}

}  // namespace
}  // namespace mlrun
