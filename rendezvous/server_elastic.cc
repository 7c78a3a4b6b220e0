// The rendezvous server: elastic groups (docs/protocol.md, "Elastic groups"), membership rounds
// of nodes that come and go, their heartbeats and the members lost. See server_impl.h for how
// the server's source files divide it.
#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "rendezvous/server_impl.h"

namespace mlrun::rendezvous {

namespace {

std::string clock_text(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      out += fmt::format("\\u{:04x}", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

}  // namespace

// --- Elastic groups --------------------------------------------------------------------------

void ServerCore::Impl::put(const std::string& key, std::string value) {
  auto it = store_.find(key);
  value.shrink_to_fit();
  std::size_t old_bytes = it == store_.end() ? 0 : map_entry_bytes(it->first, it->second);
  put_entry(it, key, std::move(value), old_bytes);
  notify(key);
}

void ServerCore::Impl::handle(const ConnPtr& c, ElasticJoin& r) {
  auto conflict = [&](std::string message) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kConflict, message));
  };
  ElasticGroup& g = elastic_[r.group];
  if (auto lost = g.lost_members.find(r.member); lost != g.lost_members.end()) {
    return conflict(
        fmt::format("member {} of elastic group {} was declared lost ({}); a node "
                    "that comes back joins under a new id",
                    quoted(r.member), quoted(r.group), lost->second));
  }
  if (!g.configured) {
    g.configured = true;
    g.min = r.min_size;
    g.max = r.max_size;
    g.last_call_ms = r.last_call_ms;
    g.heartbeat_timeout_ms = r.heartbeat_timeout_ms;
  } else if (g.min != r.min_size || g.max != r.max_size) {
    return conflict(fmt::format("elastic group {} has sizes {}:{}, this request says {}:{}",
                                quoted(r.group), g.min, g.max, r.min_size, r.max_size));
  }
  for (const auto& w : g.waiting) {
    if (w.member == r.member) {
      return conflict(fmt::format("member {} already waits for round {} of elastic group {}",
                                  quoted(r.member), g.next_round, quoted(r.group)));
    }
  }
  // The waiter's entry and, once seen, the member's heartbeat record.
  std::size_t cost = held_cost(r.group, {}) + 2 * string_bytes(r.member);
  if (!room(c, cost)) return;
  g.waiting.push_back({c.get(), r.member, r.index, r.weight, ++join_seq_});
  std::string name = r.group;
  if (g.waiting.size() == 1) arm_wait_report(g.report, true, name, r.timeout_ms);
  hold(c, Held::kElasticJoin, r.timeout_ms, r.group, cost);
  g.heard[r.member].wall = std::chrono::system_clock::now();
  g.heard[r.member].at = std::chrono::steady_clock::now();
  if (g.running) {
    bool seated = std::any_of(g.seats.begin(), g.seats.end(),
                              [&](const ElasticSeat& s) { return s.member == r.member; });
    std::size_t alive =
        std::count_if(g.seats.begin(), g.seats.end(), [](const ElasticSeat& s) { return s.alive; });
    // A newcomer while a round runs: its members re-rendezvous at their next chance, when
    // there is room for it.
    if (!seated && alive < g.max) {
      g.joined.push_back(r.member);
      publish_change(name, g);
    }
  }
  if (g.heartbeat_timeout_ms > 0) start_sweep();
  maybe_close_round(name);
}

void ServerCore::Impl::handle(const ConnPtr& c, MemberHeartbeat& r) {
  ElasticGroup& g = elastic_[r.group];
  if (auto lost = g.lost_members.find(r.member); lost != g.lost_members.end()) {
    reply(c, encode_error(c->header.op, c->header.request_id, Status::kConflict,
                          fmt::format("member {} of elastic group {} was declared lost ({})",
                                      quoted(r.member), quoted(r.group), lost->second)));
    return;
  }
  Heard& h = g.heard[r.member];
  h.at = std::chrono::steady_clock::now();
  h.wall = std::chrono::system_clock::now();
  if (h.conn != c.get()) {
    if (h.conn != nullptr) heartbeat_conns_.erase(h.conn);
    h.conn = c.get();
    heartbeat_conns_[c.get()] = {r.group, r.member};
  }
  reply(c, encode_reply(Op::kMemberHeartbeat, c->header.request_id, EmptyReply{}));
}

void ServerCore::Impl::handle(const ConnPtr& c, NodeHeartbeat& r) {
  NodeLiveness& n = node_beats_[c.get()];
  std::string who = quoted(r.who);  // Sanitised for the log and the abort's reason.
  n.who = who.substr(1, who.size() - 2);
  n.timeout_ms = r.timeout_ms;
  n.at = std::chrono::steady_clock::now();
  n.wall = std::chrono::system_clock::now();
  start_sweep();
  reply(c, encode_reply(Op::kNodeHeartbeat, c->header.request_id, EmptyReply{}));
}

void ServerCore::Impl::handle(const ConnPtr& c, NodeWatch& r) {
  auto it = node_beats_.find(c.get());
  if (it == node_beats_.end()) {
    reply(c, encode_error(static_cast<std::uint8_t>(Op::kNodeWatch), c->header.request_id,
                          Status::kInvalidArgument, "no node heartbeat on this connection yet"));
    return;
  }
  it->second.close_is_loss = r.close_is_loss != 0;
  reply(c, encode_reply(Op::kNodeWatch, c->header.request_id, EmptyReply{}));
}

// A node that closes its connection is no hung node: its end is the transport's to report, where
// there is one (a head). One that asked for it (node_watch) and did not take it back before its
// close ended without a word: killed, crashed, its host gone.
void ServerCore::Impl::node_closed(Conn& c) {
  auto it = node_beats_.find(&c);
  if (it == node_beats_.end()) return;
  NodeLiveness n = std::move(it->second);
  node_beats_.erase(it);
  if (!n.close_is_loss || stopped_ || aborted_) return;
  std::string why = fmt::format(
      "{} lost: its connection to the rendezvous closed while the job ran, without a word (the "
      "node was killed, crashed, or its host went down), last heard from at {}",
      n.who, clock_text(n.wall));
  log(why);
  abort(why);
}

void ServerCore::Impl::maybe_close_round(const std::string& name) {
  auto it = elastic_.find(name);
  if (it == elastic_.end()) return;
  ElasticGroup& g = it->second;
  std::size_t n = g.waiting.size();
  if (n == 0) return;
  bool close = n >= g.max;
  if (!close && n >= g.min) {
    if (g.running) {
      // A re-rendezvous: it closes as soon as every member still alive is back (with any
      // newcomers already waiting); no last call.
      close = std::all_of(g.seats.begin(), g.seats.end(), [&](const ElasticSeat& s) {
        return !s.alive ||
               std::any_of(g.waiting.begin(), g.waiting.end(),
                           [&](const ElasticWaiter& w) { return w.member == s.member; });
      });
    } else if (g.last_call_passed || g.last_call_ms == 0) {
      close = true;
    } else if (!g.last_call) {
      g.last_call = std::make_shared<asio::steady_timer>(io_);
      g.last_call->expires_after(std::chrono::milliseconds(g.last_call_ms));
      std::weak_ptr<asio::steady_timer> armed = g.last_call;
      g.last_call->async_wait([self = shared_from_this(), name, armed](error_code ec) {
        if (ec || self->stopped_) return;
        auto it = self->elastic_.find(name);
        if (it == self->elastic_.end() || it->second.last_call != armed.lock()) return;
        it->second.last_call_passed = true;
        self->maybe_close_round(name);
      });
    }
  }
  if (close) close_round(name, g);
}

void ServerCore::Impl::close_round(const std::string& name, ElasticGroup& g) {
  std::unordered_map<std::string, std::uint32_t> previous;
  for (std::uint32_t i = 0; i < g.seats.size(); ++i) previous[g.seats[i].member] = i;
  // Members of the last round first, then newcomers in join order; at most max of them.
  std::vector<ElasticWaiter> waiting = std::move(g.waiting);
  g.waiting.clear();
  std::stable_sort(waiting.begin(), waiting.end(), [&](const auto& a, const auto& b) {
    bool pa = previous.contains(a.member), pb = previous.contains(b.member);
    return pa != pb ? pa : a.seq < b.seq;
  });
  if (waiting.size() > g.max) {
    g.waiting.assign(waiting.begin() + g.max, waiting.end());
    waiting.resize(g.max);
  }
  const std::uint32_t size = static_cast<std::uint32_t>(waiting.size());
  std::vector<int> by_index(size, -1);  // index -> position in waiting
  std::vector<int> index_of(size, -1);
  auto take = [&](std::size_t k, std::int64_t want) {
    if (index_of[k] >= 0 || want < 0 || want >= size || by_index[want] >= 0) return;
    by_index[want] = static_cast<int>(k);
    index_of[k] = static_cast<int>(want);
  };
  // A member keeps its index from the last round where it still fits, then a preferred index
  // (a static node rank), then the rest fill the free indices, keeping their previous order.
  for (std::size_t k = 0; k < size; ++k) {
    if (auto p = previous.find(waiting[k].member); p != previous.end()) take(k, p->second);
  }
  for (std::size_t k = 0; k < size; ++k) take(k, waiting[k].hint);
  std::vector<std::size_t> rest;
  for (std::size_t k = 0; k < size; ++k) {
    if (index_of[k] < 0) rest.push_back(k);
  }
  std::stable_sort(rest.begin(), rest.end(), [&](std::size_t a, std::size_t b) {
    auto pa = previous.find(waiting[a].member), pb = previous.find(waiting[b].member);
    std::uint64_t ka = pa == previous.end() ? UINT64_MAX : pa->second;
    std::uint64_t kb = pb == previous.end() ? UINT64_MAX : pb->second;
    return ka < kb;
  });
  std::uint32_t next_free = 0;
  for (std::size_t k : rest) {
    while (by_index[next_free] >= 0) ++next_free;
    take(k, next_free);
  }
  std::vector<std::uint64_t> offset(size, 0);
  std::uint64_t total = 0;
  std::string members;
  g.seats.assign(size, ElasticSeat{});
  for (std::uint32_t i = 0; i < size; ++i) {
    const ElasticWaiter& w = waiting[by_index[i]];
    offset[i] = total;
    total += w.weight;
    g.seats[i] = ElasticSeat{w.member, w.weight, true};
    members += w.member;
    members += '\n';
  }
  if (members.size() > 65536) members.clear();
  const std::uint32_t round = g.next_round++;
  g.running = true;
  g.joined.clear();
  g.lost.clear();
  if (g.last_call) g.last_call->cancel();
  g.last_call.reset();
  g.last_call_passed = false;
  auto now = std::chrono::steady_clock::now();
  for (const auto& seat : g.seats) g.heard[seat.member].at = now;
  log(fmt::format("elastic group {}: round {} closed with {} member{}", quoted(name), round, size,
                  size == 1 ? "" : "s"));
  for (std::uint32_t i = 0; i < size; ++i) {
    ConnPtr m = find(waiting[by_index[i]].conn);
    if (!m) continue;
    std::uint32_t id = m->held_id;
    if (m->held == Held::kElasticJoin) end_hold(*m);
    reply(m, encode_reply(Op::kElasticJoin, id,
                          ElasticJoinReply{round, i, size, offset[i], total, members}));
  }
}

void ServerCore::Impl::lose_member(const std::string& name, ElasticGroup& g, std::uint32_t index,
                                   std::string why, bool quiet) {
  ElasticSeat& seat = g.seats[index];
  seat.alive = false;
  const Heard& h = g.heard[seat.member];
  double silent = std::chrono::duration<double>(std::chrono::steady_clock::now() - h.at).count();
  g.lost.push_back(LostMember{index, seat.member, clock_text(h.wall), silent, why});
  g.lost_members[seat.member] = fmt::format("{}; last heard from at {}", why, clock_text(h.wall));
  if (!quiet) {
    log(fmt::format(
        "elastic group {}: member {} (index {} of round {}) lost: {}; last heard from at "
        "{} ({:.1f} s ago)",
        quoted(name), quoted(seat.member), index, g.next_round - 1, why, clock_text(h.wall),
        silent));
  }
  // A lost member that also waits for the next round is out of it.
  std::vector<ConnPtr> refused;
  for (const auto& w : g.waiting) {
    if (w.member == seat.member) {
      if (ConnPtr p = find(w.conn)) refused.push_back(p);
    }
  }
  for (auto& p : refused) {
    Op op = p->held_op;
    std::uint32_t id = p->held_id;
    unhold(*p);
    reply(p,
          encode_error(static_cast<std::uint8_t>(op), id, Status::kConflict,
                       fmt::format("member {} was declared lost: {}", quoted(seat.member), why)));
  }
  publish_change(name, g);
  maybe_close_round(name);
}

void ServerCore::Impl::publish_change(const std::string& name, ElasticGroup& g) {
  std::size_t alive =
      std::count_if(g.seats.begin(), g.seats.end(), [](const ElasticSeat& s) { return s.alive; });
  std::string joined, lost;
  for (const auto& m : g.joined) {
    if (!joined.empty()) joined += ',';
    joined += json_string(m);
  }
  for (const auto& l : g.lost) {
    lost += fmt::format(
        "{}{{\"node\":{},\"member\":{},\"last_heard\":{},\"silent_s\":{:.1f},\"why\":{}}}",
        lost.empty() ? "" : ",", l.index, json_string(l.member), json_string(l.last_heard),
        l.silent_s, json_string(l.why));
  }
  std::uint32_t round = g.next_round - 1;
  put(fmt::format("{}/{}/change", name, round),
      fmt::format(
          "{{\"round\":{},\"alive\":{},\"min\":{},\"max\":{},\"joined\":[{}],\"lost\":[{}]}}",
          round, alive, g.min, g.max, joined, lost));
}

void ServerCore::Impl::start_sweep() {
  if (sweep_timer_) return;
  sweep_timer_ = std::make_unique<asio::steady_timer>(io_);
  sweep();
}

void ServerCore::Impl::sweep_node_heartbeats(std::chrono::steady_clock::time_point now) {
  if (aborted_) return;
  for (const auto& [conn, n] : node_beats_) {
    auto silent = now - n.at;
    if (silent <= std::chrono::milliseconds(n.timeout_ms)) continue;
    double silent_s = std::chrono::duration<double>(silent).count();
    std::string why = fmt::format(
        "{} lost: no heartbeat for {:.1f} s (heartbeat_timeout {:.1f} s), last heard from at {}, "
        "while its connection stays open: the node hangs (stopped, or stuck in the kernel)",
        n.who, silent_s, n.timeout_ms / 1000.0, clock_text(n.wall));
    log(why);
    abort(why);
    return;
  }
}

void ServerCore::Impl::sweep() {
  if (stopped_) return;
  auto now = std::chrono::steady_clock::now();
  sweep_node_heartbeats(now);
  for (auto& [name, g] : elastic_) {
    if (!g.running || g.heartbeat_timeout_ms == 0) continue;
    auto limit = std::chrono::milliseconds(g.heartbeat_timeout_ms);
    for (std::uint32_t i = 0; i < g.seats.size(); ++i) {
      if (!g.seats[i].alive) continue;
      const Heard& h = g.heard[g.seats[i].member];
      if (now - h.at > limit) {
        lose_member(name, g, i,
                    fmt::format("no heartbeat for {:.1f} s (heartbeat_timeout {:.1f} s)",
                                std::chrono::duration<double>(now - h.at).count(),
                                g.heartbeat_timeout_ms / 1000.0));
      }
    }
  }
  sweep_timer_->expires_after(std::chrono::milliseconds(250));
  sweep_timer_->async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->sweep();
  });
}

void ServerCore::Impl::arm_wait_report(WaitReport& r, bool elastic, const std::string& name,
                                       std::uint32_t timeout_ms) {
  const auto max_hold = std::max<std::int64_t>(1, options_.max_hold.count());
  r.bound_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(timeout_ms, max_hold));
  r.since = std::chrono::steady_clock::now();
  // A fresh timer: the last one's wait (if any) ends with operation_aborted. A wait bounded
  // below 2 s gets no line.
  r.timer.reset();
  if (r.bound_ms < 2000) return;
  r.timer = std::make_shared<asio::steady_timer>(io_);
  r.timer->expires_after(
      std::min(std::chrono::milliseconds(30000), std::chrono::milliseconds(r.bound_ms / 2)));
  r.timer->async_wait(
      [self = shared_from_this(), elastic, name, armed = r.timer.get()](error_code ec) {
        if (!ec && !self->stopped_) self->report_wait(elastic, name, armed);
      });
}

void ServerCore::Impl::report_wait(bool elastic, const std::string& name,
                                   const asio::steady_timer* armed) {
  constexpr std::size_t kShown = 8;  // names listed in a line; the rest are counted
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size() && i < kShown; ++i) {
      out += fmt::format("{}{}", i == 0 ? "" : ", ", names[i]);
    }
    if (names.size() > kShown) out += fmt::format(" and {} more", names.size() - kShown);
    return out;
  };
  WaitReport* report = nullptr;
  std::string line;
  if (elastic) {
    auto it = elastic_.find(name);
    if (it == elastic_.end() || it->second.report.timer.get() != armed) return;
    ElasticGroup& g = it->second;
    if (g.waiting.empty()) return;  // The round closed.
    report = &g.report;
    std::vector<std::string> missing;
    if (g.running) {
      for (std::uint32_t i = 0; i < g.seats.size(); ++i) {
        const auto& seat = g.seats[i];
        bool back = std::any_of(g.waiting.begin(), g.waiting.end(),
                                [&](const ElasticWaiter& w) { return w.member == seat.member; });
        if (seat.alive && !back)
          missing.push_back(fmt::format("node {} {}", i, quoted(seat.member)));
      }
    }
    std::size_t more = g.waiting.size() >= g.min ? 0 : g.min - g.waiting.size();
    line = fmt::format(
        "round {} of elastic group {}: {} joined, at least {} needed (at most {}); "
        "waiting for {}",
        g.next_round, quoted(name), g.waiting.size(), g.min, g.max,
        missing.empty() ? fmt::format("{} more node{}", more, more == 1 ? "" : "s")
                        : "the last round's " + list(missing));
  } else {
    auto it = groups_.find(name);
    if (it == groups_.end() || it->second.report.timer.get() != armed) return;
    JoinGroup& g = it->second;
    report = &g.report;
    std::vector<std::string> missing;
    if (!g.claimed.empty()) {
      for (std::uint32_t i = 0; i < g.size; ++i) {
        if (!g.claimed.contains(static_cast<std::int32_t>(i))) missing.push_back(std::to_string(i));
      }
    }
    std::size_t more = g.size - g.members.size();
    line = fmt::format(
        "join group {}: {} of {} joined; waiting for {}", quoted(name), g.members.size(), g.size,
        missing.empty() ? fmt::format("{} more", more) : fmt::format("index {}", list(missing)));
  }
  double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - report->since).count();
  log(fmt::format("{}: {:.0f} s so far, up to {:.0f} s", line, waited, report->bound_ms / 1000.0));
  report->timer->expires_after(std::chrono::seconds(60));
  report->timer->async_wait([self = shared_from_this(), elastic, name, armed](error_code ec) {
    if (!ec && !self->stopped_) self->report_wait(elastic, name, armed);
  });
}

std::string ServerCore::Impl::elastic_wait_text(const std::string& name,
                                                const ElasticGroup& g) const {
  std::string joined;
  for (const auto& w : g.waiting) {
    auto it = conns_.find(w.conn);
    joined += fmt::format("{}{} from {}", joined.empty() ? "" : ", ", quoted(w.member),
                          it == conns_.end() ? std::string("?") : it->second->peer);
  }
  std::string missing;
  if (g.running) {
    for (std::uint32_t i = 0; i < g.seats.size(); ++i) {
      const auto& s = g.seats[i];
      bool back = std::any_of(g.waiting.begin(), g.waiting.end(),
                              [&](const ElasticWaiter& w) { return w.member == s.member; });
      if (s.alive && !back) {
        missing += fmt::format("{}node {} {}", missing.empty() ? "" : ", ", i, quoted(s.member));
      }
    }
  }
  std::string lost;
  for (const auto& l : g.lost) {
    lost += fmt::format("{}node {} {} ({}; last heard from at {})", lost.empty() ? "" : ", ",
                        l.index, quoted(l.member), l.why, l.last_heard);
  }
  std::size_t more = g.waiting.size() >= g.min ? 0 : g.min - g.waiting.size();
  return fmt::format(
      "round {} of elastic group {}: {} joined, at least {} needed (at most {}); joined: {}; "
      "waited for: {}{}{}",
      g.next_round, quoted(name), g.waiting.size(), g.min, g.max, joined.empty() ? "none" : joined,
      missing.empty() ? fmt::format("{} more node{}", more, more == 1 ? "" : "s")
                      : "the last round's " + missing,
      lost.empty() ? "" : "; lost in round " + std::to_string(g.next_round - 1) + ": ", lost);
}

}  // namespace mlrun::rendezvous
