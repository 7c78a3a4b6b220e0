// The rendezvous server's TCPStore side: PyTorch's c10d store protocol (torch 1.13 and 2.x) on
// the same port as mlrun's own, told apart per connection from its first bytes. What is served,
// and why each choice, is in docs/torch-store.md; the decoder is torch_store.cc and the keys
// live in a torch::KeySpace per generation.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "rendezvous/server_impl.h"

namespace mlrun::rendezvous {

namespace {

using torch::Dialect;

// Read buffer of a TCPStore connection between requests (most are under 200 bytes).
constexpr std::size_t kTorchReadChunk = 256;

bool is_loopback(const asio::ip::address& a) {
  if (a.is_loopback()) return true;
  return a.is_v6() && a.to_v6().is_v4_mapped() &&
         asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).is_loopback();
}

// A GET or MULTI_GET waits for a key: later requests wait behind it.
bool blocked(const TorchConn& t) {
  return t.holding && t.held.op != torch::Op::kWait;
}

}  // namespace

std::string torch_address(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

bool ServerCore::Impl::torch_peer(const Conn& c) const {
  if (!c.peer_ip) return false;
  if (is_loopback(*c.peer_ip)) return true;
  std::string text = torch_address(*c.peer_ip);
  return torch_peers_.contains(text) ||
         std::find(options_.torch_store_allow.begin(), options_.torch_store_allow.end(), text) !=
             options_.torch_store_allow.end();
}

bool ServerCore::Impl::torch_node(const Conn& c) const {
  // Not loopback: that is where a hostile neighbour of a shared host is, and a job of thousands
  // of ranks on one host is not one to make room for.
  return options_.torch_store && c.peer_ip && !is_loopback(*c.peer_ip) && torch_peer(c);
}

bool ServerCore::Impl::keep_silent_torch(const ConnPtr& c) {
  if (!options_.torch_store || c->authed || c->closing || c->in_used != 0 || c->torch) {
    return false;
  }
  if (!torch_peer(*c)) return false;
  // torch 1.13 opens a second connection per client (for watched keys) that stays silent until
  // the client exits. TCP keepalive still bounds a dead peer.
  c->torch = std::make_unique<TorchConn>();
  c->torch->generation = torch_generation_;
  unpend(*c);  // its address was the check: no longer counted as unauthenticated
  return true;
}

std::optional<bool> ServerCore::Impl::route_torch(const ConnPtr& c) {
  if (c->torch && c->torch->dialect != Dialect::kUnknown) return take_torch(c, true);
  Dialect d = torch::detect({c->in.data(), c->in_used});
  if (d == Dialect::kUnknown) return true;  // 00 and a few bytes of VALIDATE's magic so far
  if (d == Dialect::kInvalid) {
    log(
        fmt::format("closing {}: neither mlrun's protocol nor a TCPStore dialect; first bytes "
                    "\"{}\"",
                    c->peer, sanitize({c->in.data(), c->in_used})));
    close(c);
    return false;
  }
  if (d == Dialect::kMlrun) {
    if (c->torch) {
      // A connection kept as a silent TCPStore client speaks at last, and it is mlrun: the
      // handshake deadline applies again.
      c->torch.reset();
      arm_deadline(c, options_.handshake_timeout, "no authentication");
    }
    return std::nullopt;
  }
  if (!torch_peer(*c)) {
    ++torch_refused_;
    log(
        fmt::format("refused {} connection from {}: not loopback nor an address of the job's "
                    "nodes ({} refused so far)",
                    torch::dialect_name(d), c->peer, torch_refused_));
    close(c);
    return false;
  }
  if (!c->torch) {
    c->torch = std::make_unique<TorchConn>();
    c->torch->generation = torch_generation_;
  }
  c->torch->dialect = d;
  unpend(*c);  // no handshake: the address was the check
  ++c->deadline_seq;
  c->deadline.cancel();
  return take_torch(c, true);
}

bool ServerCore::Impl::take_torch(const ConnPtr& c, bool compact) {
  TorchConn& t = *c->torch;
  std::size_t need = 0;
  while (t.begin < c->in_used && !c->closed && !c->closing) {
    if (backlogged(*c)) break;  // the rest waits until the replies have left (take_and_read)
    std::span<const std::uint8_t> bytes(c->in.data() + t.begin, c->in_used - t.begin);
    // A GET or MULTI_GET of a missing key holds the requests behind it (their replies must
    // follow its reply). A WAIT does not: PyTorch's server goes on serving the connection and
    // answers the WAIT whenever its keys are set, and clients rely on that (torch 1.13 sends
    // its next request after a wait timed out; torch 2.x sends CANCEL_WAIT).
    if (blocked(t)) break;
    torch::Request r;
    torch::Decoded d = torch::decode(t.dialect, bytes, r);
    if (d.status == torch::DecodeStatus::kNeedMore) {
      need = d.bytes;
      break;
    }
    if (d.status == torch::DecodeStatus::kError) {
      return torch_fail(c, fmt::format("{}; bytes \"{}\"", d.what, sanitize(bytes)));
    }
    t.begin += d.bytes;
    if (!torch_request(c, r)) return false;
  }
  if (c->closed || c->closing) return false;
  if (!compact) return true;  // a read is pending into this buffer: leave it where it is
  if (t.begin > 0) {
    std::memmove(c->in.data(), c->in.data() + t.begin, c->in_used - t.begin);
    c->in_used -= t.begin;
    t.begin = 0;
  }
  if (blocked(t) && c->in_used > torch::kMaxRequestBytes) {
    return torch_fail(c, "more than kMaxRequestBytes sent while a request waited");
  }
  // Room for what is known of the request being received (its length fields so far, checked
  // against the limits) and at least a chunk more. A request of many keys reveals its size one
  // key at a time: the buffer at least doubles, so that its reads and re-decodings number
  // log(size), not one a key (100 keys of 1 KB were 100 reallocations and 100 decodings, past
  // frame_timeout under TSan). Back to a chunk once a large request is done.
  std::size_t want = std::max(need, c->in_used + kTorchReadChunk);
  if (c->in.size() < want) {
    std::size_t cap = std::max(want, torch::kMaxRequestBytes + kTorchReadChunk);
    c->in.resize(std::min(std::max(want, 2 * c->in.size()), cap));
  } else if (c->in.size() > kTorchReadChunk && want <= kTorchReadChunk) {
    c->in.resize(kTorchReadChunk);
    c->in.shrink_to_fit();
  }
  // A client that stops halfway through a request is cut after frame_timeout.
  if (c->in_used > 0 && !blocked(t) && !c->partial) {
    c->partial = true;
    arm_deadline(c, options_.frame_timeout, "an incomplete TCPStore request not finished");
  } else if (c->partial && (c->in_used == 0 || blocked(t))) {
    c->partial = false;
    ++c->deadline_seq;
    c->deadline.cancel();
  }
  return true;
}

bool ServerCore::Impl::torch_fail(const ConnPtr& c, std::string_view why) {
  // The protocol has no error reply: PyTorch's own server closes the connection too.
  log(fmt::format("closing {} client {}: {}", torch::dialect_name(c->torch->dialect), c->peer,
                  why));
  close_after_flush(c);
  return false;
}

bool ServerCore::Impl::torch_request(const ConnPtr& c, torch::Request& r) {
  TorchConn& t = *c->torch;
  if (t.dialect == Dialect::kTorch2 && r.op == torch::Op::kValidate) {
    if (t.validated) return torch_fail(c, "VALIDATE sent twice");
    if (r.word != torch::kValidateMagic) return torch_fail(c, "VALIDATE with a bad magic");
    t.validated = true;
    return true;
  }
  if (t.dialect == Dialect::kTorch2 && !t.validated) {
    return torch_fail(c, fmt::format("{} before VALIDATE", torch::op_name(r.op)));
  }
  if (t.generation != torch_generation_) {
    return torch_fail(c, "a request from an earlier attempt's key space");
  }
  std::string out;
  switch (r.op) {
    case torch::Op::kSet:
    case torch::Op::kAppend:
    case torch::Op::kMultiSet:
    case torch::Op::kCompareSet:
    case torch::Op::kAdd:
      return torch_write(c, r);
    case torch::Op::kGet:
    case torch::Op::kWait:
    case torch::Op::kMultiGet:
      return torch_hold(c, std::move(r)) && !c->closed;
    case torch::Op::kCheck: {
      bool ready = std::all_of(r.keys.begin(), r.keys.end(),
                               [&](const std::string& k) { return torch_space_.contains(k); });
      torch::append_u8(out, ready ? torch::kReady : torch::kNotReady);
      break;
    }
    case torch::Op::kGetNumKeys:
      torch::append_i64(out, static_cast<std::int64_t>(torch_space_.size()));
      break;
    case torch::Op::kDeleteKey:
      torch::append_i64(out, torch_space_.erase(r.keys[0]) ? 1 : 0);
      break;
    case torch::Op::kCancelWait:
      // Answered the same whether a wait was still pending or had ended (its 0 went first).
      if (t.holding) {
        torch_forget(*c);
        torch_unhold(*c);
      }
      torch::append_u8(out, torch::kWaitCanceled);
      break;
    case torch::Op::kPing:
      torch::append_u32(out, r.word);
      break;
    case torch::Op::kWatchKey:
      return torch_fail(c, "WATCH_KEY is not served (docs/torch-store.md)");
    case torch::Op::kValidate:
      return torch_fail(c, "VALIDATE from a torch 1.13 client");
  }
  send(c, std::move(out));
  return !c->closed;
}

bool ServerCore::Impl::torch_write(const ConnPtr& c, torch::Request& r) {
  std::string out;
  auto failed = [&](torch::KeySpace::Result res) {
    if (res == torch::KeySpace::Result::kOk) return false;
    return !torch_fail(c, fmt::format("{} {}: {}", torch::op_name(r.op), quoted(r.keys.at(0)),
                                      torch::KeySpace::why(res)));
  };
  switch (r.op) {
    case torch::Op::kSet:
    case torch::Op::kAppend: {
      auto res = r.op == torch::Op::kSet ? torch_space_.set(r.keys[0], std::move(r.values[0]))
                                         : torch_space_.append(r.keys[0], r.values[0]);
      if (failed(res)) return false;
      torch_notify(r.keys[0]);
      return !c->closed;
    }
    case torch::Op::kMultiSet:
      for (std::size_t i = 0; i < r.keys.size(); ++i) {
        if (failed(torch_space_.set(r.keys[i], std::move(r.values[i])))) return false;
        torch_notify(r.keys[i]);
      }
      return !c->closed;
    case torch::Op::kCompareSet: {
      std::string value;
      bool changed = false;
      auto res = torch_space_.compare_set(r.keys[0], r.values[0], std::move(r.values[1]), &value,
                                          &changed);
      if (failed(res)) return false;
      torch::append_bytes(out, value);
      send(c, std::move(out));
      if (changed) torch_notify(r.keys[0]);
      return !c->closed;
    }
    case torch::Op::kAdd: {
      std::int64_t sum = 0;
      if (failed(torch_space_.add(r.keys[0], r.delta, &sum))) return false;
      torch::append_i64(out, sum);
      send(c, std::move(out));
      torch_notify(r.keys[0]);
      return !c->closed;
    }
    default:
      return torch_fail(c, fmt::format("{} is not a write", torch::op_name(r.op)));
  }
}

// --- Waiting requests ----------------------------------------------------------------------

bool ServerCore::Impl::torch_hold(const ConnPtr& c, torch::Request r) {
  TorchConn& t = *c->torch;
  // A WAIT still pending (its client gave up on it) is replaced, never answered.
  if (t.holding) {
    torch_forget(*c);
    torch_unhold(*c);
  }
  // Its key list and waiter entry count against the server's one cap; the protocol has no
  // error reply, so a request past it closes the connection.
  std::size_t cost = held_cost({}, r.keys);
  if (!memory_.fits(0, cost)) {
    return torch_fail(c, fmt::format("{} of {} keys: {}", torch::op_name(r.op), r.keys.size(),
                                     memory_full_text()));
  }
  t.held = std::move(r);
  t.next = 0;
  t.holding = true;
  t.held_bytes = cost;
  memory_.change(0, cost);
  if (torch_advance(t)) {
    torch_finish(c);
    return true;
  }
  t.waiting_on = t.held.keys[t.next];
  torch_waiters_[t.waiting_on].insert(c.get());
  // Held max_hold at most, as mlrun's own requests: then the connection is closed (the
  // protocol has no timeout reply; PyTorch's clients time out on their own side first unless
  // they asked for longer).
  const auto max_hold =
      std::chrono::milliseconds(std::max<std::int64_t>(1, options_.max_hold.count()));
  std::uint64_t seq = ++c->held_seq;
  c->wait_timer.expires_after(max_hold);
  c->wait_timer.async_wait([self = shared_from_this(), c, seq, max_hold](error_code ec) {
    if (ec || c->closed || !c->torch || !c->torch->holding || seq != c->held_seq) return;
    self->torch_fail(c, fmt::format("{} of {} keys still waiting after {} ms, the server's "
                                    "maximum hold (kDefaultMaxHold, mlrun rdzv --max-hold)",
                                    torch::op_name(c->torch->held.op), c->torch->held.keys.size(),
                                    max_hold.count()));
  });
  return true;
}

void ServerCore::Impl::torch_unhold(Conn& c) {
  TorchConn& t = *c.torch;
  t.holding = false;
  t.held = {};
  memory_.change(t.held_bytes, 0);
  t.held_bytes = 0;
  ++c.held_seq;
  c.wait_timer.cancel();
}

bool ServerCore::Impl::torch_advance(TorchConn& t) {
  const auto& keys = t.held.keys;
  while (t.next < keys.size() && torch_space_.contains(keys[t.next])) ++t.next;
  if (t.next < keys.size()) return false;
  // WAIT, as PyTorch's, only needs each key to have been set; GET needs every value now (one may
  // have been deleted since it was seen).
  if (t.held.op == torch::Op::kWait) return true;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!torch_space_.contains(keys[i])) {
      t.next = i;
      return false;
    }
  }
  return true;
}

void ServerCore::Impl::torch_finish(const ConnPtr& c) {
  TorchConn& t = *c->torch;
  std::string out;
  if (t.held.op == torch::Op::kWait) {
    torch::append_u8(out, torch::kStopWaiting);
  } else {
    for (const auto& k : t.held.keys) torch::append_bytes(out, *torch_space_.find(k));
  }
  torch_unhold(*c);
  t.waiting_on.clear();
  send(c, std::move(out));
}

void ServerCore::Impl::torch_notify(const std::string& key) {
  auto it = torch_waiters_.find(key);
  if (it == torch_waiters_.end()) return;
  std::unordered_set<Conn*> waiters = std::move(it->second);
  torch_waiters_.erase(it);
  for (Conn* raw : waiters) {
    ConnPtr c = find(raw);
    if (!c || !c->torch || !c->torch->holding) continue;
    TorchConn& t = *c->torch;
    if (!torch_advance(t)) {
      t.waiting_on = t.held.keys[t.next];
      torch_waiters_[t.waiting_on].insert(raw);
      continue;
    }
    torch_finish(c);
    // Requests that arrived behind the waiting one, served in place (a read is pending).
    if (t.begin < c->in_used) take_torch(c, false);
  }
}

void ServerCore::Impl::torch_forget(Conn& c) {
  if (!c.torch || c.torch->waiting_on.empty()) return;
  if (auto it = torch_waiters_.find(c.torch->waiting_on); it != torch_waiters_.end()) {
    it->second.erase(&c);
    if (it->second.empty()) torch_waiters_.erase(it);
  }
  c.torch->waiting_on.clear();
}

void ServerCore::Impl::torch_new_generation() {
  // The workers of the attempt before are gone (the launcher settles an attempt before the next
  // starts): their connections close with their keys, and nothing of theirs is seen again.
  ++torch_generation_;
  torch_space_.clear();
  torch_waiters_.clear();
  std::vector<ConnPtr> old;
  for (auto& [raw, c] : conns_) {
    if (c->torch) old.push_back(c);
  }
  for (auto& c : old) close(c);
}

}  // namespace mlrun::rendezvous
