// The simulation transport (--launcher sim, docs/scale.md): every node of --hostfile / -H gets a
// real `mlrun agent` started as a process on this machine instead of over SSH. Each agent goes by
// its node's host name (MLRUN_NODE_NAME), joins the head's real rendezvous server over TCP with
// real heartbeats, and starts its own workers; its stdin is its lifeline, as over SSH. So one
// machine can run a job of hundreds or thousands of nodes through the head's real code, for
// tests and benchmarks of the head and the server at scale.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "transport/transport.h"

namespace mlrun::transport {

/// Checks --launcher sim's preconditions (the nodes come from --hostfile or -H) and says why in
/// o.launcher_why. Returns the errors.
std::vector<std::string> choose_sim_launcher(Options& o);

/// The transport that starts each node's agent on this machine. Nothing is connected up front,
/// so it cannot fail here; a node whose agent cannot start is reported lost.
std::unique_ptr<Transport> make_local_transport(const std::vector<AgentNode>& nodes);

}  // namespace mlrun::transport
