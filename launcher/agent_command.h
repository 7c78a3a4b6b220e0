// `mlrun agent`: one node of a job started by a head (launcher/launch_hosts.h), its job read from
// the one record a transport hands it (transport/agent_job.h).
#pragma once

#include <string>
#include <vector>

namespace mlrun {

/// Runs this node's part of the job; returns the exit code (2 for a bad job record).
int agent_command(const std::vector<std::string>& args);

}  // namespace mlrun
