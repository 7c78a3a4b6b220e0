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
  std::uint64_t world = world_size_ > 0 ? world_size_ : ranks;
  std::uint64_t tenths = world > 0 ? ranks * 10 / world : 0;
  bool first = joined == 1, last = joined >= size;
  if (!first && !last && tenths <= tenths_said_) return std::nullopt;
  tenths_said_ = std::max(tenths_said_, tenths);
  std::string attempt = generation == "0" ? "" : fmt::format(" (attempt {})", generation);
  return fmt::format("ranks joined {}/{}{}: {}/{} node{} after {:.2f} s", ranks, world, attempt,
                     joined, size, size == 1 ? "" : "s", log::since(began_));
}

}  // namespace mlrun
