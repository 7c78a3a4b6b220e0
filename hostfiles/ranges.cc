// Slurm-style host ranges: "node[01-04,07]".
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "hostfiles/hostfile.h"
#include "rendezvous/integer.h"

namespace mlrun {
namespace {

// Nine digits keep every bound inside an int64 sum without overflow checks.
constexpr std::size_t kMaxRangeDigits = 9;

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// One bracket group, as the text of each name it stands for.
bool expand_group(std::string_view body, std::vector<std::string>* out, std::string* error) {
  if (body.empty()) {
    *error = "empty range []";
    return false;
  }
  const std::string_view whole = body;
  std::uint64_t count = 0;
  struct Item {
    std::int64_t lo, hi;
    std::size_t width;
  };
  std::vector<Item> items;
  while (true) {
    auto comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    auto dash = item.find('-');
    std::string_view lo = item.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (item.empty()) {
      *error = fmt::format("empty item in [{}]", whole);
      return false;
    }
    if (!all_digits(lo) || !all_digits(hi)) {
      *error = fmt::format("'{}' is not a number or a range N-M", item);
      return false;
    }
    if (lo.size() > kMaxRangeDigits || hi.size() > kMaxRangeDigits) {
      *error = fmt::format("'{}' has more than {} digits", item, kMaxRangeDigits);
      return false;
    }
    std::int64_t a = 0, b = 0;  // Digits only, at most kMaxRangeDigits: both parse.
    parse_integer(lo, a);
    parse_integer(hi, b);
    if (a > b) {
      *error = fmt::format("{} runs backwards", item);
      return false;
    }
    count += static_cast<std::uint64_t>(b - a + 1);
    if (count > kMaxRangeExpansion) {
      *error = fmt::format("[{}] stands for more than {} hosts", whole, kMaxRangeExpansion);
      return false;
    }
    items.push_back({a, b, lo.size()});
    if (comma == std::string_view::npos) break;
    body.remove_prefix(comma + 1);
  }
  for (const Item& item : items) {
    for (std::int64_t n = item.lo; n <= item.hi; ++n) {
      out->push_back(fmt::format("{:0{}}", n, item.width));
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> expand_ranges(std::string_view pattern, std::string* error) {
  std::vector<std::string> names{""};
  std::size_t i = 0;
  while (i < pattern.size()) {
    char c = pattern[i];
    if (c == ']') {
      *error = "']' without '['";
      return {};
    }
    if (c != '[') {
      auto next = pattern.find_first_of("[]", i);
      std::string_view literal = pattern.substr(i, next - i);
      for (auto& name : names) name.append(literal);
      i = next == std::string_view::npos ? pattern.size() : next;
      continue;
    }
    auto close = pattern.find_first_of("[]", i + 1);
    if (close == std::string_view::npos || pattern[close] != ']') {
      *error = close == std::string_view::npos ? "'[' without ']'" : "nested '['";
      return {};
    }
    std::vector<std::string> values;
    if (!expand_group(pattern.substr(i + 1, close - i - 1), &values, error)) return {};
    if (names.size() * values.size() > kMaxRangeExpansion) {
      *error = fmt::format("stands for more than {} hosts", kMaxRangeExpansion);
      return {};
    }
    std::vector<std::string> product;
    product.reserve(names.size() * values.size());
    for (const auto& name : names) {
      for (const auto& value : values) product.push_back(name + value);
    }
    names = std::move(product);
    i = close + 1;
  }
  return names;
}

}  // namespace mlrun
