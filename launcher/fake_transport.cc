#include "launcher/fake_transport.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <mlrun/rendezvous.hpp>
#include <nlohmann/json.hpp>

#include "coordinator/keys.h"
#include "launcher/summary.h"
#include "worker/net.h"
#include "worker/supervisor.h"

extern char** environ;

namespace mlrun::fake {
namespace {

namespace rdzv = mlrun::rendezvous;
using nlohmann::json;

// Every wait of a fake agent: far above what a test's job takes on a loaded machine.
constexpr std::chrono::seconds kBound{20};

// The keys of attempt g (coordinator/node.cc, docs/multinode.md). Fake agents run attempt 0.
std::string key(int g, std::string_view name) {
  return fmt::format("mlrun/{}/{}", g, name);
}

// clone3's arguments (linux/sched.h clashes with glibc's <sched.h>, as worker/process.cc says).
struct CloneArgs {
  std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};
constexpr std::uint64_t kClonePidfd = 0x00001000ULL;  // CLONE_PIDFD
constexpr int kPidfdId = 3;                           // P_PIDFD, missing from older glibc

// The kernel's struct sigaction on x86-64 and arm64: no handler here needs a restorer. These
// helpers are the middle's (below), not instrumented by TSan either.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};

__attribute__((no_sanitize("thread"))) void set_disposition(int sig, void (*handler)(int)) {
  KernelSigaction a{handler, 0, nullptr, 0};
  syscall(SYS_rt_sigaction, sig, &a, nullptr, sizeof a.mask);
}

__attribute__((no_sanitize("thread"))) void unblock_all() {
  std::uint64_t none = 0;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, sizeof none);
}

[[noreturn]] __attribute__((no_sanitize("thread"))) void exit_now(int code) {
  syscall(SYS_exit_group, code);
  __builtin_unreachable();
}

// The middle process of a worker (see Worker): the worker in its own process group, this
// process's exit status its worker's. It starts with the stop signals blocked (its agent's
// thread blocks them) and ignores them from before the worker exists, so that a stop sent at
// any time ends the worker, never the middle first.
//
// A copy of a threaded process made by a raw clone: system calls only, made with syscall(),
// never libc's wrappers. A sanitizer intercepts those (sigaction, vfork, waitpid, _exit) and
// takes its own locks there, which another thread of this process may have held at the clone,
// forever held in the copy (under TSan, one run in twenty of a head_launch_test with two fake
// agents hung so).
[[noreturn]] __attribute__((no_sanitize("thread"))) void middle_main(char* const* argv, int ready) {
  // Only the worker's output and the ready pipe stay open here: a copy of this test process's
  // sockets would keep the agents' connections open after they close them.
  if (ready == 3) {
    syscall(SYS_fcntl, 3, F_SETFD, FD_CLOEXEC);
  } else {
    syscall(SYS_dup3, ready, 3, O_CLOEXEC);
  }
  syscall(SYS_close_range, 4U, ~0U, 0U);
  constexpr int kStops[] = {SIGINT, SIGTERM, SIGHUP};
  for (int sig : kStops) set_disposition(sig, SIG_IGN);
  syscall(SYS_setpgid, 0, 0);
  // vfork's wait for the exec, without sharing memory: the child returns from syscall() on a
  // copy of this stack.
  long worker = syscall(SYS_clone, CLONE_VFORK | SIGCHLD, nullptr, nullptr, nullptr, 0);
  if (worker == 0) {
    for (int sig : kStops) set_disposition(sig, SIG_DFL);
    unblock_all();
    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    syscall(SYS_execve, argv[0], argv, environ);
    exit_now(127);
  }
  if (worker < 0) exit_now(127);
  // The worker runs (or has failed to exec): from now on a stop sent to the group reaches it.
  (void)!syscall(SYS_write, 3, "r", 1);
  int status = 0;
  while (syscall(SYS_wait4, worker, &status, 0, nullptr) < 0) {
    if (errno != EINTR) exit_now(127);
  }
  if (WIFEXITED(status)) exit_now(WEXITSTATUS(status));
  set_disposition(WTERMSIG(status), SIG_DFL);
  unblock_all();
  syscall(SYS_kill, syscall(SYS_getpid), WTERMSIG(status));
  exit_now(128 + WTERMSIG(status));
}

// A fake agent's worker: a real program. No wait for any child in this process (a waitpid(-1)
// anywhere) may take its exit, and an exec makes any child one that waitpid(-1) takes. So it
// runs under a middle process, started with no exit signal and never exec'ed (a "clone" child,
// which only waits with __WALL see), that waits for it and ends as it did.
// Both are in one process group, signalled as one; killed and reaped when destroyed.
class Worker {
 public:
  explicit Worker(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
      throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
    }
    CloneArgs ca{};
    ca.flags = kClonePidfd;
    ca.pidfd = reinterpret_cast<std::uint64_t>(&pidfd_);
    pid_ = static_cast<pid_t>(syscall(SYS_clone3, &ca, sizeof ca));
    if (pid_ == 0) middle_main(args.data(), ready[1]);
    int clone_errno = errno;
    ::close(ready[1]);
    if (pid_ < 0) {
      ::close(ready[0]);
      throw std::runtime_error(fmt::format("clone3: {}", std::strerror(clone_errno)));
    }
    // A stop sent before the worker exists would reach only the middle, which ignores it. A
    // signal this thread took would cut the wait short (the agent's thread blocks the ones the
    // head handles), and closing the pipe then ends the middle with SIGPIPE at its "ready".
    pollfd p{ready[0], POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + kBound;
    auto left = [&] {
      auto ms =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      return static_cast<int>(std::max<long>(0, ms.count()));
    };
    while (poll(&p, 1, left()) < 0 && errno == EINTR) {
    }
    ::close(ready[0]);
  }
  ~Worker() {
    stop();
    ::close(pidfd_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  pid_t pgid() const { return pid_; }
  void signal(int sig) {
    if (!status_) ::kill(-pid_, sig);
  }
  // SIGTERM, and SIGKILL after a bound, as a teardown does; returns the wait status. (SIGKILL
  // first would leave the worker a zombie of init's for a while: the middle would not reap it.)
  int stop() {
    signal(SIGTERM);
    if (auto status = wait_for(std::chrono::seconds(5))) return *status;
    signal(SIGKILL);
    return wait_for(kBound).value_or(SIGKILL);
  }
  // Its wait status once it has ended, waiting up to bound.
  std::optional<int> wait_for(std::chrono::milliseconds bound) {
    if (status_) return status_;
    pollfd p{pidfd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(bound.count())) <= 0) return std::nullopt;
    siginfo_t info{};
    if (waitid(static_cast<idtype_t>(kPidfdId), static_cast<id_t>(pidfd_), &info,
               WEXITED | __WALL) != 0) {
      status_ = 127 << 8;  // Not ours to wait for: cannot happen to a clone child.
      return status_;
    }
    status_ = info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8
                                         : info.si_status | (info.si_code == CLD_DUMPED ? 0x80 : 0);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> status_;
};

// What became of a fake agent's worker.
struct Ran {
  AgentEnd end;
  int status = 0;
};

bool interrupted(const std::string& reason) {
  return reason.rfind("interrupted", 0) == 0;
}

}  // namespace

// One node's agent: a thread that joins the head's rendezvous with the job it was handed.
struct FakeTransport::Agent {
  FakeTransport& owner;
  transport::AgentJob job;
  transport::AgentNode node;
  std::vector<std::string> argv;
  std::size_t index;
  std::atomic<bool> lost{false};
  std::atomic<bool> stop{false};
  std::thread thread;

  void update(const std::function<void(AgentRecord&)>& change) {
    std::lock_guard lock(owner.mutex_);
    change(owner.records_[index]);
    owner.changed_.notify_all();
  }
  void end(AgentEnd how, int code, std::string detail = {}) {
    update([&](AgentRecord& r) {
      r.end = how;
      r.code = code;
      r.detail = std::move(detail);
    });
  }

  void run();
  void run_attempt(rdzv::Client& c);
  void share_master(rdzv::Client& c, const rdzv::NodeAssignment& a);
  Ran watch(rdzv::Client& c, const rdzv::NodeAssignment& a, Worker& worker);
  void publish_failure(rdzv::Client& c, const rdzv::NodeAssignment& a, pid_t pid, int status);
  void report_result(rdzv::Client& c, const rdzv::NodeAssignment& a, bool ok, int code);
  int settle(rdzv::Client& c);
  void done_barrier(rdzv::Client& c, const rdzv::NodeAssignment& a);
};

void FakeTransport::Agent::run() {
  // The head's signals reach the head only, as on another machine; so do its children's ends
  // (its own node's loop handles SIGCHLD).
  sigset_t block;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD})
    sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);
  try {
    rdzv::ClientOptions options;
    options.job_id = job.job_id;
    options.timeout = kBound;
    rdzv::Client c = rdzv::Client::connect(job.endpoint, job.token, options);
    run_attempt(c);
  } catch (const rdzv::AbortedError& e) {
    // As run_node: 130 for an interrupted job, 1 for any other abort.
    end(AgentEnd::kAborted, interrupted(e.detail()) ? 130 : 1, e.detail());
  } catch (const std::exception& e) {
    // As run_node: a node that gives up tells every node, so that nobody waits for it.
    try {
      rdzv::ClientOptions options;
      options.job_id = job.job_id;
      rdzv::Client::connect(job.endpoint, job.token, options)
          .abort(fmt::format("node {} ({}): {}", node.node_rank, node.host, e.what()));
    } catch (const std::exception&) {
      // The server is gone or the job aborted already: either way nobody waits for this node.
    }
    end(AgentEnd::kError, 1, e.what());
  }
}

// Attempt 0 as run_node has it: join, the worker, its failure or a failure elsewhere, this node's
// result, the verdict every node agrees on, and the done barrier.
void FakeTransport::Agent::run_attempt(rdzv::Client& c) {
  rdzv::NodeAssignment a = c.join_node(job.nnodes, 1, node.node_rank, kBound);
  share_master(c, a);
  Worker worker(argv);
  update([&](AgentRecord& r) {
    r.joined = true;
    r.worker_pgid = worker.pgid();
  });
  Ran ran = watch(c, a, worker);
  if (ran.end == AgentEnd::kLost || ran.end == AgentEnd::kStopped) return end(ran.end, 1);
  int code = exit_code_from_status(ran.status);
  if (ran.end == AgentEnd::kFailedHere) publish_failure(c, a, worker.pgid(), ran.status);
  report_result(c, a, ran.end == AgentEnd::kSucceeded, ran.end == AgentEnd::kFailedHere ? code : 1);
  code = settle(c);
  done_barrier(c, a);
  end(ran.end, code);
}

// MASTER_ADDR:MASTER_PORT: node 0 sets it, the others read it.
void FakeTransport::Agent::share_master(rdzv::Client& c, const rdzv::NodeAssignment& a) {
  if (a.node_rank == 0) {
    c.set(key(0, "master"), make_endpoint("127.0.0.1", free_tcp_port()));
  } else {
    c.get(key(0, "master"), kBound);
  }
}

// Until the worker ends, a failure elsewhere stops it, or the transport loses or stops this
// agent, which stops it too.
Ran FakeTransport::Agent::watch(rdzv::Client& c, const rdzv::NodeAssignment& a, Worker& worker) {
  const std::string notify = key(0, fmt::format("notify/{}", a.node_rank));
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (lost || stop) {
      worker.stop();
      return {lost ? AgentEnd::kLost : AgentEnd::kStopped};
    }
    if (auto status = worker.wait_for(std::chrono::milliseconds(20))) {
      return {exit_code_from_status(*status) == 0 ? AgentEnd::kSucceeded : AgentEnd::kFailedHere,
              *status};
    }
    if (auto note = c.try_get(notify); note && *note == "fail") {
      return {AgentEnd::kStoppedByFailure, worker.stop()};
    }
  }
  throw std::runtime_error(fmt::format("the worker of node {} ran past {} s", a.node_rank,
                                       std::chrono::seconds(kBound).count()));
}

// The first failure's record (first wins), and every node's notify key.
void FakeTransport::Agent::publish_failure(rdzv::Client& c, const rdzv::NodeAssignment& a,
                                           pid_t pid, int status) {
  json record = {{"node", a.node_rank},
                 {"host", node.host},
                 {"rank", a.rank_offset},
                 {"local_rank", 0},
                 {"pid", pid},
                 {"status", describe_status(status)},
                 {"code", exit_code_from_status(status)},
                 {"time", format_time(std::chrono::system_clock::now())},
                 {"tail", json::array()}};
  std::string text = record.dump();
  if (c.compare_set(key(0, "failed"), "", text) != text) return;
  for (int n = 0; n < a.nnodes; ++n) c.set(key(0, fmt::format("notify/{}", n)), "fail");
}

// This node's result, and the count whose last one settles the attempt.
void FakeTransport::Agent::report_result(rdzv::Client& c, const rdzv::NodeAssignment& a, bool ok,
                                         int code) {
  std::string result = json{{"ok", ok}, {"code", code}}.dump();
  if (!ok) c.compare_set(key(0, "first_bad"), "", result);
  std::int64_t count = c.add(key(0, "results"), coordinator::result_delta(ok));
  if (coordinator::all_results_in(count, a.nnodes)) {
    c.set(key(0, "settled"), coordinator::settled_value(count));
  }
  c.compare_set(key(0, fmt::format("notify/{}", a.node_rank)), "", "end");
}

// The job's exit code once every node's result is in.
int FakeTransport::Agent::settle(rdzv::Client& c) {
  if (c.get(key(0, "settled"), kBound) == coordinator::kSettledOk) return 0;
  if (auto record = c.try_get(key(0, "failed"))) return json::parse(*record).at("code").get<int>();
  if (auto bad = c.try_get(key(0, "first_bad"))) return json::parse(*bad).at("code").get<int>();
  return 0;
}

// No node leaves before every node is done with the rendezvous (its server is the head's).
void FakeTransport::Agent::done_barrier(rdzv::Client& c, const rdzv::NodeAssignment& a) {
  c.set(fmt::format("mlrun/done/{}", a.node_rank), "1");
  std::vector<std::string> done;
  for (int n = 0; n < a.nnodes; ++n) done.push_back(fmt::format("mlrun/done/{}", n));
  c.wait(done, kBound);
}

FakeTransport::FakeTransport(Workers workers, std::vector<std::string> default_worker)
    : workers_(std::move(workers)), default_worker_(std::move(default_worker)) {}

FakeTransport::~FakeTransport() {
  {
    std::lock_guard lock(loss_mutex_);
    finishing_ = true;
  }
  for (auto& a : agents_) a->stop = true;
  for (auto& a : agents_) {
    if (a->thread.joinable()) a->thread.join();
  }
  for (auto& t : loss_threads_) t.join();
}

void FakeTransport::start(const transport::AgentJob& job,
                          const std::vector<transport::AgentNode>& nodes,
                          transport::LostCallback on_lost) {
  std::lock_guard lock(mutex_);
  started_ = true;
  job_ = job;
  nodes_ = nodes;
  on_lost_ = std::move(on_lost);
  for (const auto& n : nodes) {
    auto found = workers_.find(n.host);
    records_.push_back({n.node_rank, n.host});
    agents_.push_back(std::unique_ptr<Agent>(new Agent{
        *this, job, n, found != workers_.end() ? found->second : default_worker_, agents_.size()}));
  }
  for (auto& a : agents_) a->thread = std::thread([agent = a.get()] { agent->run(); });
}

void FakeTransport::finish(std::chrono::milliseconds bound) {
  {
    // From here no loss is reported, and none is in progress (as transport/transport.h says).
    std::lock_guard lock(loss_mutex_);
    finishing_ = true;
  }
  {
    std::unique_lock lock(mutex_);
    ++finish_calls_;
    finish_bound_ = bound;
    changed_.wait_for(lock, bound, [this] { return running_locked() == 0; });
  }
  // The rest are stopped, as a transport closes the connections of agents that did not end.
  for (auto& a : agents_) a->stop = true;
  for (auto& a : agents_) {
    if (a->thread.joinable()) a->thread.join();
  }
  for (auto& t : loss_threads_) t.join();
  loss_threads_.clear();
}

void FakeTransport::lose(int node_rank, const std::string& why) {
  std::lock_guard lock(mutex_);
  loss_threads_.emplace_back([this, node_rank, why] {
    std::string host;
    {
      std::unique_lock lock(mutex_);
      for (std::size_t i = 0; i < agents_.size(); ++i) {
        if (records_[i].node_rank != node_rank) continue;
        host = records_[i].host;
        agents_[i]->lost = true;
        changed_.wait_for(lock, kBound, [&] { return records_[i].end != AgentEnd::kRunning; });
      }
    }
    std::lock_guard reports(loss_mutex_);
    if (!finishing_ && on_lost_) on_lost_(node_rank, host, why);
  });
}

bool FakeTransport::wait_joined(std::chrono::milliseconds bound) {
  std::unique_lock lock(mutex_);
  auto all = [this](auto pred) { return std::all_of(records_.begin(), records_.end(), pred); };
  changed_.wait_for(lock, bound, [&] {
    return started_ &&
           all([](const AgentRecord& r) { return r.joined || r.end != AgentEnd::kRunning; });
  });
  return started_ && all([](const AgentRecord& r) { return r.joined; });
}

bool FakeTransport::started() const {
  std::lock_guard lock(mutex_);
  return started_;
}

transport::AgentJob FakeTransport::job() const {
  std::lock_guard lock(mutex_);
  return job_;
}

std::vector<transport::AgentNode> FakeTransport::nodes() const {
  std::lock_guard lock(mutex_);
  return nodes_;
}

int FakeTransport::finish_calls() const {
  std::lock_guard lock(mutex_);
  return finish_calls_;
}

std::chrono::milliseconds FakeTransport::finish_bound() const {
  std::lock_guard lock(mutex_);
  return finish_bound_;
}

std::vector<AgentRecord> FakeTransport::agents() const {
  std::lock_guard lock(mutex_);
  return records_;
}

int FakeTransport::running() const {
  std::lock_guard lock(mutex_);
  return running_locked();
}

int FakeTransport::running_locked() const {
  int n = 0;
  for (const auto& r : records_) n += r.end == AgentEnd::kRunning ? 1 : 0;
  return n;
}

}  // namespace mlrun::fake
