// Admission: what the server lets an unauthenticated peer cost. A flood of silent connections
// must not keep a legitimate client out (nor use every descriptor until the handshake deadline
// frees them), a token guesser must not get thousands of guesses a second, and neither may
// write one log line per attempt.
#include <fmt/format.h>

#include "rendezvous/server_impl.h"

namespace mlrun::rendezvous {

namespace {

// Log lines of one kind: at most one per this interval, the rest counted.
constexpr auto kLogInterval = std::chrono::seconds(1);

}  // namespace

void ServerCore::Impl::admit(const ConnPtr& c) {
  c->pending = true;
  c->pending_peer = torch_node(*c);
  auto& list = c->pending_peer ? pending_peers_ : pending_;
  std::size_t cap = c->pending_peer ? max_pending_peers_ : max_pending_;
  c->pending_at = list.insert(list.end(), c.get());
  while (list.size() > cap && evict_oldest_of(list, cap, "too many unauthenticated connections")) {
  }
}

void ServerCore::Impl::unpend(Conn& c) {
  if (!c.pending) return;
  (c.pending_peer ? pending_peers_ : pending_).erase(c.pending_at);
  c.pending = false;
}

// Strangers first: a job node's connections go only when no other is left.
bool ServerCore::Impl::evict_oldest(std::string_view why) {
  return evict_oldest_of(pending_, max_pending_, why) ||
         evict_oldest_of(pending_peers_, max_pending_peers_, why);
}

bool ServerCore::Impl::evict_oldest_of(std::list<Conn*>& list, std::size_t cap,
                                       std::string_view why) {
  if (list.empty()) return false;
  ConnPtr oldest = find(list.front());
  if (!oldest) {
    list.pop_front();
    return true;
  }
  log_limited("evicted", fmt::format("closing {}: not authenticated, evicted ({}, at most {})",
                                     oldest->peer, why, cap));
  close(oldest);  // unpends it
  return true;
}

bool ServerCore::Impl::throttled(const Conn& c) {
  auto it = auth_budgets_.find(c.peer_address);
  if (it == auth_budgets_.end()) return false;
  auto now = std::chrono::steady_clock::now();
  AuthBudget& b = it->second;
  double refill = std::chrono::duration<double>(now - b.at).count() * kAuthFailuresPerSecond;
  b.left = std::min(kAuthFailureBurst, b.left + refill);
  b.at = now;
  return b.left < 1;
}

void ServerCore::Impl::auth_failed(const Conn& c) {
  auto now = std::chrono::steady_clock::now();
  if (auth_budgets_.size() >= kMaxThrottledAddresses) {
    // Forget addresses whose budget has refilled: they are as good as new.
    std::erase_if(auth_budgets_, [&](const auto& entry) {
      double refill =
          std::chrono::duration<double>(now - entry.second.at).count() * kAuthFailuresPerSecond;
      return entry.second.left + refill >= kAuthFailureBurst;
    });
    if (auth_budgets_.size() >= kMaxThrottledAddresses) auth_budgets_.clear();
  }
  auto [it, fresh] = auth_budgets_.try_emplace(c.peer_address, AuthBudget{kAuthFailureBurst, now});
  if (!fresh) throttled(c);  // refills up to now
  it->second.left = std::max(0.0, it->second.left - 1);
}

void ServerCore::Impl::log_limited(std::string_view kind, std::string_view line) {
  auto now = std::chrono::steady_clock::now();
  LogLimit& l = log_limits_[std::string(kind)];
  if (l.last != std::chrono::steady_clock::time_point{} && now - l.last < kLogInterval) {
    ++l.suppressed;
    return;
  }
  if (l.suppressed > 0) {
    log(fmt::format("{} (and {} more like it not shown)", line, l.suppressed));
  } else {
    log(line);
  }
  l.last = now;
  l.suppressed = 0;
}

void ServerCore::Impl::flush_limited_logs() {
  for (auto& [kind, l] : log_limits_) {
    if (l.suppressed > 0) log(fmt::format("{} more \"{}\" lines not shown", l.suppressed, kind));
    l.suppressed = 0;
  }
}

}  // namespace mlrun::rendezvous
