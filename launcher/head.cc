#include "launcher/head.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "launcher/plan.h"
#include "transport/ssh_session.h"
#include "worker/log.h"
#include "worker/output.h"
#include "worker/signals.h"

namespace mlrun {

bool LossReports::report(int node_rank, const std::string& host, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (closed_ || !on_lost_) return false;
  on_lost_(node_rank, host, why);
  return true;
}

void LossReports::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
}

bool LossReports::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

namespace {

// An agent's `exec` that its host's shell could not carry out (shell_could_not_run): it took no
// part, and nobody else will say so, so it is lost now, not after kLostGrace.
std::string not_run_reason(int exit_code) {
  return fmt::format("its agent did not start: its shell exited with code {}: {}", exit_code,
                     exit_code == 127
                         ? fmt::format("{} or a library it needs is missing there (every host "
                                       "needs mlrun at the head's path)",
                                       self_path())
                         : fmt::format("{} is there but cannot be executed", self_path()));
}

}  // namespace

struct RemoteAgents::State {
  struct Running {
    int node_rank;
    std::string host;
    std::unique_ptr<AgentProcess> command;
    std::unique_ptr<StreamOutput> out;
    std::unique_ptr<StreamOutput> err;
    bool out_open = true;
    bool err_open = true;
    bool ended = false;
    // When an unfinished line of its stdout / stderr is shown as it is (a prompt, a progress
    // bar), kPartialLineIdle after its first byte, as the agent does its workers'; {}: none held.
    std::chrono::steady_clock::time_point out_due{}, err_due{};
  };
  std::string transport;           // "ssh", "sim": the prefix of its debug lines.
  std::vector<std::string> hosts;  // In node order; launch starts the agent of each.
  Launch launch;
  std::string local_address;
  std::vector<Running> agents;
  // Checking "is the job over?" and aborting the job are one step under its lock: a loss seen as
  // the job ends is reported while the server still serves, or not at all.
  std::unique_ptr<LossReports> lost = std::make_unique<LossReports>();
  std::thread relay;
  // Agents that exited by themselves, with an exit code, before the job was over. Such an agent
  // has normally finished its part (its node settled the job, or it published an abort), and
  // the head's watch settles an instant later; it is lost only if the job is still not over
  // after kLostGrace (it died before reaching the rendezvous, and nobody else will know).
  struct Exited {
    std::chrono::steady_clock::time_point deadline;
    int node_rank;
    std::string host;
    std::string why;
  };
  static constexpr std::chrono::seconds kLostGrace{5};
  std::vector<Exited> exited;
  // over() writes here, so a relay waiting out an exited agent's grace wakes at the job's end.
  int wake_r = -1;
  int wake_w = -1;

  void over() {
    lost->close();
    wake();
  }
  // The relay looks at every agent's descriptors again (after over(), or an abandon()).
  void wake() {
    char c = 0;
    if (wake_w >= 0) {
      [[maybe_unused]] ssize_t n = ::write(wake_w, &c, 1);
    }
  }

  // What the relay polls: each agent's open outputs and, until it ends, its done fd.
  struct PollSet {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, int>> which;  // (agent, 0 out / 1 err / 2 done / 3 wake)
    void add(int fd, std::size_t agent, int kind) {
      fds.push_back({fd, POLLIN, 0});
      which.emplace_back(agent, kind);
    }
  };

  PollSet poll_set() {
    PollSet set;
    for (std::size_t i = 0; i < agents.size(); ++i) {
      auto& a = agents[i];
      if (a.out_open) set.add(a.command->stdout_fd(), i, 0);
      if (a.err_open) set.add(a.command->stderr_fd(), i, 1);
      if (!a.ended) set.add(a.command->done_fd(), i, 2);
    }
    return set;
  }

  // An exited agent waits for the job's end (over() wakes the poll) or its deadline: reports
  // those past it and returns the poll's timeout for the rest (-1: none).
  int report_overdue() {
    if (lost->closed()) exited.clear();
    auto now = std::chrono::steady_clock::now();
    int timeout = -1;
    for (auto it = exited.begin(); it != exited.end();) {
      if (now < it->deadline) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(it->deadline - now).count();
        timeout = timeout < 0 ? static_cast<int>(left) : std::min(timeout, static_cast<int>(left));
        ++it;
        continue;
      }
      lost->report(it->node_rank, it->host, it->why);
      it = exited.erase(it);
    }
    return timeout;
  }

  void agent_ended(Running& a, char* buf, std::size_t size) {
    a.ended = true;
    RemoteExit exit = a.command->wait();
    log::debug("{} {}: the agent of node {} ended: {}", transport, a.host, a.node_rank,
               !exit.error.empty()    ? exit.error
               : !exit.signal.empty() ? "SIG" + exit.signal
                                      : fmt::format("exit code {}", exit.exit_code));
    drain(a, buf, size);
    if (lost->closed()) return;
    const bool exited_itself = exit.error.empty() && exit.signal.empty();
    const bool not_run = exited_itself && shell_could_not_run(exit.exit_code);
    std::string why = !exit.error.empty() ? exit.error
                      : !exit.signal.empty()
                          ? fmt::format("its agent was killed by SIG{}", exit.signal)
                      : not_run ? not_run_reason(exit.exit_code)
                                : fmt::format("its agent exited with code {}", exit.exit_code);
    if (exited_itself && !not_run) {
      exited.push_back({std::chrono::steady_clock::now() + kLostGrace, a.node_rank, a.host, why});
    } else {
      lost->report(a.node_rank, a.host, why);
    }
  }

  // kind 0: the agent's stdout, 1: its stderr.
  static void read_output(Running& a, int kind, char* buf, std::size_t size) {
    int fd = kind == 0 ? a.command->stdout_fd() : a.command->stderr_fd();
    StreamOutput& output = kind == 0 ? *a.out : *a.err;
    auto& due = kind == 0 ? a.out_due : a.err_due;
    ssize_t n = read(fd, buf, size);
    if (n > 0) {
      output.on_data({buf, static_cast<std::size_t>(n)});
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      output.on_eof();
      (kind == 0 ? a.out_open : a.err_open) = false;
    }
    if (!output.has_partial()) {
      due = {};
    } else if (due == std::chrono::steady_clock::time_point{}) {
      due = std::chrono::steady_clock::now() + kPartialLineIdle;
    }
  }

  // Shows the unfinished lines whose time has come; returns the poll's timeout until the next
  // one's, or `timeout` if sooner (-1: none). Only from a pipe with nothing more to read: a line's
  // rest is often there already, behind a read that ended mid-line (a full buffer while this
  // loop was busy with the other agents), and the loop reads it next (cli.sim_tree cut 32 of
  // 25,600 lines when the rest was not waited for).
  int show_due_partials(int timeout) {
    auto now = std::chrono::steady_clock::now();
    for (auto& a : agents) {
      for (int kind = 0; kind < 2; ++kind) {
        auto& due = kind == 0 ? a.out_due : a.err_due;
        if (due == std::chrono::steady_clock::time_point{}) continue;
        if (now >= due) {
          pollfd p{kind == 0 ? a.command->stdout_fd() : a.command->stderr_fd(), POLLIN, 0};
          if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0) continue;
          (kind == 0 ? a.out : a.err)->flush_partial();
          due = {};
          continue;
        }
        int left =
            static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count());
        timeout = timeout < 0 ? left : std::min(timeout, left);
      }
    }
    return timeout;
  }

  // Copies every agent's output to the terminal, whole lines at a time, and notices agents
  // that end. Runs until every agent has ended and its output is drained.
  void relay_loop() {
    char buf[16384];
    while (true) {
      // An agent without descriptors (none were left to make them: transport/local.cc) has
      // ended, with why; poll() would skip them and wait for it forever.
      for (auto& a : agents) {
        if (a.out_open && a.command->stdout_fd() < 0) a.out_open = false;
        if (a.err_open && a.command->stderr_fd() < 0) a.err_open = false;
        if (!a.ended && a.command->done_fd() < 0) agent_ended(a, buf, sizeof buf);
      }
      PollSet set = poll_set();
      int timeout = show_due_partials(report_overdue());
      if (set.which.empty() && exited.empty()) return;
      if (wake_r >= 0) set.add(wake_r, 0, 3);
      if (poll(set.fds.data(), set.fds.size(), timeout) < 0) continue;
      for (std::size_t k = 0; k < set.which.size(); ++k) {
        if (set.fds[k].revents == 0) continue;
        auto [agent, kind] = set.which[k];
        if (kind == 3) {
          char c;
          while (::read(wake_r, &c, 1) > 0) {
          }
        } else if (kind == 2) {
          agent_ended(agents[agent], buf, sizeof buf);
        } else {
          read_output(agents[agent], kind, buf, sizeof buf);
        }
      }
    }
  }

  static void drain(Running& a, char* buf, std::size_t size) {
    for (int kind = 0; kind < 2; ++kind) {
      bool& open = kind == 0 ? a.out_open : a.err_open;
      int fd = kind == 0 ? a.command->stdout_fd() : a.command->stderr_fd();
      while (open) {
        ssize_t n = read(fd, buf, size);
        if (n > 0) {
          (kind == 0 ? a.out : a.err)->on_data({buf, static_cast<std::size_t>(n)});
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else {
          if (n == 0) {
            (kind == 0 ? a.out : a.err)->on_eof();
            open = false;
          }
          break;
        }
      }
    }
  }
};

RemoteAgents::RemoteAgents(std::unique_ptr<State> state) : state_(std::move(state)) {}

namespace {

// An agent over SSH: the relay's view of a RemoteCommand.
class SshAgent : public AgentProcess {
 public:
  explicit SshAgent(RemoteCommand command) : command_(std::move(command)) {}
  int stdout_fd() const override { return command_.stdout_fd(); }
  int stderr_fd() const override { return command_.stderr_fd(); }
  int done_fd() const override { return command_.done_fd(); }
  RemoteExit wait() override { return command_.wait(); }
  void stop() override { command_.stop(); }

 private:
  RemoteCommand command_;
};

}  // namespace

std::unique_ptr<RemoteAgents> RemoteAgents::make(std::string transport,
                                                 std::vector<std::string> hosts, Launch launch,
                                                 std::string local_address) {
  auto state = std::make_unique<State>();
  state->transport = std::move(transport);
  state->hosts = std::move(hosts);
  state->launch = std::move(launch);
  state->local_address = std::move(local_address);
  return std::unique_ptr<RemoteAgents>(new RemoteAgents(std::move(state)));
}

namespace {

// Agents started early, on hosts whose connect succeeded, when another host's failed: each one's
// stdin ends before any job reached it, so it exits without starting anything; waits up to
// kUnusedBound for them, so that none is left when the head reports the failure.
void end_unused(std::vector<std::optional<RemoteCommand>>& commands) {
  constexpr auto kUnusedBound = std::chrono::seconds(5);
  for (auto& c : commands) {
    if (c) c->close_stdin();
  }
  const auto deadline = std::chrono::steady_clock::now() + kUnusedBound;
  for (auto& c : commands) {
    if (!c) continue;
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{c->done_fd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::max<long>(0, left.count()))) == 0) {
      log::debug("ssh {}: the agent did not end within {} s of its stdin's end", c->host(),
                 kUnusedBound.count());
    }
  }
  commands.clear();  // Each stop()s: the connection closes.
}

}  // namespace

std::unique_ptr<RemoteAgents> RemoteAgents::connect(const std::vector<Target>& agents,
                                                    const std::string& command,
                                                    std::chrono::milliseconds connect_timeout,
                                                    std::vector<std::string>& errors) {
  std::vector<SshTarget> targets;
  for (const auto& a : agents) targets.push_back({a.host.host, a.host.user, a.host.port});
  SshOptions options;
  options.connect_timeout = connect_timeout;
  // Each agent starts as soon as its own host is connected; its job waits for every host.
  std::vector<std::optional<RemoteCommand>> started(targets.size());
  std::vector<std::string> failed(targets.size());
  connect_each(targets, options, [&](std::size_t i, std::variant<SshSession, SshError> result) {
    if (auto* e = std::get_if<SshError>(&result)) {
      failed[i] = e->what();
      return;
    }
    log::debug("ssh {}: starting the agent of node {}: {}", targets[i].host, agents[i].node_rank,
               command);
    // Its pipes and pump thread are this process's: out of descriptors or threads, this host
    // fails like one that could not be connected (on a connecting thread, a throw would end
    // the head).
    try {
      started[i].emplace(
          RemoteCommand::start(std::move(std::get<SshSession>(result)), command, ""));
    } catch (const std::exception& e) {
      failed[i] = fmt::format("{}: cannot start the agent: {}", targets[i].host, e.what());
    }
  });
  for (const auto& f : failed) {
    if (!f.empty()) errors.push_back(f);
  }
  if (!errors.empty()) {
    end_unused(started);
    return nullptr;
  }
  auto commands = std::make_shared<std::vector<std::optional<RemoteCommand>>>(std::move(started));
  std::vector<std::string> names;
  for (const auto& c : *commands) names.push_back(c->host());
  std::string address = commands->empty() ? std::string() : commands->front()->local_address();
  return make(
      "ssh", std::move(names),
      [commands](std::size_t i, Agent agent) -> std::unique_ptr<AgentProcess> {
        RemoteCommand& c = *(*commands)[i];
        c.write_stdin(std::move(agent.payload));
        return std::make_unique<SshAgent>(std::move(c));
      },
      std::move(address));
}

std::string RemoteAgents::local_address() const {
  return state_->local_address;
}

void RemoteAgents::start(std::vector<Agent> agents, LostCallback on_lost) {
  state_->lost = std::make_unique<LossReports>(std::move(on_lost));  // Before the relay starts.
  for (std::size_t i = 0; i < agents.size() && i < state_->hosts.size(); ++i) {
    const std::string& host = state_->hosts[i];
    log::debug("{} {}: handing node {} its job ({})", state_->transport, host, agents[i].node_rank,
               agents[i].command);
    int node_rank = agents[i].node_rank;
    state_->agents.push_back(State::Running{
        node_rank, host, state_->launch(i, std::move(agents[i])),
        // The agent already tagged each line with its rank.
        std::make_unique<StreamOutput>(StreamRoute{STDOUT_FILENO, "", -1, false}, 0),
        std::make_unique<StreamOutput>(StreamRoute{STDERR_FILENO, "", -1, false}, 0)});
  }
  log::info("agents started on {} host{}", state_->agents.size(),
            state_->agents.size() == 1 ? "" : "s");
  state_->launch = nullptr;  // Releases what it holds (SSH: the sessions, now all moved).
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) == 0) {
    state_->wake_r = wake[0];
    state_->wake_w = wake[1];
  }
  State* raw = state_.get();
  // No signal of the process lands on the relay: it can outlive the loop that handles them (an
  // interior agent of the launch tree finishes its children after its own node has ended).
  state_->relay = thread_without_signals([raw] { raw->relay_loop(); });
}

void RemoteAgents::finish(std::chrono::milliseconds bound) {
  state_->over();
  if (!state_->relay.joinable()) return;
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (auto& a : state_->agents) {
    // Each agent ends by itself once its job is over; done_fd says when (none: it has ended).
    if (a.command->done_fd() < 0) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{a.command->done_fd(), POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
  }
  for (auto& a : state_->agents) {
    pollfd p{a.command->done_fd(), POLLIN, 0};
    if (p.fd >= 0 && poll(&p, 1, 0) == 0) {
      log::debug("{} {}: agent still running, closing its stdin and leaving it to its lifeline",
                 state_->transport, a.host);
      a.command->abandon();
    } else {
      a.command->stop();
    }
  }
  state_->wake();
}

RemoteAgents::~RemoteAgents() {
  state_->over();
  for (auto& a : state_->agents) a.command->stop();
  // The relay ends once every agent has ended and its pipes are drained; stop() ends them.
  if (state_->relay.joinable()) state_->relay.join();
  for (int fd : {state_->wake_r, state_->wake_w}) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace mlrun
