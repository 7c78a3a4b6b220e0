// DeepSpeed's --include / --exclude: "host1:0,1@host2".
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "hostfiles/host_syntax.h"
#include "hostfiles/hostfile.h"

namespace mlrun {
namespace {

using namespace hostfiles_detail;

std::vector<int> available_slots(const HostEntry& host) {
  if (!host.slot_ids.empty()) return host.slot_ids;
  std::vector<int> all(static_cast<std::size_t>(host.slots));
  for (int i = 0; i < host.slots; ++i) all[static_cast<std::size_t>(i)] = i;
  return all;
}

std::string describe(const std::vector<int>& slots) {
  if (slots.empty()) return "none";
  bool contiguous = slots.back() - slots.front() + 1 == static_cast<int>(slots.size());
  if (contiguous) return fmt::format("{}-{}", slots.front(), slots.back());
  return fmt::format("{}", fmt::join(slots, ","));
}

}  // namespace

SlotFilter parse_slot_filter(std::string_view spec, std::string_view flag_name,
                             std::vector<HostfileError>* errors) {
  SlotFilter filter;
  auto error = [&](std::string message) {
    errors->push_back({std::string(flag_name), 0, std::move(message)});
  };
  if (spec.find_first_not_of(" \t") == std::string_view::npos) {
    error("empty filter");
    return filter;
  }
  for (std::string_view node : split_outside_brackets(spec, '@')) {
    if (node.empty()) {
      error("empty host (a stray '@'; a user@ prefix is not allowed here)");
      continue;
    }
    std::string why;
    HostAndSuffix split;
    std::vector<std::string> hosts;
    if (!split_host_suffix(node, &split, &why) ||
        !expand_hosts(split.host, split.ipv6, &hosts, &why)) {
      error(fmt::format("'{}': {}", node, why));
      continue;
    }
    std::vector<int> slots;
    bool ok = true;
    if (split.suffix) {
      if (split.suffix->empty()) {
        error(fmt::format("'{}': empty slot list after ':'", node));
        continue;
      }
      for (std::string_view index : split_outside_brackets(*split.suffix, ',')) {
        int slot = 0;
        if (!parse_count(index, 0, &slot, &why)) {
          error(fmt::format("'{}': slot '{}': {}", node, index, why));
          ok = false;
          continue;
        }
        slots.push_back(slot);
      }
    }
    if (!ok) continue;
    for (auto& host : hosts) filter.items.push_back({std::move(host), slots});
  }
  return filter;
}

HostList apply_include_exclude(std::vector<HostEntry> hosts, std::string_view include,
                               std::string_view exclude) {
  HostList result;
  if (include.empty() && exclude.empty()) {
    result.hosts = std::move(hosts);
    return result;
  }
  if (!include.empty() && !exclude.empty()) {
    result.errors.push_back({"--include", 0, "cannot be combined with --exclude"});
    return result;
  }
  const bool including = !include.empty();
  const std::string_view flag = including ? "--include" : "--exclude";
  SlotFilter filter = parse_slot_filter(including ? include : exclude, flag, &result.errors);

  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < hosts.size(); ++i) index.emplace(host_key(hosts[i].host), i);

  // By index into hosts: the slots the filter names, and the hosts it names whole.
  std::map<std::size_t, std::set<int>> named;
  std::set<std::size_t> whole;
  for (const auto& item : filter.items) {
    auto it = index.find(host_key(item.host));
    if (it == index.end()) {
      result.errors.push_back(
          {std::string(flag), 0, fmt::format("'{}': not in the host list", item.host)});
      continue;
    }
    const HostEntry& host = hosts[it->second];
    if (item.slots.empty()) {
      whole.insert(it->second);
      continue;
    }
    auto available = available_slots(host);
    for (int slot : item.slots) {
      if (!std::binary_search(available.begin(), available.end(), slot)) {
        result.errors.push_back({std::string(flag), 0,
                                 fmt::format("'{}': slot {} out of range: {} has slots {}",
                                             item.host, slot, item.host, describe(available))});
        continue;
      }
      named[it->second].insert(slot);
    }
  }
  if (!result.errors.empty()) return result;

  for (std::size_t i = 0; i < hosts.size(); ++i) {
    HostEntry& host = hosts[i];
    auto available = available_slots(host);
    std::vector<int> keep;
    if (including) {
      if (whole.count(i)) {
        keep = available;
      } else if (named.count(i)) {
        keep.assign(named[i].begin(), named[i].end());
      }
    } else if (!whole.count(i)) {
      for (int slot : available) {
        if (!named.count(i) || !named[i].count(slot)) keep.push_back(slot);
      }
    }
    if (keep.empty()) continue;
    if (keep != available || !host.slot_ids.empty()) {
      host.slots = static_cast<int>(keep.size());
      host.slot_ids = std::move(keep);
    }
    result.hosts.push_back(std::move(host));
  }
  if (result.hosts.empty()) {
    result.errors.push_back({std::string(flag), 0, "leaves no host to run on"});
  }
  return result;
}

}  // namespace mlrun
