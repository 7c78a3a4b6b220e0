// A job on every node of --hostfile / -H or of the Slurm allocation, started from this host (the
// head): the rendezvous is served here and every other node gets an agent through a transport
// (transport/transport.h).
#pragma once

#include "launcher/options.h"
#include "launcher/plan.h"
#include "worker/lifeline.h"

namespace mlrun {

/// Runs the job on every node of the plan from here; returns the exit code.
int launch_on_hosts(const Options& o, LaunchPlan& plan, Lifeline& lifeline);

/// --dry-run of such a job: every node, its ranks and how it is reached.
void print_host_plan(const Options& o, const LaunchPlan& plan);

}  // namespace mlrun
