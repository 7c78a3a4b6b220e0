// The SSH transport: one libssh connection per host, the agent's job and token on its stdin,
// which then stays open as the agent's lifeline (launcher/head.h RemoteAgents does the work).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace mlrun::transport {

/// Connects to every node at once. On any failure returns nullptr with one line per
/// unreachable host in errors, and nothing is connected.
std::unique_ptr<Transport> connect_ssh(const std::vector<AgentNode>& nodes,
                                       std::chrono::milliseconds connect_timeout,
                                       std::vector<std::string>& errors);

}  // namespace mlrun::transport
