// The rendezvous client's typed operations: the key-value store, barriers, NCCL unique IDs,
// joins (trainer, node, elastic), heartbeats and abort. The connection they go through is
// client.cc (rendezvous/client_impl.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/client_impl.h"
#include "rendezvous/nccl_library.h"
#include "rendezvous/protocol.h"

namespace mlrun::rendezvous {

namespace {

// What the root publishes instead of an ID when it cannot make one, so that the members fail
// with its reason at once instead of timing out. Never 128 bytes long.
constexpr std::string_view kNcclErrorMarker = "mlrun-nccl-error: ";

}  // namespace

void Client::set(std::string_view key, std::string value) {
  impl_->check_key("set", key);
  impl_->check_value("set", key, value.size());
  impl_->call_for<EmptyReply>("set", key, Set{std::string(key), std::move(value)}, impl_->quick());
}

std::string Client::get(std::string_view key) {
  return get(key, impl_->options.timeout);
}

std::string Client::get(std::string_view key, milliseconds timeout) {
  impl_->check_key("get", key);
  return impl_
      ->call_for<ValueReply>("get", key, Get{std::string(key), to_wire_ms(timeout)},
                             Impl::blocking(timeout))
      .value;
}

std::optional<std::string> Client::try_get(std::string_view key) {
  impl_->check_key("get", key);
  auto payload =
      impl_->call("get", key, Get{std::string(key), 0}, impl_->quick(), Status::kNotFound);
  if (!payload) return std::nullopt;
  ValueReply body;
  if (!parse_reply(*payload, body)) {
    impl_->drop("bad reply");
    throw ProtocolError("get", printable(key), impl_->endpoint, "malformed reply payload");
  }
  return std::move(body.value);
}

std::int64_t Client::add(std::string_view key, std::int64_t delta) {
  impl_->check_key("add", key);
  return impl_->call_for<AddReply>("add", key, Add{std::string(key), delta}, impl_->quick()).value;
}

std::string Client::compare_set(std::string_view key, std::string_view expected,
                                std::string desired) {
  impl_->check_key("compare_set", key);
  impl_->check_value("compare_set", key, std::max(expected.size(), desired.size()));
  return impl_
      ->call_for<CompareSetReply>(
          "compare_set", key,
          CompareSet{std::string(key), std::string(expected), std::move(desired)}, impl_->quick())
      .value;
}

void Client::wait(const std::vector<std::string>& keys) {
  wait(keys, impl_->options.timeout);
}

void Client::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::string subject = keys.empty() ? "" : keys.front();
  if (keys.size() > 1) subject += fmt::format(" and {} more", keys.size() - 1);
  if (keys.size() > kMaxKeysPerWait) {
    throw Error("wait", subject, impl_->endpoint,
                fmt::format("{} keys is over kMaxKeysPerWait ({})", keys.size(), kMaxKeysPerWait));
  }
  for (const auto& k : keys) impl_->check_key("wait", k);
  impl_->call_for<EmptyReply>("wait", subject, Wait{keys, to_wire_ms(timeout)},
                              Impl::blocking(timeout));
}

bool Client::remove(std::string_view key) {
  impl_->check_key("delete", key);
  return impl_->call_for<DeleteReply>("delete", key, Delete{std::string(key)}, impl_->quick())
      .existed;
}

void Client::barrier(std::string_view name) {
  if (impl_->world_size < 1) {
    throw Error("barrier", printable(name), impl_->endpoint,
                "the world size is unknown: set WORLD_SIZE, call join(), or pass a count");
  }
  barrier(name, impl_->world_size, impl_->options.timeout);
}

void Client::barrier(std::string_view name, int count, milliseconds timeout) {
  impl_->check_key("barrier", name);
  if (count < 1 || static_cast<std::uint32_t>(count) > kMaxGroupSize) {
    throw Error("barrier", printable(name), impl_->endpoint,
                fmt::format("count {} is outside [1, kMaxGroupSize]", count));
  }
  impl_->call_for<EmptyReply>(
      "barrier", name,
      proto::Barrier{impl_->scoped("barrier", name), static_cast<std::uint32_t>(count),
                     to_wire_ms(timeout)},
      Impl::blocking(timeout));
}

std::array<char, 128> Client::nccl_unique_id(std::string_view name) {
  if (impl_->rank < 0) {
    throw Error("nccl_unique_id", printable(name), impl_->endpoint,
                "the rank is unknown: set RANK, call join(), or say who the root is");
  }
  return nccl_unique_id(name, impl_->rank == 0, impl_->options.timeout);
}

std::array<char, 128> Client::nccl_unique_id(std::string_view name, bool is_root,
                                             milliseconds timeout) {
  std::string key = impl_->scoped("nccl", name);
  impl_->check_key("nccl_unique_id", key);
  std::string value;
  if (is_root) {
    // Idempotent per generation: a second call returns the ID already published (its
    // bootstrap root is already running in this process).
    if (auto existing = try_get(key); existing && existing->size() == 128) {
      value = std::move(*existing);
    } else {
      // Through dlopen, no link-time dependency on NCCL; the library stays loaded for the life
      // of the process: the ID's bootstrap root is a thread inside NCCL.
      const NcclLibrary& nccl = NcclLibrary::resident();
      auto get_unique_id = nccl.function<int (*)(void*)>("ncclGetUniqueId");
      std::array<char, 128> id{};
      std::string failure = nccl.error();
      if (failure.empty() && get_unique_id == nullptr) failure = nccl.missing("ncclGetUniqueId");
      if (failure.empty()) {
        if (int rc = get_unique_id(id.data()); rc != 0) {
          failure = fmt::format("ncclGetUniqueId failed ({}): {}", rc, nccl.describe(rc));
        }
      }
      if (!failure.empty()) {
        // Tell the members, so they fail with the reason instead of a timeout.
        compare_set(key, "", std::string(kNcclErrorMarker) + failure);
        throw Error("nccl_unique_id", printable(name), impl_->endpoint, failure);
      }
      value = compare_set(key, "", std::string(id.data(), id.size()));
    }
  } else {
    value = get(key, timeout);
  }
  if (value.size() != 128) {
    std::string detail =
        value.starts_with(kNcclErrorMarker)
            ? "the root could not make the ID: " + value.substr(kNcclErrorMarker.size())
            : fmt::format("the stored ID is {} bytes, not 128", value.size());
    throw Error("nccl_unique_id", printable(name), impl_->endpoint, detail);
  }
  std::array<char, 128> id;
  std::copy(value.begin(), value.end(), id.begin());
  return id;
}

void Client::heartbeat() {
  impl_->call_for<EmptyReply>("heartbeat", "", Heartbeat{}, impl_->quick());
}

void Client::abort(std::string_view reason) {
  if (reason.size() > kMaxMessageBytes) reason = reason.substr(0, kMaxMessageBytes);
  impl_->call_for<EmptyReply>("abort", "", Abort{std::string(reason)}, impl_->quick());
}

int Client::join(int world_size) {
  return join(world_size, impl_->options.timeout);
}

int Client::join(int world_size, milliseconds timeout) {
  return join(world_size, -1, timeout);
}

int Client::join(int world_size, int rank, milliseconds timeout) {
  std::string group = impl_->scoped("join", "trainer");
  if (world_size < 1 || static_cast<std::uint32_t>(world_size) > kMaxGroupSize) {
    throw Error("join", group, impl_->endpoint,
                fmt::format("world size {} is outside [1, kMaxGroupSize]", world_size));
  }
  if (rank < -1 || rank >= world_size) {
    throw Error("join", group, impl_->endpoint,
                fmt::format("rank {} is outside [0, {}) (or -1 for join order)", rank, world_size));
  }
  auto reply = impl_->call_for<JoinReply>(
      "join", group,
      Join{group, static_cast<std::uint32_t>(world_size), rank, 1, to_wire_ms(timeout)},
      Impl::blocking(timeout));
  impl_->rank = static_cast<int>(reply.index);
  impl_->world_size = static_cast<int>(reply.size);
  return impl_->rank;
}

NodeAssignment Client::join_node(int nnodes, int local_world_size, int node_rank) {
  return join_node(nnodes, local_world_size, node_rank, impl_->options.timeout);
}

NodeAssignment Client::join_node(int nnodes, int local_world_size, int node_rank,
                                 milliseconds timeout) {
  std::string group = impl_->scoped("join", "nodes");
  if (nnodes < 1 || static_cast<std::uint32_t>(nnodes) > kMaxGroupSize || local_world_size < 1 ||
      static_cast<std::uint32_t>(local_world_size) > kMaxJoinWeight || node_rank < -1 ||
      node_rank >= nnodes) {
    throw Error("join_node", group, impl_->endpoint,
                fmt::format("bad arguments: nnodes {}, local world size {}, node rank {}", nnodes,
                            local_world_size, node_rank));
  }
  auto reply = impl_->call_for<JoinReply>(
      "join_node", group,
      Join{group, static_cast<std::uint32_t>(nnodes), node_rank,
           static_cast<std::uint32_t>(local_world_size), to_wire_ms(timeout)},
      Impl::blocking(timeout));
  if (reply.total > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    throw ProtocolError("join_node", group, impl_->endpoint, "world size does not fit an int");
  }
  NodeAssignment a{static_cast<int>(reply.index), static_cast<int>(reply.size),
                   static_cast<int>(reply.offset), static_cast<int>(reply.total)};
  impl_->node_rank = a.node_rank;
  impl_->local_world_size = local_world_size;
  impl_->world_size = a.world_size;
  return a;
}

ElasticAssignment Client::join_elastic(std::string_view group, const ElasticJoinOptions& o) {
  std::string name(group);
  impl_->check_key("join_elastic", name);
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes ||
      static_cast<std::uint32_t>(o.max_nodes) > kMaxGroupSize || o.local_world_size < 1 ||
      static_cast<std::uint32_t>(o.local_world_size) > kMaxJoinWeight || o.member.empty() ||
      o.member.size() > kMaxMemberBytes || o.preferred_rank < -1 ||
      o.preferred_rank >= o.max_nodes) {
    throw Error("join_elastic", name, impl_->endpoint,
                fmt::format("bad arguments: nodes {}:{}, local world size {}, member of {} bytes, "
                            "preferred rank {}",
                            o.min_nodes, o.max_nodes, o.local_world_size, o.member.size(),
                            o.preferred_rank));
  }
  ElasticJoin request{name,
                      o.member,
                      static_cast<std::uint32_t>(o.min_nodes),
                      static_cast<std::uint32_t>(o.max_nodes),
                      o.preferred_rank,
                      static_cast<std::uint32_t>(o.local_world_size),
                      to_wire_ms(o.last_call),
                      to_wire_ms(o.heartbeat_timeout),
                      to_wire_ms(o.timeout)};
  auto reply = impl_->call_for<ElasticJoinReply>("join_elastic", name, std::move(request),
                                                 Impl::blocking(o.timeout));
  if (reply.total > static_cast<std::uint64_t>(std::numeric_limits<int>::max()) ||
      reply.round > static_cast<std::uint32_t>(std::numeric_limits<int>::max())) {
    throw ProtocolError("join_elastic", name, impl_->endpoint, "a count does not fit an int");
  }
  ElasticAssignment a;
  a.round = static_cast<int>(reply.round);
  a.node = NodeAssignment{static_cast<int>(reply.index), static_cast<int>(reply.size),
                          static_cast<int>(reply.offset), static_cast<int>(reply.total)};
  std::size_t start = 0;
  while (start < reply.members.size()) {
    std::size_t end = reply.members.find('\n', start);
    if (end == std::string::npos) end = reply.members.size();
    a.members.push_back(reply.members.substr(start, end - start));
    start = end + 1;
  }
  impl_->node_rank = a.node.node_rank;
  impl_->local_world_size = o.local_world_size;
  impl_->world_size = a.node.world_size;
  return a;
}

void Client::heartbeat(std::string_view group, std::string_view member) {
  impl_->check_key("heartbeat", group);
  if (member.empty() || member.size() > kMaxMemberBytes) {
    throw Error("heartbeat", printable(group), impl_->endpoint, "bad member id");
  }
  impl_->call_for<EmptyReply>(
      "heartbeat", group, MemberHeartbeat{std::string(group), std::string(member)}, impl_->quick());
}

void Client::node_heartbeat(std::string_view who, std::chrono::milliseconds timeout) {
  if (who.empty() || who.size() > kMaxMemberBytes) {
    throw Error("node heartbeat", printable(who), impl_->endpoint, "bad node name");
  }
  auto ms = std::clamp<std::int64_t>(timeout.count(), 1, UINT32_MAX);
  impl_->call_for<EmptyReply>("node heartbeat", who,
                              NodeHeartbeat{std::string(who), static_cast<std::uint32_t>(ms)},
                              impl_->quick());
}

void Client::node_watch(bool close_is_loss) {
  impl_->call_for<EmptyReply>("node watch", "",
                              NodeWatch{static_cast<std::uint8_t>(close_is_loss ? 1 : 0)},
                              impl_->quick());
}

}  // namespace mlrun::rendezvous
