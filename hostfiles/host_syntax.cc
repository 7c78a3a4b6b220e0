#include "hostfiles/host_syntax.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "hostfiles/hostfile.h"
#include "rendezvous/integer.h"

namespace mlrun::hostfiles_detail {
namespace {

constexpr std::size_t kMaxHostNameLength = 253;  // RFC 1035, without the trailing dot.

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// A name goes into ssh's argv: one starting with '-' would be read as an option, so it is
// refused here rather than trusted to a "--" later.
bool check_name(std::string_view name, std::string* error) {
  if (name.empty()) {
    *error = "empty host";
    return false;
  }
  if (name.size() > kMaxHostNameLength) {
    *error = fmt::format("host name longer than {} characters", kMaxHostNameLength);
    return false;
  }
  for (char c : name) {
    if (!is_name_char(c)) {
      *error = std::isprint(static_cast<unsigned char>(c))
                   ? fmt::format("'{}' is not allowed in a host name", c)
                   : fmt::format("byte 0x{:02x} is not allowed in a host name",
                                 static_cast<unsigned char>(c));
      return false;
    }
  }
  if (name.front() == '-' || name.front() == '.') {
    *error = fmt::format("a host name cannot start with '{}'", name.front());
    return false;
  }
  if (name.find("..") != std::string_view::npos) {
    *error = "empty label '..' in host name";
    return false;
  }
  if (name.find_first_not_of("0123456789.") == std::string_view::npos) {
    in_addr addr;
    if (inet_pton(AF_INET, std::string(name).c_str(), &addr) != 1) {
      *error = "bad IPv4 address";
      return false;
    }
  }
  return true;
}

}  // namespace

bool canonical_ipv6(std::string_view text, std::string* out, std::string* error) {
  std::string_view address = text, zone;
  if (auto percent = text.find('%'); percent != std::string_view::npos) {
    address = text.substr(0, percent);
    zone = text.substr(percent + 1);
    if (zone.empty() || !std::all_of(zone.begin(), zone.end(), is_name_char)) {
      *error = fmt::format("bad IPv6 zone '%{}'", zone);
      return false;
    }
  }
  in6_addr addr;
  char buffer[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET6, std::string(address).c_str(), &addr) != 1 ||
      inet_ntop(AF_INET6, &addr, buffer, sizeof buffer) == nullptr) {
    *error = "bad IPv6 address";
    return false;
  }
  *out = buffer;
  if (!zone.empty()) *out += fmt::format("%{}", zone);
  return true;
}

bool split_host_suffix(std::string_view text, HostAndSuffix* out, std::string* error) {
  *out = {};
  if (!text.empty() && text.front() == '[' && text.find(':') != std::string_view::npos &&
      text.find(':') < text.find(']')) {
    auto close = text.find(']');
    if (close == std::string_view::npos) {
      *error = "'[' of an IPv6 address without ']'";
      return false;
    }
    out->host = text.substr(1, close - 1);
    out->ipv6 = true;
    std::string_view rest = text.substr(close + 1);
    if (rest.empty()) return true;
    if (rest.front() != ':') {
      *error = fmt::format("unexpected '{}' after ']'", rest);
      return false;
    }
    out->suffix = rest.substr(1);
    return true;
  }
  auto colons = std::count(text.begin(), text.end(), ':');
  if (colons >= 2) {  // A bare IPv6 address: its last group is not a slot count.
    out->host = text;
    out->ipv6 = true;
    return true;
  }
  auto colon = text.find(':');
  out->host = text.substr(0, colon);
  if (colon != std::string_view::npos) out->suffix = text.substr(colon + 1);
  return true;
}

bool expand_hosts(std::string_view host, bool ipv6, std::vector<std::string>* out,
                  std::string* error) {
  if (host.empty()) {
    *error = "empty host";
    return false;
  }
  if (ipv6) {
    std::string canonical;
    if (!canonical_ipv6(host, &canonical, error)) return false;
    out->push_back(std::move(canonical));
    return true;
  }
  std::string range_error;
  auto names = expand_ranges(host, &range_error);
  if (!range_error.empty()) {
    *error = fmt::format("bad range: {}", range_error);
    return false;
  }
  for (auto& name : names) {
    if (!check_name(name, error)) {
      if (names.size() > 1) *error = fmt::format("{} (in '{}')", *error, name);
      return false;
    }
  }
  for (auto& name : names) out->push_back(std::move(name));
  return true;
}

std::vector<std::string_view> split_outside_brackets(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']' && depth > 0) --depth;
    if (text[i] == separator && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(text.substr(start));
  return parts;
}

bool parse_count(std::string_view text, int minimum, int* out, std::string* why) {
  int value = 0;
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits) {
    *why = minimum > 0 ? "not a positive integer" : "not a non-negative integer";
    return false;
  }
  // Digits only: what parse_integer refuses is too large.
  if (!parse_integer(text, value, 0, kMaxSlotsPerHost)) {
    *why = fmt::format("more than the limit of {}", kMaxSlotsPerHost);
    return false;
  }
  if (value < minimum) {
    *why = minimum > 0 ? "not a positive integer" : "not a non-negative integer";
    return false;
  }
  *out = value;
  return true;
}

}  // namespace mlrun::hostfiles_detail
