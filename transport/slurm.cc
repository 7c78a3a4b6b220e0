#include "transport/slurm.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include "launcher/plan.h"
#include "rendezvous/integer.h"
#include "worker/env.h"
#include "worker/net.h"
#include "worker/output.h"
#include "worker/process.h"

namespace mlrun::transport {
namespace {

std::string path_env() {
  const char* p = std::getenv("PATH");
  return p != nullptr ? p : "/usr/local/bin:/usr/bin:/bin";
}

// An agent that ends with a clean exit while the job is not over has normally finished its part
// an instant before the head's watch settles; it counts as lost only after this long.
constexpr std::chrono::seconds kLostGrace{5};
// After the agents' own stop has run out: srun's SIGTERM handling (SIGKILL to the step's tasks),
// then, if srun is still there, SIGKILL to srun itself.
constexpr std::chrono::seconds kSrunKillBound{10};

class SlurmTransport : public Transport {
 public:
  SlurmTransport(std::string srun, std::string scontrol)
      : srun_(std::move(srun)), scontrol_(std::move(scontrol)) {}
  ~SlurmTransport() override { finish(std::chrono::milliseconds(0)); }
  std::string name() const override { return "slurm"; }
  std::string head_address() const override { return ""; }

  void start(const AgentJob& job, const std::vector<AgentNode>& nodes,
             LostCallback on_lost) override {
    nodes_ = nodes;
    on_lost_ = std::move(on_lost);
    Environment env = Environment::current();
    // The token and the job reach every agent in srun's environment (--export=ALL), never argv.
    env.set("MLRUN_RDZV_TOKEN", job.token);
    env.set("MLRUN_AGENT_JOB", encode_agent_job(every_node_job(job, nodes)));
    SpawnRequest request{srun_argv(srun_, nodes, {self_path(), "agent"}), env.entries(), {}};
    // srun leads its own process group, so a Ctrl-C at the terminal reaches mlrun only (srun
    // would turn SIGINT into SIGKILL of every agent); it dies with mlrun by SIGTERM, which srun
    // turns into the end of the step.
    request.death_signal = SIGTERM;
    auto spawner = make_posix_spawner();
    try {
      process_ = spawner->spawn(request);
    } catch (const SpawnError& e) {
      ended_ = true;
      report(-1, "", fmt::format("cannot start srun: {}", e.what()));
      return;
    }
    watch_ = std::thread([this] { watch(); });
    settle_config(job);
  }

  void finish(std::chrono::milliseconds bound) override {
    // The head's bound is its grace period and 10 s; each agent's grace is cut to end within
    // KillWait (settle_config), and so is the wait for them.
    if (grace_.count() > 0) bound = std::min(bound, grace_ + kSrunKillBound);
    {
      // From here on no loss is reported: the job is over, and its server may be on its way out.
      std::lock_guard lock(report_mutex_);
      closed_ = true;
    }
    over_ = true;
    cv_.notify_all();
    if (!watch_.joinable()) return;
    if (!wait_ended(bound)) {
      kill(process_.pid, SIGTERM);
      if (!wait_ended(kSrunKillBound)) kill(process_.pid, SIGKILL);
    }
    watch_.join();
  }

 private:
  bool wait_ended(std::chrono::milliseconds bound) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, bound, [this] { return ended_.load(); });
  }

  // Slurm's configuration, asked for once srun is on its way, is read while srun starts the
  // agents (off the start's critical path). A refused version or no answer ends the job; else
  // every agent learns its grace period, cut to end within KillWait, from the rendezvous.
  void settle_config(const AgentJob& job) {
    std::string why;
    SlurmConfig config;
    {
      BoundedChild query({scontrol_, "show", "config"}, 10);
      config = read_slurm_config(query, why);
    }
    if (why.empty()) why = refuse_slurm_version(config.version);
    if (!why.empty()) return report(-1, "", why);
    grace_ = grace_within_kill_wait(job.grace, config.kill_wait);
    try {
      rendezvous::ClientOptions options;
      options.job_id = job.job_id;
      options.connect_timeout = std::chrono::seconds(10);
      auto c =
          rendezvous::Client::connect(make_endpoint("127.0.0.1", job.port), job.token, options);
      c.set(kSlurmGraceKey, std::to_string(grace_.count()));
    } catch (const std::exception& e) {
      report(-1, "", fmt::format("cannot tell the agents their grace period: {}", e.what()));
    }
  }

  // One line of srun's stderr: passed on, and read for the node srun names in a task's bad end
  // ("srun: error: sn02: task 1: Killed") or a node's failure ("Node failure on sn02").
  void on_stderr_line(const std::string& line) {
    std::string out = line + "\n";
    (void)!::write(STDERR_FILENO, out.data(), out.size());
    constexpr std::string_view kError = "srun: error: ", kNodeFailure = "Node failure on ";
    if (line.rfind(kError, 0) != 0) return;
    std::string_view rest = std::string_view(line).substr(kError.size());
    std::string host, why;
    if (rest.rfind(kNodeFailure, 0) == 0) {
      host = rest.substr(kNodeFailure.size());
      why = "Slurm reports a node failure (its slurmd stopped answering)";
    } else if (auto colon = rest.find(": task "); colon != std::string_view::npos) {
      host = rest.substr(0, colon);
      why = fmt::format("its agent, srun says: {}", rest.substr(colon + 2));
    }
    for (const auto& n : nodes_) {
      if (host.empty() || n.host != host) continue;
      // Said at once, and not only through the job's abort: when Slurm itself cancels the step
      // for a failed node, its SIGTERM to the other agents may abort the job, and end the head's
      // watch, before srun reports the node.
      fmt::print(stderr, "mlrun: node {} ({}) lost: {}\n", n.node_rank, host, why);
      return report(n.node_rank, host, why);
    }
  }

  // The first loss, unless the job is over: the report and finish() are serialised, so a report
  // never reaches a server that finish()'s caller is about to destroy.
  void report(int node, const std::string& host, const std::string& why) {
    std::lock_guard lock(report_mutex_);
    if (closed_ || reported_ || !on_lost_) return;
    reported_ = true;
    on_lost_(node, host, why);
  }

  void watch() {
    StreamOutput out(StreamRoute{STDOUT_FILENO, "", -1, false}, 0);
    std::string partial;
    pollfd fds[2] = {{process_.stdout_fd, POLLIN, 0}, {process_.stderr_fd, POLLIN, 0}};
    char buf[16384];
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
      if (poll(fds, 2, -1) < 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
          if (i == 0) out.on_eof();
          if (i == 1 && !partial.empty()) on_stderr_line(partial);
          ::close(fds[i].fd);
          fds[i].fd = -1;
          continue;
        }
        if (i == 0) {
          out.on_data({buf, static_cast<std::size_t>(n)});
          continue;
        }
        partial.append(buf, static_cast<std::size_t>(n));
        for (auto nl = partial.find('\n'); nl != std::string::npos; nl = partial.find('\n')) {
          on_stderr_line(partial.substr(0, nl));
          partial.erase(0, nl + 1);
        }
      }
    }
    int status = 0;
    while (waitpid(process_.pid, &status, 0) < 0 && errno == EINTR) {
    }
    {
      std::lock_guard lock(mutex_);
      ended_ = true;
    }
    cv_.notify_all();
    std::string why =
        WIFSIGNALED(status)
            ? fmt::format("srun was killed by signal {}", WTERMSIG(status))
            : fmt::format("the agents' srun step ended with exit code {}", WEXITSTATUS(status));
    std::unique_lock lock(mutex_);
    if (cv_.wait_for(lock, kLostGrace, [this] { return over_.load(); })) return;
    lock.unlock();
    report(-1, "", why);
  }

  std::string srun_, scontrol_;
  std::chrono::milliseconds grace_{0};  // Each agent's, once KillWait is known.
  std::vector<AgentNode> nodes_;
  LostCallback on_lost_;
  SpawnedProcess process_;
  std::thread watch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> over_{false};
  std::atomic<bool> ended_{false};
  std::mutex report_mutex_;
  bool closed_ = false;    // Under report_mutex_.
  bool reported_ = false;  // Under report_mutex_.
};

}  // namespace

SlurmConfig read_slurm_config(BoundedChild& query, std::string& why) {
  BoundedRun r = query.wait();
  if (!r.error.empty() || r.timed_out || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
    why =
        fmt::format("scontrol show config failed{}: {}", r.timed_out ? " (no answer in 10 s)" : "",
                    !r.error.empty() ? r.error : r.err);
    return {};
  }
  return parse_slurm_config(r.out);
}

SlurmConfig parse_slurm_config(const std::string& text) {
  SlurmConfig c;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, line.find_first_of(" =")), value = line.substr(eq + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (key == "SLURM_VERSION") c.version = value.substr(0, value.find(' '));
    // "KillWait = 30 sec": the number before the unit; anything else keeps the default.
    if (int s = 0; key == "KillWait" &&
                   parse_integer(std::string_view(value).substr(0, value.find(' ')), s, 0)) {
      c.kill_wait = std::chrono::seconds(s);
    }
  }
  return c;
}

std::string refuse_slurm_version(const std::string& version) {
  if (version == "20.11.0" || version == "20.11.1" || version == "20.11.2") {
    return fmt::format(
        "Slurm {} is not supported: 20.11.0 to 20.11.2 give every step exclusive use of its "
        "CPUs, so the agents' srun step and any other srun in the job wait for each other (Open "
        "MPI issue 8378); upgrade to 20.11.3 or later, or use --hostfile/-H over SSH",
        version);
  }
  return "";
}

std::chrono::milliseconds grace_within_kill_wait(std::chrono::milliseconds wanted,
                                                 std::chrono::seconds kill_wait) {
  if (kill_wait.count() <= 0) return wanted;
  auto limit = std::max<std::chrono::milliseconds>(kill_wait - std::chrono::seconds(2),
                                                   std::chrono::milliseconds(kill_wait) / 2);
  return std::min(wanted, limit);
}

std::vector<std::string> srun_argv(const std::string& srun, const std::vector<AgentNode>& nodes,
                                   const std::vector<std::string>& agent) {
  std::string list;
  for (const auto& n : nodes) list += (list.empty() ? "" : ",") + n.host;
  std::vector<std::string> argv = {srun,
                                   fmt::format("--nodes={}", nodes.size()),
                                   fmt::format("--ntasks={}", nodes.size()),
                                   "--ntasks-per-node=1",
                                   "--nodelist=" + list,
                                   "--overlap",
                                   "--kill-on-bad-exit=1",
                                   "--mpi=none",
                                   "--cpu-bind=none",
                                   "--input=none",
                                   "--export=ALL"};
  argv.insert(argv.end(), agent.begin(), agent.end());
  return argv;
}

std::unique_ptr<Transport> make_slurm_transport(std::vector<std::string>& errors) {
  std::string srun, scontrol;
  try {
    srun = resolve_program("srun", path_env());
    scontrol = resolve_program("scontrol", path_env());
  } catch (const SpawnError& e) {
    errors.push_back(fmt::format("inside a Slurm allocation, but {}", e.what()));
    return nullptr;
  }
  return std::make_unique<SlurmTransport>(std::move(srun), std::move(scontrol));
}

std::chrono::milliseconds slurm_grace_from_head(const std::string& endpoint,
                                                const std::string& token,
                                                const std::string& job_id) {
  rendezvous::ClientOptions options;
  options.job_id = job_id;
  options.connect_timeout = std::chrono::seconds(10);
  options.defer_hello = true;  // the get follows at once
  auto c = rendezvous::Client::connect(endpoint, token, options);
  // The head publishes it once `scontrol show config` answered (10 s at most).
  std::string text = c.get(kSlurmGraceKey, std::chrono::seconds(30));
  long long ms = 0;
  if (!parse_integer(text, ms) || ms < 0) {
    throw std::runtime_error(
        fmt::format("{}={}: not a grace period in milliseconds", kSlurmGraceKey, text));
  }
  return std::chrono::milliseconds(ms);
}

AgentJob every_node_job(const AgentJob& job, const std::vector<AgentNode>& nodes) {
  AgentJob out = job;
  out.token.clear();
  out.node_rank = -1;
  out.nodes = nodes;
  return out;
}

}  // namespace mlrun::transport
