#include "rendezvous/endpoint.h"

#include <fmt/format.h>

#include "rendezvous/integer.h"

namespace mlrun {

std::optional<Endpoint> parse_endpoint(std::string_view text) {
  Endpoint e;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    e.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    std::size_t colon = text.find(':');
    // No port, or more than one ':' (an IPv6 address needs brackets).
    if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos) {
      return std::nullopt;
    }
    e.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  // Digits only: parse_integer would take "-0".
  if (e.host.empty() || port.find_first_not_of("0123456789") != std::string_view::npos ||
      !parse_integer(port, e.port, 1, 65535)) {
    return std::nullopt;
  }
  return e;
}

bool split_endpoint(std::string_view text, std::string& host, int& port) {
  auto e = parse_endpoint(text);
  if (!e) return false;
  host = std::move(e->host);
  port = e->port;
  return true;
}

std::string make_endpoint(std::string_view host, int port) {
  return host.find(':') == std::string_view::npos ? fmt::format("{}:{}", host, port)
                                                  : fmt::format("[{}]:{}", host, port);
}

}  // namespace mlrun
