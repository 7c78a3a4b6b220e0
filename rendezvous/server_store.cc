// The rendezvous server: the key-value store, barriers, joins, and held (blocking) requests
// with their timeouts. See server_impl.h for how the server's source files divide it.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "rendezvous/server_impl.h"

namespace mlrun::rendezvous {
namespace {

// A held request's part of the waiter lists, barriers and join groups beyond its name: the
// set or map entries that point at its connection, the group's claimed index, the timer.
constexpr std::size_t kHeldEntryBytes = 4 * hash_entry_bytes(2 * sizeof(void*)) + 128;
// A finished join group's record in finished_groups_.
constexpr std::size_t kFinishedGroupBytes = hash_entry_bytes(sizeof(std::uint64_t));

std::uint64_t group_hash(const std::string& name) {
  return std::hash<std::string>{}(name);
}

}  // namespace

std::string ServerCore::Impl::memory_full_text() const {
  return fmt::format(
      "the server's memory cap is reached ({} of {} bytes in use; kDefaultMaxMemoryBytes, "
      "mlrun rdzv --max-memory)",
      memory_.used(), memory_.max());
}

bool ServerCore::Impl::room(const ConnPtr& c, std::size_t bytes) {
  if (memory_.fits(0, bytes)) return true;
  reply(c, encode_error(c->header.op, c->header.request_id, Status::kLimitExceeded,
                        memory_full_text()));
  return false;
}

std::size_t ServerCore::Impl::held_cost(const std::string& name,
                                        const std::vector<std::string>& keys) {
  // The name is held twice (the connection's copy and the table's key); a wait re-registers
  // under each of its keys in turn, so the longest one counts.
  std::size_t longest = string_bytes(name);
  for (const auto& k : keys) longest = std::max(longest, string_bytes(k));
  return kHeldEntryBytes + 2 * longest + (keys.empty() ? 0 : strings_bytes(keys));
}

bool ServerCore::Impl::store(const ConnPtr& c, const std::string& key, std::string value) {
  value.shrink_to_fit();
  auto it = store_.find(key);
  std::size_t old_bytes = it == store_.end() ? 0 : map_entry_bytes(it->first, it->second);
  if (!memory_.fits(old_bytes, map_entry_bytes(key.size(), value.capacity()))) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kLimitExceeded,
                          memory_full_text()));
    return false;
  }
  put_entry(it, key, std::move(value), old_bytes);
  return true;
}

void ServerCore::Impl::put_entry(std::unordered_map<std::string, std::string>::iterator it,
                                 const std::string& key, std::string value, std::size_t old_bytes) {
  if (it == store_.end()) {
    it = store_.emplace(key, std::move(value)).first;
  } else {
    assign_value(it->second, std::move(value));
  }
  memory_.change(old_bytes, map_entry_bytes(it->first, it->second));
}

void ServerCore::Impl::notify(const std::string& key) {
  auto it = key_waiters_.find(key);
  if (it == key_waiters_.end()) return;
  std::unordered_set<Conn*> waiters = std::move(it->second);
  key_waiters_.erase(it);
  const std::string& value = store_.at(key);
  for (Conn* raw : waiters) {
    ConnPtr c = find(raw);
    if (!c) continue;
    if (c->held == Held::kGet) {
      std::uint32_t id = c->held_id;
      end_hold(*c);
      reply(c, encode_reply(Op::kGet, id, ValueReply{value}));
    } else if (c->held == Held::kWait) {
      if (advance_wait(*c)) {
        std::uint32_t id = c->held_id;
        end_hold(*c);
        reply(c, encode_reply(Op::kWait, id, EmptyReply{}));
      } else {
        c->held_name = c->wait_keys[c->wait_next];
        key_waiters_[c->held_name].insert(raw);
      }
    }
  }
}

bool ServerCore::Impl::advance_wait(Conn& c) {
  while (c.wait_next < c.wait_keys.size() && store_.contains(c.wait_keys[c.wait_next])) {
    ++c.wait_next;
  }
  return c.wait_next == c.wait_keys.size();
}

void ServerCore::Impl::handle(const ConnPtr& c, Set& r) {
  if (r.key == kTorchStoreGenerationKey) torch_new_generation();
  if (!store(c, r.key, std::move(r.value))) return;
  reply(c, encode_reply(Op::kSet, c->header.request_id, EmptyReply{}));
  notify(r.key);
}

void ServerCore::Impl::handle(const ConnPtr& c, Get& r) {
  auto it = store_.find(r.key);
  if (it != store_.end()) {
    reply(c, encode_reply(Op::kGet, c->header.request_id, ValueReply{it->second}));
    return;
  }
  if (r.timeout_ms == 0) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kNotFound,
                          fmt::format("key {} is not set", quoted(r.key))));
    return;
  }
  std::size_t cost = held_cost(r.key, {});
  if (!room(c, cost)) return;
  key_waiters_[r.key].insert(c.get());
  hold(c, Held::kGet, r.timeout_ms, std::move(r.key), cost);
}

void ServerCore::Impl::handle(const ConnPtr& c, Add& r) {
  std::int64_t value = 0;
  if (auto it = store_.find(r.key); it != store_.end()) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
      reply(c, encode_error(c->header.op, c->header.request_id, Status::kInvalidArgument,
                            fmt::format("the value of key {} is not an integer", quoted(r.key))));
      return;
    }
  }
  if (__builtin_add_overflow(value, r.delta, &value)) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kInvalidArgument,
                          fmt::format("add on key {} overflows int64", quoted(r.key))));
    return;
  }
  if (!store(c, r.key, std::to_string(value))) return;
  reply(c, encode_reply(Op::kAdd, c->header.request_id, AddReply{value}));
  notify(r.key);
}

void ServerCore::Impl::handle(const ConnPtr& c, CompareSet& r) {
  auto it = store_.find(r.key);
  bool matches = it == store_.end() ? r.expected.empty() : it->second == r.expected;
  if (!matches) {
    reply(c, encode_reply(Op::kCompareSet, c->header.request_id,
                          CompareSetReply{false, it == store_.end() ? "" : it->second}));
    return;
  }
  std::string copy = r.desired;
  if (!store(c, r.key, std::move(r.desired))) return;
  reply(c, encode_reply(Op::kCompareSet, c->header.request_id,
                        CompareSetReply{true, std::move(copy)}));
  notify(r.key);
}

void ServerCore::Impl::handle(const ConnPtr& c, Wait& r) {
  c->wait_keys = std::move(r.keys);
  c->wait_next = 0;
  if (advance_wait(*c)) {
    std::vector<std::string>().swap(c->wait_keys);
    reply(c, encode_reply(Op::kWait, c->header.request_id, EmptyReply{}));
    return;
  }
  std::string missing = c->wait_keys[c->wait_next];
  std::size_t cost = held_cost(missing, c->wait_keys);
  if (!room(c, cost)) {
    std::vector<std::string>().swap(c->wait_keys);
    return;
  }
  key_waiters_[missing].insert(c.get());
  hold(c, Held::kWait, r.timeout_ms, std::move(missing), cost);
}

void ServerCore::Impl::handle(const ConnPtr& c, Delete& r) {
  auto it = store_.find(r.key);
  bool existed = it != store_.end();
  if (existed) {
    memory_.change(map_entry_bytes(it->first, it->second), 0);
    store_.erase(it);
  }
  reply(c, encode_reply(Op::kDelete, c->header.request_id, DeleteReply{existed}));
}

void ServerCore::Impl::handle(const ConnPtr& c, Barrier& r) {
  // Memory is checked for an arrival that will wait; the last one needs none.
  auto found = barriers_.find(r.name);
  std::size_t before = found == barriers_.end() ? 0 : found->second.arrived.size();
  std::size_t cost = held_cost(r.name, {});
  if (before + 1 < r.count && !room(c, cost)) return;
  BarrierState& b = found == barriers_.end() ? barriers_[r.name] : found->second;
  if (b.arrived.empty()) {
    b.count = r.count;
  } else if (b.count != r.count) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kConflict,
                          fmt::format("barrier {} waits for {}, this request for {}",
                                      quoted(r.name), b.count, r.count)));
    return;
  }
  b.arrived.insert(c.get());
  if (b.arrived.size() < b.count) {
    hold(c, Held::kBarrier, r.timeout_ms, std::move(r.name), cost);
    return;
  }
  // Complete: release everyone; the name starts a fresh round.
  std::unordered_set<Conn*> arrived = std::move(b.arrived);
  barriers_.erase(r.name);
  for (Conn* raw : arrived) {
    ConnPtr m = find(raw);
    if (!m) continue;
    std::uint32_t id = m.get() == c.get() ? c->header.request_id : m->held_id;
    if (m->held == Held::kBarrier) end_hold(*m);
    reply(m, encode_reply(Op::kBarrier, id, EmptyReply{}));
  }
}

namespace {

// A complete join group's layout: members that asked for an index keep it; the others fill the
// free indices in join order. Offsets are prefix sums of the weights in index order.
struct JoinLayout {
  std::vector<Conn*> by_index;
  std::vector<std::uint64_t> offset;
  std::uint64_t total = 0;
};

JoinLayout lay_out(const JoinGroup& g) {
  std::vector<std::pair<Conn*, JoinMember>> members(g.members.begin(), g.members.end());
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; });
  JoinLayout out{std::vector<Conn*>(g.size, nullptr), std::vector<std::uint64_t>(g.size, 0), 0};
  std::vector<Conn*>& by_index = out.by_index;
  std::vector<std::uint32_t> weight(g.size, 0);
  for (auto& [conn, m] : members) {
    if (m.index >= 0) {
      by_index[m.index] = conn;
      weight[m.index] = m.weight;
    }
  }
  std::size_t next_free = 0;
  for (auto& [conn, m] : members) {
    if (m.index >= 0) continue;
    while (by_index[next_free] != nullptr) ++next_free;
    by_index[next_free] = conn;
    weight[next_free] = m.weight;
  }
  for (std::size_t i = 0; i < g.size; ++i) {
    out.offset[i] = out.total;
    out.total += weight[i];
  }
  return out;
}

}  // namespace

void ServerCore::Impl::handle(const ConnPtr& c, Join& r) {
  auto conflict = [&](std::string message) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kConflict, message));
  };
  // A finished group is freed; its record answers a late join.
  if (finished_groups_.contains(group_hash(r.group)))
    return conflict(fmt::format("join group {} is already complete", quoted(r.group)));
  auto found = groups_.find(r.group);
  std::size_t before = found == groups_.end() ? 0 : found->second.members.size();
  std::uint32_t size = found == groups_.end() ? r.size : found->second.size;
  std::size_t cost = held_cost(r.group, {});
  if (before + 1 < size && !room(c, cost)) return;
  JoinGroup& g = found == groups_.end() ? groups_[r.group] : found->second;
  // A request refused below leaves no empty group behind.
  auto refuse_join = [&](std::string message) {
    if (g.members.empty()) groups_.erase(r.group);
    conflict(std::move(message));
  };
  if (g.members.empty()) {
    g.size = r.size;
  } else if (g.size != r.size) {
    return refuse_join(fmt::format("join group {} has size {}, this request says {}",
                                   quoted(r.group), g.size, r.size));
  }
  if (r.index >= 0 && !g.claimed.insert(r.index).second) {
    return refuse_join(
        fmt::format("index {} of join group {} is already taken", r.index, quoted(r.group)));
  }
  g.members.emplace(c.get(), JoinMember{++join_seq_, r.index, r.weight});
  g.weight += r.weight;
  if (options_.on_join) {
    options_.on_join(r.group, static_cast<std::uint32_t>(g.members.size()), g.size, g.weight);
  }
  if (g.members.size() < g.size) {
    if (g.members.size() == 1) arm_wait_report(g.report, false, r.group, r.timeout_ms);
    hold(c, Held::kJoin, r.timeout_ms, std::move(r.group), cost);
    return;
  }
  // Complete: every member gets its index, offset and the total.
  JoinLayout layout = lay_out(g);
  const auto& by_index = layout.by_index;
  // Finished: the group is freed (every member is answered below), and a record of its name
  // kept. A record is charged even past the cap: a finished group cannot be refused.
  groups_.erase(r.group);
  if (finished_groups_.insert(group_hash(r.group)).second) {
    memory_.change(0, kFinishedGroupBytes);
  }
  for (std::size_t i = 0; i < by_index.size(); ++i) {
    ConnPtr m = find(by_index[i]);
    if (!m) continue;
    std::uint32_t id = m.get() == c.get() ? c->header.request_id : m->held_id;
    if (m->held == Held::kJoin) end_hold(*m);
    m->joined = fmt::format("member {} of join group {}", i, quoted(r.group));
    JoinReply body{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(by_index.size()),
                   layout.offset[i], layout.total};
    reply(m, encode_reply(Op::kJoin, id, body));
  }
}

void ServerCore::Impl::handle(const ConnPtr& c, Heartbeat&) {
  reply(c, encode_reply(Op::kHeartbeat, c->header.request_id, EmptyReply{}));
}

void ServerCore::Impl::handle(const ConnPtr& c, Abort& r) {
  if (!aborted_ && options_.log_client_aborts)
    log(fmt::format("job aborted by {}: {}", c->peer, quoted(r.reason)));
  reply(c, encode_reply(Op::kAbort, c->header.request_id, EmptyReply{}));
  abort(r.reason);
}

// --- Held requests ---------------------------------------------------------------------------

void ServerCore::Impl::hold(const ConnPtr& c, Held kind, std::uint32_t timeout_ms, std::string name,
                            std::size_t bytes) {
  c->held = kind;
  c->held_op = static_cast<Op>(c->header.op);
  c->held_id = c->header.request_id;
  // However long the client asks for, a request is held max_hold at most (docs/protocol.md).
  const auto max_hold = std::max<std::int64_t>(1, options_.max_hold.count());
  c->held_capped = timeout_ms > max_hold;
  c->held_timeout_ms = c->held_capped ? static_cast<std::uint32_t>(max_hold) : timeout_ms;
  c->held_name = std::move(name);
  c->held_bytes = bytes;
  memory_.change(0, bytes);
  std::uint64_t seq = ++c->held_seq;
  c->wait_timer.expires_after(std::chrono::milliseconds(c->held_timeout_ms));
  c->wait_timer.async_wait([self = shared_from_this(), c, seq](error_code ec) {
    if (ec || c->closed || c->held == Held::kNone || seq != c->held_seq) return;
    self->on_timeout(c);
  });
}

void ServerCore::Impl::end_hold(Conn& c) {
  c.held = Held::kNone;
  ++c.held_seq;
  c.wait_timer.cancel();
  memory_.change(c.held_bytes, 0);
  c.held_bytes = 0;
  std::vector<std::string>().swap(c.wait_keys);
}

void ServerCore::Impl::unhold(Conn& c) {
  switch (c.held) {
    case Held::kNone:
      return;
    case Held::kGet:
    case Held::kWait:
      if (auto it = key_waiters_.find(c.held_name); it != key_waiters_.end()) {
        it->second.erase(&c);
        if (it->second.empty()) key_waiters_.erase(it);
      }
      break;
    case Held::kBarrier:
      if (auto it = barriers_.find(c.held_name); it != barriers_.end()) {
        it->second.arrived.erase(&c);
        if (it->second.arrived.empty()) barriers_.erase(it);
      }
      break;
    case Held::kJoin:
      if (auto it = groups_.find(c.held_name); it != groups_.end()) {
        auto m = it->second.members.find(&c);
        if (m != it->second.members.end()) {
          if (m->second.index >= 0) it->second.claimed.erase(m->second.index);
          it->second.weight -= m->second.weight;
          it->second.members.erase(m);
        }
        if (it->second.members.empty()) groups_.erase(it);
      }
      break;
    case Held::kElasticJoin:
      if (auto it = elastic_.find(c.held_name); it != elastic_.end()) {
        auto& w = it->second.waiting;
        w.erase(std::remove_if(w.begin(), w.end(), [&](const auto& x) { return x.conn == &c; }),
                w.end());
        if (w.size() < it->second.min && it->second.last_call) {
          it->second.last_call->cancel();
          it->second.last_call.reset();
          it->second.last_call_passed = false;
        }
      }
      break;
  }
  end_hold(c);
}

void ServerCore::Impl::on_timeout(const ConnPtr& c) {
  std::string message;
  const std::uint32_t ms = c->held_timeout_ms;
  switch (c->held) {
    case Held::kGet:
      message = fmt::format("key {} was not set within {} ms", quoted(c->held_name), ms);
      break;
    case Held::kWait:
      message = fmt::format("key {} ({} of {} keys still missing) was not set within {} ms",
                            quoted(c->held_name), c->wait_keys.size() - c->wait_next,
                            c->wait_keys.size(), ms);
      break;
    case Held::kBarrier: {
      const auto& b = barriers_.at(c->held_name);
      message = fmt::format("barrier {}: {} of {} arrived within {} ms", quoted(c->held_name),
                            b.arrived.size(), b.count, ms);
      break;
    }
    case Held::kJoin: {
      const auto& g = groups_.at(c->held_name);
      std::vector<std::pair<std::int32_t, std::string>> joined;
      for (const auto& [raw, m] : g.members) {
        ConnPtr p = find(raw);
        joined.emplace_back(m.index, p ? p->peer : std::string("?"));
      }
      std::sort(joined.begin(), joined.end());
      std::string who;
      for (const auto& [index, peer] : joined) {
        who += fmt::format("{}{} from {}", who.empty() ? "" : ", ",
                           index >= 0 ? fmt::format("index {}", index) : std::string("a member"),
                           peer);
      }
      std::string missing;
      if (!g.claimed.empty()) {
        for (std::uint32_t i = 0; i < g.size; ++i) {
          if (!g.claimed.contains(static_cast<std::int32_t>(i))) {
            missing += fmt::format("{}{}", missing.empty() ? "" : ", ", i);
          }
        }
      }
      message = fmt::format(
          "join group {}: {} of {} joined within {} ms (joined: {}; waited for {}{})",
          quoted(c->held_name), g.members.size(), g.size, ms, who, g.size - g.members.size(),
          missing.empty() ? " more" : fmt::format(" more: index {}", missing));
      break;
    }
    case Held::kElasticJoin:
      message = fmt::format("{}: not enough members within {} ms",
                            elastic_wait_text(c->held_name, elastic_.at(c->held_name)), ms);
      break;
    case Held::kNone:
      return;
  }
  if (c->held_capped) {
    message += fmt::format(
        " (the server holds a request {} ms at most, kDefaultMaxHold, mlrun rdzv --max-hold; it "
        "asked "
        "for longer)",
        ms);
  }
  Op op = c->held_op;
  std::uint32_t id = c->held_id;
  unhold(*c);
  reply(c, encode_error(static_cast<std::uint8_t>(op), id, Status::kTimeout, message));
}

}  // namespace mlrun::rendezvous
