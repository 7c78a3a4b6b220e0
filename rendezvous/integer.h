// The one parser of the integers mlrun reads from people, the environment and records (flags,
// hostfiles, Slurm's variables and output, the client library's variables). Header-only, so that
// every library may use it without linking another: the rendezvous library links nothing of
// mlrun's, and hostfiles/ links only fmt.
#pragma once

#include <charconv>
#include <limits>
#include <string_view>

namespace mlrun {

/// Parses all of s as a decimal integer of type T in [lo, hi]: digits, with a leading '-' for a
/// signed T, and nothing else (no '+', no spaces, nothing after). False, out untouched, for
/// anything else, out of T's range or of [lo, hi] included.
template <typename T>
bool parse_integer(std::string_view s, T& out, T lo = std::numeric_limits<T>::min(),
                   T hi = std::numeric_limits<T>::max()) {
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < lo || value > hi) {
    return false;
  }
  out = value;
  return true;
}

}  // namespace mlrun
