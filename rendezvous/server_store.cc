// The rendezvous server: the key-value store, barriers, joins, and held (blocking) requests
// with their timeouts. See server_impl.h for how the server's source files divide it.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "rendezvous/server_impl.h"

namespace mlrun::rendezvous {

bool ServerCore::Impl::store(const ConnPtr& c, const std::string& key, std::string value) {
  auto it = store_.find(key);
  std::size_t old_bytes = it == store_.end() ? 0 : key.size() + it->second.size();
  std::size_t new_bytes = key.size() + value.size();
  if (store_bytes_ - old_bytes + new_bytes > kMaxStoreBytes) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kLimitExceeded,
                          fmt::format("the store is full (kMaxStoreBytes = {})", kMaxStoreBytes)));
    return false;
  }
  store_bytes_ = store_bytes_ - old_bytes + new_bytes;
  if (it == store_.end()) {
    store_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return true;
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
      c->held = Held::kNone;
      ++c->held_seq;
      c->wait_timer.cancel();
      reply(c, encode_reply(Op::kGet, id, ValueReply{value}));
    } else if (c->held == Held::kWait) {
      if (advance_wait(*c)) {
        std::uint32_t id = c->held_id;
        c->held = Held::kNone;
        ++c->held_seq;
        c->wait_timer.cancel();
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
  key_waiters_[r.key].insert(c.get());
  hold(c, Held::kGet, r.timeout_ms, std::move(r.key));
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
    c->wait_keys.clear();
    reply(c, encode_reply(Op::kWait, c->header.request_id, EmptyReply{}));
    return;
  }
  std::string missing = c->wait_keys[c->wait_next];
  key_waiters_[missing].insert(c.get());
  hold(c, Held::kWait, r.timeout_ms, std::move(missing));
}

void ServerCore::Impl::handle(const ConnPtr& c, Delete& r) {
  auto it = store_.find(r.key);
  bool existed = it != store_.end();
  if (existed) {
    store_bytes_ -= it->first.size() + it->second.size();
    store_.erase(it);
  }
  reply(c, encode_reply(Op::kDelete, c->header.request_id, DeleteReply{existed}));
}

void ServerCore::Impl::handle(const ConnPtr& c, Barrier& r) {
  BarrierState& b = barriers_[r.name];
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
    hold(c, Held::kBarrier, r.timeout_ms, std::move(r.name));
    return;
  }
  // Complete: release everyone; the name starts a fresh round.
  std::unordered_set<Conn*> arrived = std::move(b.arrived);
  barriers_.erase(r.name);
  for (Conn* raw : arrived) {
    ConnPtr m = find(raw);
    if (!m) continue;
    std::uint32_t id = m.get() == c.get() ? c->header.request_id : m->held_id;
    if (m->held == Held::kBarrier) {
      m->held = Held::kNone;
      ++m->held_seq;
      m->wait_timer.cancel();
    }
    reply(m, encode_reply(Op::kBarrier, id, EmptyReply{}));
  }
}

void ServerCore::Impl::handle(const ConnPtr& c, Join& r) {
  JoinGroup& g = groups_[r.group];
  auto conflict = [&](std::string message) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kConflict, message));
  };
  if (g.complete)
    return conflict(fmt::format("join group {} is already complete", quoted(r.group)));
  if (g.members.empty()) {
    g.size = r.size;
  } else if (g.size != r.size) {
    return conflict(fmt::format("join group {} has size {}, this request says {}", quoted(r.group),
                                g.size, r.size));
  }
  if (r.index >= 0 && !g.claimed.insert(r.index).second) {
    return conflict(
        fmt::format("index {} of join group {} is already taken", r.index, quoted(r.group)));
  }
  g.members.emplace(c.get(), JoinMember{++join_seq_, r.index, r.weight});
  if (g.members.size() < g.size) {
    hold(c, Held::kJoin, r.timeout_ms, std::move(r.group));
    return;
  }
  // Complete: members that asked for an index keep it; the others fill the free indices in
  // join order. Offsets are prefix sums of the weights in index order.
  std::vector<std::pair<Conn*, JoinMember>> members(g.members.begin(), g.members.end());
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; });
  std::vector<Conn*> by_index(g.size, nullptr);
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
    m.index = static_cast<std::int32_t>(next_free);
    by_index[next_free] = conn;
    weight[next_free] = m.weight;
  }
  std::vector<std::uint64_t> offset(g.size, 0);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < g.size; ++i) {
    offset[i] = total;
    total += weight[i];
  }
  g.complete = true;
  g.members.clear();
  g.claimed.clear();
  for (std::size_t i = 0; i < by_index.size(); ++i) {
    ConnPtr m = find(by_index[i]);
    if (!m) continue;
    std::uint32_t id = m.get() == c.get() ? c->header.request_id : m->held_id;
    if (m->held == Held::kJoin) {
      m->held = Held::kNone;
      ++m->held_seq;
      m->wait_timer.cancel();
    }
    m->joined = fmt::format("member {} of join group {}", i, quoted(r.group));
    JoinReply body{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(by_index.size()),
                   offset[i], total};
    reply(m, encode_reply(Op::kJoin, id, body));
  }
}

void ServerCore::Impl::handle(const ConnPtr& c, Heartbeat&) {
  reply(c, encode_reply(Op::kHeartbeat, c->header.request_id, EmptyReply{}));
}

void ServerCore::Impl::handle(const ConnPtr& c, Abort& r) {
  if (!aborted_) log(fmt::format("job aborted by {}: {}", c->peer, quoted(r.reason)));
  reply(c, encode_reply(Op::kAbort, c->header.request_id, EmptyReply{}));
  abort(r.reason);
}

// --- Held requests ---------------------------------------------------------------------------

void ServerCore::Impl::hold(const ConnPtr& c, Held kind, std::uint32_t timeout_ms,
                            std::string name) {
  c->held = kind;
  c->held_op = static_cast<Op>(c->header.op);
  c->held_id = c->header.request_id;
  c->held_timeout_ms = timeout_ms;
  c->held_name = std::move(name);
  std::uint64_t seq = ++c->held_seq;
  c->wait_timer.expires_after(std::chrono::milliseconds(timeout_ms));
  c->wait_timer.async_wait([self = shared_from_this(), c, seq](error_code ec) {
    if (ec || c->closed || c->held == Held::kNone || seq != c->held_seq) return;
    self->on_timeout(c);
  });
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
      if (auto it = groups_.find(c.held_name); it != groups_.end() && !it->second.complete) {
        auto m = it->second.members.find(&c);
        if (m != it->second.members.end()) {
          if (m->second.index >= 0) it->second.claimed.erase(m->second.index);
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
  c.held = Held::kNone;
  ++c.held_seq;
  c.wait_keys.clear();
  c.wait_timer.cancel();
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
  Op op = c->held_op;
  std::uint32_t id = c->held_id;
  unhold(*c);
  reply(c, encode_error(static_cast<std::uint8_t>(op), id, Status::kTimeout, message));
}

}  // namespace mlrun::rendezvous
