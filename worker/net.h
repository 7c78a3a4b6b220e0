// Small network facts of this node.
#pragma once

#include <string>

namespace mlrun {

/// A TCP port that is free on every local address right now (bound to port 0 and released).
/// Throws std::runtime_error when no socket can be bound.
int free_tcp_port();

/// This node's host name.
std::string host_name();

}  // namespace mlrun
