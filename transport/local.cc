#include "transport/local.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "launcher/head.h"
#include "launcher/plan.h"
#include "transport/tree.h"
#include "worker/process.h"

extern char** environ;

namespace mlrun::transport {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// A node's agent as a child process of the head. Its stdin stays open after the job description
// and the token: end-of-file there is its lifeline, as the end of an SSH connection is.
class LocalAgent : public AgentProcess {
 public:
  // An agent that runs: its pid, output pipes and the write end of its stdin.
  LocalAgent(pid_t pid, int out, int err, int stdin_w) : pid_(pid), out_(out), err_(err) {
    stdin_w_ = stdin_w;
    done_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (done_ < 0) fail(fmt::format("pidfd_open: {}", std::strerror(errno)));
  }
  // An agent that could not start: its output is empty and it has ended, with why.
  explicit LocalAgent(const std::string& why) { fail(why); }
  ~LocalAgent() override {
    stop();
    wait();
    for (int* fd : {&out_, &err_, &done_}) close_fd(*fd);
  }

  // -1 once abandoned: the relay (another thread) polls them no more, and they stay open until
  // the destructor, so that no number it may still poll is reused meanwhile.
  int stdout_fd() const override { return abandoned_ ? -1 : out_; }
  int stderr_fd() const override { return abandoned_ ? -1 : err_; }
  int done_fd() const override { return abandoned_ ? -1 : done_; }
  void stop() override { close_fd(stdin_w_); }
  // The SSH channel's close, here: the agent reads its stdin's end, and an agent that hangs
  // is its lifeline's to end (the grace period + 10 s later), as on a remote host; its parent
  // does not wait for that a second time. It stays this process's child, a zombie from its end
  // until this process (which is ending: RemoteAgents::finish) exits.
  void abandon() override {
    stop();
    abandoned_ = true;
  }

  RemoteExit wait() override {
    if (pid_ < 0) return result_;
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid_, &status, abandoned_ ? WNOHANG : 0)) < 0 && errno == EINTR) {
    }
    if (r == 0) {
      result_.error = "left to its lifeline, still running after its stdin closed";
      return result_;
    }
    pid_ = -1;
    if (r < 0) {
      result_.error = fmt::format("waitpid: {}", std::strerror(errno));
    } else if (WIFSIGNALED(status)) {
      result_.signal = sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status))
                                                      : fmt::to_string(WTERMSIG(status));
    } else {
      result_.exit_code = WEXITSTATUS(status);
    }
    return result_;
  }

 private:
  // Ended without running: every descriptor the relay polls reads end-of-file at once (or is
  // -1, when no descriptor was left for a pipe: the relay takes that as ended too).
  void fail(const std::string& why) {
    result_.error = why;
    for (int* fd : {&out_, &err_, &done_}) {
      close_fd(*fd);
      int p[2];
      if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
        *fd = p[0];
        ::close(p[1]);
      }
    }
    if (pid_ >= 0) {
      ::kill(pid_, SIGKILL);
      wait();
      result_.error = why;
    }
  }

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1, done_ = -1, stdin_w_ = -1;
  std::atomic<bool> abandoned_{false};
  RemoteExit result_;
};

// The head's environment for every agent, with the node's name in MLRUN_NODE_NAME.
std::vector<std::string> agent_environment(const std::string& host) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "MLRUN_NODE_NAME=", 16) != 0) env.emplace_back(*e);
  }
  env.push_back("MLRUN_NODE_NAME=" + host);
  return env;
}

std::unique_ptr<AgentProcess> start_agent(ProcessSpawner& spawner, const std::string& host,
                                          const std::string& payload) {
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    return std::make_unique<LocalAgent>(fmt::format("pipe: {}", std::strerror(errno)));
  }
  SpawnRequest request;
  request.argv = {self_path(), "agent"};
  request.env = agent_environment(host);
  request.stdin_fd = in[0];
  // The parent's end (the head's, or an interior agent's of the launch tree) reaches the agent
  // as its stdin's end-of-file, as over SSH: it stops its workers, and a child of the tree
  // leaves the report of its parent's loss to the parent's own parent. No death signal: a
  // SIGTERM would reach the agent first and end the job as an interrupt, naming the wrong node.
  request.death_signal = 0;
  SpawnedProcess p;
  try {
    p = spawner.spawn(request);
  } catch (const SpawnError& e) {
    ::close(in[0]);
    ::close(in[1]);
    return std::make_unique<LocalAgent>(e.what());
  }
  ::close(in[0]);
  auto agent = std::make_unique<LocalAgent>(p.pid, p.stdout_fd, p.stderr_fd, in[1]);
  // A few KiB: the pipe takes it at once, and the agent reads it first thing.
  for (std::size_t done = 0; done < payload.size();) {
    ssize_t n = ::write(in[1], payload.data() + done, payload.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // The agent died already: its exit status tells.
    done += static_cast<std::size_t>(n);
  }
  return agent;
}

class LocalTransport : public Transport {
 public:
  explicit LocalTransport(std::unique_ptr<Subtree> children) : children_(std::move(children)) {}
  std::string name() const override { return "sim"; }
  std::string head_address() const override { return "127.0.0.1"; }

  void start(const AgentJob& job, const std::vector<AgentNode>& nodes,
             LostCallback on_lost) override {
    if (nodes.empty()) return;
    // Past --tree_width nodes, the head's children start the rest here too.
    AgentJob simulated = job;
    simulated.simulated = true;
    children_->start(simulated, "", std::move(on_lost));
  }

  void finish(std::chrono::milliseconds bound) override { children_->finish(bound); }

 private:
  std::unique_ptr<Subtree> children_;
};

}  // namespace

std::vector<std::string> choose_sim_launcher(Options& o) {
  if (o.hostfile.empty() && o.hosts.empty()) {
    return {"--launcher sim needs the simulated nodes: give --hostfile or -H (any names)"};
  }
  o.launcher_why =
      fmt::format("--launcher sim: every host of {} is simulated by an agent on this machine",
                  o.hostfile.empty() ? "-H" : "--hostfile");
  return {};
}

std::unique_ptr<Subtree> local_subtree(std::vector<TreeNode> children) {
  std::vector<std::string> hosts;
  for (const auto& c : children) hosts.push_back(c.node.host);
  auto spawner = std::shared_ptr<ProcessSpawner>(make_posix_spawner());
  // Called by RemoteAgents::start, in order, on the thread that calls Subtree::start.
  auto agents = RemoteAgents::make(
      "sim", hosts,
      [spawner, hosts](std::size_t i, RemoteAgents::Agent agent) {
        return start_agent(*spawner, hosts[i], agent.payload);
      },
      "127.0.0.1");
  return std::make_unique<Subtree>(std::move(agents), std::move(children),
                                   fmt::format("{} agent", self_path()));
}

std::unique_ptr<Transport> make_local_transport(const std::vector<AgentNode>& nodes,
                                                int tree_width) {
  return std::make_unique<LocalTransport>(local_subtree(plan_tree(nodes, tree_width)));
}

}  // namespace mlrun::transport
