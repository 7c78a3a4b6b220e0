// Internal to hostfiles/: the pieces of host syntax that hostfiles, -H and --include/--exclude
// share.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlrun::hostfiles_detail {

/// A host token split at its suffix: "a:2" -> {a, "2"}, "[fe80::1]:2" -> {fe80::1, "2", ipv6},
/// "fe80::1" -> {fe80::1, none, ipv6} (a bare IPv6 address takes no suffix).
struct HostAndSuffix {
  std::string_view host;
  std::optional<std::string_view> suffix;
  bool ipv6 = false;
};

/// Splits text (no user@ part) at the ':' that starts its suffix; false with *error on a bad
/// bracket or trailing text after "]".
bool split_host_suffix(std::string_view text, HostAndSuffix* out, std::string* error);

/// Expands ranges in host and checks every name or address; appends the hosts (IPv6 in
/// canonical form) to *out. false with *error on the first bad one.
bool expand_hosts(std::string_view host, bool ipv6, std::vector<std::string>* out,
                  std::string* error);

/// "fe80:0::1%eth0" -> "fe80::1%eth0"; false with *error when inet_pton refuses the address.
bool canonical_ipv6(std::string_view text, std::string* out, std::string* error);

/// Splits "a,b[1-2,4],c" at the commas outside brackets.
std::vector<std::string_view> split_outside_brackets(std::string_view text, char separator);

/// A decimal integer of digits only in [minimum, kMaxSlotsPerHost]; false with *why otherwise.
bool parse_count(std::string_view text, int minimum, int* out, std::string* why);

}  // namespace mlrun::hostfiles_detail
