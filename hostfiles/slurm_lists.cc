#include "hostfiles/slurm_lists.h"

#include <fmt/format.h>

#include "hostfiles/host_syntax.h"
#include "hostfiles/hostfile.h"

namespace mlrun {

using hostfiles_detail::parse_count;
using hostfiles_detail::split_outside_brackets;

std::vector<std::string> expand_slurm_hostlist(std::string_view list, std::string* error) {
  std::vector<std::string> names;
  if (list.empty()) {
    *error = "empty host list";
    return {};
  }
  for (std::string_view item : split_outside_brackets(list, ',')) {
    std::string why;
    std::vector<std::string> expanded;
    // expand_hosts checks each name as a hostfile's are checked: no byte that could become a
    // flag or a shell word, since these names go into srun's --nodelist.
    if (item.empty()) {
      why = "empty item";
    } else if (!hostfiles_detail::expand_hosts(item, false, &expanded, &why)) {
      expanded.clear();
    }
    if (!why.empty()) {
      *error = fmt::format("'{}': {}", item, why);
      return {};
    }
    if (names.size() + expanded.size() > kMaxRangeExpansion) {
      *error =
          fmt::format("'{}': the list stands for more than {} hosts", list, kMaxRangeExpansion);
      return {};
    }
    for (auto& name : expanded) names.push_back(std::move(name));
  }
  return names;
}

std::vector<int> expand_slurm_counts(std::string_view text, std::string* error) {
  std::vector<int> counts;
  if (text.empty()) {
    *error = "empty list of counts";
    return {};
  }
  for (std::string_view item : split_outside_brackets(text, ',')) {
    std::string_view value = item, repeat = "1";
    if (auto open = item.find('('); open != std::string_view::npos) {
      if (item.size() < open + 4 || item.substr(open, 2) != "(x" || item.back() != ')') {
        *error = fmt::format("'{}': expected N or N(xR)", item);
        return {};
      }
      value = item.substr(0, open);
      repeat = item.substr(open + 2, item.size() - open - 3);
    }
    int n = 0, times = 0;
    std::string why;
    if (!parse_count(value, 0, &n, &why)) {
      *error = fmt::format("'{}': count {}", item, why);
      return {};
    }
    if (!parse_count(repeat, 1, &times, &why)) {
      *error = fmt::format("'{}': repeat count {}", item, why);
      return {};
    }
    if (counts.size() + static_cast<std::size_t>(times) > kMaxSlurmCounts) {
      *error = fmt::format("'{}' stands for more than {} counts", text, kMaxSlurmCounts);
      return {};
    }
    counts.insert(counts.end(), static_cast<std::size_t>(times), n);
  }
  return counts;
}

}  // namespace mlrun
