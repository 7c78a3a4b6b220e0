// A job on every node of --hostfile / -H or of the Slurm allocation, started from this host (the
// head): the rendezvous is served here and every other node gets an agent through a transport
// (transport/transport.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "launcher/options.h"
#include "launcher/plan.h"
#include "transport/transport.h"
#include "worker/lifeline.h"

namespace mlrun {

/// Makes the transport to the nodes that get an agent, before anything starts; may shorten
/// *grace (each agent's grace period: Slurm's kill wait bounds it). Returns nullptr, its errors
/// printed, when a node cannot be reached; nullptr is fine when nodes is empty.
using OpenTransport = std::function<std::unique_ptr<transport::Transport>(
    const Options& o, const std::vector<transport::AgentNode>& nodes,
    std::chrono::milliseconds* grace)>;

/// Runs the job on every node of the plan from here, through the transport the options choose
/// (SSH, Slurm, the sim's local agents); returns the exit code.
int launch_on_hosts(const Options& o, LaunchPlan& plan, Lifeline& lifeline);

/// The same with the transport as a parameter (a unit test passes a fake whose agents are
/// threads of the test: launcher/head_launch_test.cc): serves the rendezvous, starts an agent on
/// every node that is not this host (a lost agent aborts the job naming its node), runs this
/// host's workers when it is listed or else watches the job, then finishes the transport.
/// Returns the job's exit code: 0, the first failed worker's code, 130 after SIGINT, 1 when
/// aborted, 2 when this process may not open the descriptors the job needs (nothing starts).
int launch_on_hosts(const Options& o, LaunchPlan& plan, Lifeline& lifeline,
                    const OpenTransport& open_transport);

/// What this process holds besides a job's connections and pipes: its open descriptors now
/// (inherited ones too) and a margin for the listeners and the event loop (docs/scale.md,
/// "Descriptors").
std::size_t descriptors_besides();

/// Raises this process's open-file soft limit to the hard limit; when that is still below need,
/// says so (the nodes, the need and what it is besides the nodes' connections, the limit and how
/// to raise it) and returns false.
bool descriptor_limit_allows(std::size_t need, std::size_t nodes, std::string_view besides);

/// --dry-run of such a job: every node, its ranks and how it is reached.
void print_host_plan(const Options& o, const LaunchPlan& plan);

}  // namespace mlrun
