#include "launcher/join_progress.h"

#include <algorithm>

#include <fmt/format.h>

#include "worker/log.h"

namespace mlrun {

std::optional<std::string> JoinProgress::on_join(std::string_view group, std::uint32_t joined,
                                                 std::uint32_t size, std::uint64_t ranks) {
  constexpr std::string_view kPrefix = "mlrun/join/g", kSuffix = "/nodes";
  if (!group.starts_with(kPrefix) || !group.ends_with(kSuffix)) return std::nullopt;
  std::string_view generation =
      group.substr(kPrefix.size(), group.size() - kPrefix.size() - kSuffix.size());
  if (group != group_) {
    group_ = group;
    tenths_said_ = 0;
  }
  // The world is unknown to a head whose nodes each count their own GPUs (Slurm): the count
  // goes by tenths of the nodes, and says its ranks without a total until the last node.
  const bool known = world_size_ > 0;
  std::uint64_t tenths = known ? ranks * 10 / world_size_
                               : std::uint64_t{joined} * 10 / std::max<std::uint32_t>(size, 1);
  bool first = joined == 1, last = joined >= size;
  if (!first && !last && tenths <= tenths_said_) return std::nullopt;
  tenths_said_ = std::max(tenths_said_, tenths);
  std::string count = known  ? fmt::format("{}/{}", ranks, world_size_)
                      : last ? fmt::to_string(ranks)
                             : fmt::format("{} so far", ranks);
  std::string attempt = generation == "0" ? "" : fmt::format(" (attempt {})", generation);
  return fmt::format("ranks joined {}{}: {}/{} node{} after {:.2f} s", count, attempt, joined, size,
                     size == 1 ? "" : "s", log::since(began_));
}

}  // namespace mlrun
