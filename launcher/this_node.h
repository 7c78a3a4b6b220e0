// This host's part of a job once its rendezvous is known: the same for a torchrun-style node,
// the head's own node of a multi-host launch and a node's agent (launcher/run.cc,
// launcher/launch_hosts.cc, launcher/agent_command.cc).
#pragma once

#include <functional>
#include <string>

#include "coordinator/node.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "worker/lifeline.h"

namespace mlrun {

/// Runs this node's workers in a job whose rendezvous is known (job: endpoint, token, job id,
/// nnodes, node rank); the rest of job comes from the plan. lifeline_fd: the head's lifeline
/// (an agent's stdin), -1 for none. gave_up, when set, gets the error that ends this node
/// before or outside its rendezvous (its log directory, its start), which nobody else would
/// hear of: the head's own node and an agent abort the job with it. Returns the exit code.
int run_this_node(const Options& o, const LaunchPlan& plan, NodeJob job, Lifeline& lifeline,
                  int lifeline_fd,
                  const std::function<void(const std::string&)>& gave_up = nullptr);

}  // namespace mlrun
