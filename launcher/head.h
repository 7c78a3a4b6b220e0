// The head of a job launched on several hosts from one command (--hostfile, -H): which host runs
// how many workers, and the agents it starts on the other hosts over SSH.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hostfiles/hostfile.h"
#include "launcher/options.h"
#include "transport/ssh_session.h"
#include "worker/network.h"

namespace mlrun {

/// One node of the job, in node-rank order.
struct NodePlan {
  HostEntry host;
  int nproc = 0;
  bool local = false;  ///< The head's own host: its workers start without SSH.
};

struct HostPlan {
  std::vector<NodePlan> nodes;
  std::vector<std::string> errors;  ///< Every user error, "file:line: what" where there is one.
};

/// Nodes from --hostfile or -H, --include / --exclude, -np (total ranks, filled host by host as
/// mpirun does) and --nproc_per_node (overrides every host's slots). is_local tells the head's
/// own host.
HostPlan plan_hosts(const Options& options,
                    const std::function<bool(const std::string&)>& is_local);

/// Whether host names this machine: localhost, a loopback address, its host name, or one of
/// its interface addresses (this_host_interfaces).
bool is_local_host(const std::string& host);

/// This host's network interfaces, read at the first call and kept for the process. A launch
/// asks three times (is_local_host for each host, the plan's interface choice, and the head's
/// choice again once SSH has connected), and each reading walks every interface's files in /sys:
/// on a head with an interface per container or host (veths) that is most of its planning.
const std::vector<NetInterface>& this_host_interfaces();

/// Reports of lost agents to the job, up to the job's end. The relay thread reports; the head
/// closes it when the job is over, before the callback's target (the rendezvous server) stops.
/// A report and close() are serialised: close() waits for a report in progress, and once it has
/// returned no report runs or starts. So a loss seen before the job's end is handled and one seen
/// after it is ignored, whichever thread gets there first.
class LossReports {
 public:
  using Callback =
      std::function<void(int node_rank, const std::string& host, const std::string& why)>;
  explicit LossReports(Callback on_lost = nullptr) : on_lost_(std::move(on_lost)) {}

  /// Calls the callback unless closed (on this thread, under the lock); returns whether it did.
  bool report(int node_rank, const std::string& host, const std::string& why);
  /// The job is over: waits for a report in progress, then refuses every later one.
  void close();
  bool closed() const;

 private:
  mutable std::mutex mutex_;
  bool closed_ = false;
  Callback on_lost_;
};

/// One started agent as the relay sees it: an SSH command (RemoteCommand), or a process on this
/// machine for a simulated node (transport/local.h). The same relay, loss reports and teardown
/// serve both, so a simulation exercises the head's real code.
class AgentProcess {
 public:
  virtual ~AgentProcess() = default;
  /// As RemoteCommand's: output pipes' read ends (non-blocking, owned by this object), and a
  /// descriptor that becomes readable for good once the agent has ended.
  virtual int stdout_fd() const = 0;
  virtual int stderr_fd() const = 0;
  virtual int done_fd() const = 0;
  /// Blocks until the agent has ended; repeatable.
  virtual RemoteExit wait() = 0;
  /// Ends the agent's stdin, its lifeline: it stops its workers and exits. Idempotent.
  virtual void stop() = 0;
  /// For an agent that has not ended in the time it was given: stop(), and from then on its
  /// output and its end are not watched (its descriptors read -1, wait() returns at once). Over
  /// SSH stop() is that already (the channel's close); an agent on this machine is left to its
  /// lifeline, as a remote one is (transport/local.cc).
  virtual void abandon() { stop(); }
};

/// The agents on remote hosts: started over SSH in parallel, their output relayed to this
/// process's stdout and stderr line by line, and watched: an agent that ends before the job does
/// is reported to on_lost (from the relay thread).
class RemoteAgents {
 public:
  struct Agent {
    int node_rank;
    std::string command;  ///< The remote command line (no secret in it).
    std::string payload;  ///< Its stdin: the job description and the token.
  };
  /// A host to start an agent on, and the node it will be.
  struct Target {
    HostEntry host;
    int node_rank;
  };
  using LostCallback = LossReports::Callback;
  /// Starts the agent of hosts[index] (start() calls it in order, on its own thread).
  using Launch = std::function<std::unique_ptr<AgentProcess>(std::size_t index, Agent agent)>;

  /// Connects to every agent's host at once and runs command (no secret in it) on each right
  /// after its own connect, its stdin held back: start() hands each its payload. So the remote
  /// login shells and agent starts overlap the slowest connect. On any failure every agent's
  /// stdin ends before it was handed anything (it exits without starting anything; this waits,
  /// bounded, for that), nothing is connected, and every failure is in errors, one line per host.
  static std::unique_ptr<RemoteAgents> connect(const std::vector<Target>& targets,
                                               const std::string& command,
                                               std::chrono::milliseconds connect_timeout,
                                               std::vector<std::string>& errors);
  /// Agents on hosts started by launch, through the transport named (in debug lines);
  /// local_address is what local_address() returns.
  static std::unique_ptr<RemoteAgents> make(std::string transport, std::vector<std::string> hosts,
                                            Launch launch, std::string local_address);
  /// This machine's address as the first host sees it.
  std::string local_address() const;
  /// Starts the agents, in the order of connect()'s hosts (over SSH: hands each its payload; its
  /// command is connect()'s, already running).
  void start(std::vector<Agent> agents, LostCallback on_lost);
  ~RemoteAgents();

  /// The job is over: agents that end from now on are not lost, and once this has begun no
  /// on_lost call is in progress or starts (see LossReports). Waits up to bound for every agent
  /// to exit by itself, then closes the connections of the rest.
  void finish(std::chrono::milliseconds bound);

  struct State;

 private:
  explicit RemoteAgents(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace mlrun
