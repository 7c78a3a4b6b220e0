// The one parser and maker of "host:port" endpoints, for the client library and the launcher
// alike (docs/design.md, "Endpoints"): the rendezvous library links nothing of mlrun's, so the
// launcher uses this one.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mlrun {

/// A host and a TCP port, as an endpoint names them.
struct Endpoint {
  std::string host;  ///< A name, an IPv4 address or an IPv6 address (without brackets).
  int port = 0;      ///< 1-65535.
};

/// Parses "host:port" (host: a name or an IPv4 address, no ':') or "[v6]:port" (an IPv6
/// address in brackets). The port is 1-65535 in decimal digits only. Refused (nullopt): an
/// unbracketed IPv6 address ("::1:29500" is ambiguous: its last group may be the port), a host
/// without a port ("host", "host:"), an empty host ("[]:1", ":1"), anything after the port.
std::optional<Endpoint> parse_endpoint(std::string_view text);

/// parse_endpoint into host and port; false (both untouched) when it refuses text.
bool split_endpoint(std::string_view text, std::string& host, int& port);

/// "host:port", or "[v6]:port" for a host with a ':' (an IPv6 address): what parse_endpoint
/// reads back.
std::string make_endpoint(std::string_view host, int port);

}  // namespace mlrun
