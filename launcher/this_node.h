// This host's part of a job once its rendezvous is known: the same for a torchrun-style node,
// the head's own node of a multi-host launch and a node's agent (launcher/run.cc,
// launcher/launch_hosts.cc, launcher/agent_command.cc).
#pragma once

#include "coordinator/node.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "worker/lifeline.h"

namespace mlrun {

/// Runs this node's workers in a job whose rendezvous is known (job: endpoint, token, job id,
/// nnodes, node rank); the rest of job comes from the plan. lifeline_fd: the head's lifeline
/// (an agent's stdin), -1 for none. Returns the exit code.
int run_this_node(const Options& o, const LaunchPlan& plan, NodeJob job, Lifeline& lifeline,
                  int lifeline_fd);

}  // namespace mlrun
