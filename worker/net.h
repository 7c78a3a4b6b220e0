// Small network facts of this node.
#pragma once

#include <string>
#include <utility>
#include <vector>

// make_endpoint and split_endpoint: the one endpoint parser, the client library's too.
#include "rendezvous/endpoint.h"

namespace mlrun {

/// A TCP port that is free on every local address right now, for a server another process
/// binds next (rank 0's TCPStore on MASTER_PORT): a random one below the kernel's ephemeral
/// range (from 20000), which outgoing connections never take, else one the kernel picks.
/// Throws std::runtime_error when no socket can be bound.
int free_tcp_port();

/// The kernel's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range), else Linux's
/// default 32768-60999.
std::pair<int, int> ephemeral_port_range();

/// This host's name (gethostname), or MLRUN_NODE_NAME when set: the name a simulated node
/// goes by (--launcher sim, transport/local.h).
std::string host_name();

}  // namespace mlrun

namespace mlrun {

/// The local address this node uses to reach host (a name or an address): the source address
/// of a route to it (a UDP "connect", no packet sent). Throws std::runtime_error naming host.
std::string local_address_toward(const std::string& host);

/// Every numeric address host (a name or an address) resolves to, in getaddrinfo's order;
/// family AF_INET for IPv4 only. Empty when it does not resolve.
std::vector<std::string> numeric_addresses(const std::string& host, int family);

/// True when host is a numeric address of one of this node's interfaces (it can be bound).
bool is_local_address(const std::string& host);

}  // namespace mlrun
