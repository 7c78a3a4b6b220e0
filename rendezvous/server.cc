#include "rendezvous/server.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/server_impl.h"
#include "rendezvous/signal_mask.h"

namespace mlrun::rendezvous {

namespace {

// Connections with unflushed bytes get this long at most to drain before they are cut.
constexpr auto kMaxLinger = std::chrono::seconds(1);
// Each connection reads into a buffer this large (grown for a larger frame, then shrunk back):
// one recv usually takes a whole request, and 16,384 connections hold 4 MiB.
constexpr std::size_t kReadChunk = 256;

std::string endpoint_text(const asio::ip::address& address, int port) {
  if (address.is_v6()) return fmt::format("[{}]:{}", address.to_string(), port);
  return fmt::format("{}:{}", address.to_string(), port);
}

// Compares in time that depends on the expected token's length only, not on where a guess
// first differs.
bool same_token(std::string_view given, std::string_view expected) {
  unsigned diff = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

}  // namespace

std::string quoted(std::string_view s) {
  return "\"" + sanitize({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}, 128) + "\"";
}

// --- A new connection (from server_accept.cc) ------------------------------------------------

void ServerCore::Impl::adopt(tcp::socket socket, const std::optional<tcp::endpoint>& remote) {
  // No option is set here: TCP_NODELAY, keepalive and the user timeout come with the socket from
  // its listener (server_accept.cc), and it was accepted close-on-exec.
  auto c = std::make_shared<Conn>(io_, std::move(socket));
  error_code ec;
  c->socket.non_blocking(true, ec);  // send() writes at once when the socket takes it
  c->in.resize(kReadChunk);
  if (remote) {
    c->peer_ip = remote->address();
    c->peer = endpoint_text(remote->address(), remote->port());
    c->peer_address = remote->address().to_string();
  } else {
    c->peer = "unknown peer";
  }
  conns_.emplace(c.get(), c);
  admit(c);
  arm_deadline(c, options_.handshake_timeout, "no authentication");
  read_more(c);
}

// --- Reading and writing ---------------------------------------------------------------------

void ServerCore::Impl::arm_deadline(const ConnPtr& c, std::chrono::milliseconds after,
                                    std::string_view why) {
  std::uint64_t seq = ++c->deadline_seq;
  c->deadline.expires_after(after);
  c->deadline.async_wait([self = shared_from_this(), c, seq, why, after](error_code ec) {
    if (ec || c->closed || seq != c->deadline_seq) return;
    if (self->keep_silent_torch(c)) return;
    if (!c->closing) {
      self->log_limited(why,
                        fmt::format("closing {}: {} within {} ms", c->peer, why, after.count()));
    }
    self->close(c);
  });
}

void ServerCore::Impl::read_more(const ConnPtr& c) {
  auto room = asio::buffer(c->in.data() + c->in_used, c->in.size() - c->in_used);
  c->socket.async_read_some(room, [self = shared_from_this(), c](error_code ec, std::size_t n) {
    if (c->closed || c->closing) return;
    if (ec) {
      // EOF or reset: the peer is gone; its held request goes with it.
      self->lost_if_silent(c, ec);
      c->clean_eof = ec == asio::error::eof;
      self->close(c);
      return;
    }
    c->in_used += n;
    self->take_and_read(c);
  });
}

void ServerCore::Impl::take_and_read(const ConnPtr& c) {
  if (!take_frames(c)) return;
  // Requests are read no faster than their replies leave: a client that never reads cannot
  // make the server hold more than kMaxUnsentReplyBytes plus one reply for it.
  if (backlogged(*c)) {
    c->paused = true;
    return;
  }
  read_more(c);
}

bool ServerCore::Impl::take_frames(const ConnPtr& c) {
  if (c->torch || (options_.torch_store && !c->authed)) {
    if (std::optional<bool> torch = route_torch(c)) return *torch;
  }
  std::size_t begin = 0;
  bool backlog = false;
  while (c->in_used - begin >= kHeaderBytes) {
    if ((backlog = backlogged(*c))) break;  // the rest waits until the replies have left
    std::span<const std::uint8_t> at(c->in.data() + begin, kHeaderBytes);
    std::size_t limit = c->authed ? kMaxPayloadBytes : kMaxHelloPayloadBytes;
    DecodeResult r = decode_header(at, c->header, limit);
    if (r.status != DecodeStatus::kOk) {
      bool has_header = r.error != Status::kBadFrame;
      std::uint8_t op = has_header ? c->header.op : 0;
      std::uint32_t id = has_header ? c->header.request_id : 0;
      refuse(c, op, id, r.error, r.what,
             fmt::format("bad frame from {}: {}; header bytes \"{}\"", c->peer, r.what,
                         sanitize(at, kHeaderBytes)));
      return false;
    }
    std::size_t frame = kHeaderBytes + c->header.payload_bytes;
    if (c->in_used - begin < frame) break;
    on_frame(c, {c->in.data() + begin + kHeaderBytes, c->header.payload_bytes});
    begin += frame;
    if (c->closed || c->closing) return false;
  }
  // Keep the unfinished frame at the front, with room for all of it (payload_bytes was checked
  // against this connection's limit); a buffer grown for a large frame shrinks back after it.
  std::memmove(c->in.data(), c->in.data() + begin, c->in_used - begin);
  c->in_used -= begin;
  // Stopped before the next header was decoded: c->header is not its header, and the peer is
  // not slow, we are; take_and_read resumes once the replies have left.
  if (backlog) return true;
  // A whole header left means the loop stopped inside its payload, and c->header is its header.
  std::size_t need = c->in_used >= kHeaderBytes
                         ? std::max(kReadChunk, kHeaderBytes + c->header.payload_bytes)
                         : kReadChunk;
  if (c->in.size() < need || (c->in.size() > kReadChunk && c->in_used <= kReadChunk)) {
    c->in.resize(std::max(need, c->in_used));
    c->in.shrink_to_fit();
  }
  // An authenticated peer that stops halfway through a frame is cut after frame_timeout (before
  // authentication the handshake deadline covers it).
  if (c->authed && c->in_used > 0 && !c->partial) {
    c->partial = true;
    arm_deadline(c, options_.frame_timeout, "an incomplete frame not finished");
  } else if (c->partial && c->in_used == 0) {
    c->partial = false;
    ++c->deadline_seq;
    c->deadline.cancel();
  }
  return true;
}

void ServerCore::Impl::send(const ConnPtr& c, std::string frame) {
  if (c->closed) return;
  if (!c->writing && c->out.empty()) {
    // Most replies fit the socket's buffer: write now rather than through a completion.
    // Anything short of all of it (would block, an error) goes the asynchronous way, which
    // finishes the frame or closes the connection.
    error_code ec;
    std::size_t n = c->socket.write_some(asio::buffer(frame), ec);
    if (!ec && n == frame.size()) return;
    frame.erase(0, n);
  }
  c->out_bytes += frame.size();
  c->out.push_back(std::move(frame));
  if (!c->writing) write_next(c);
}

void ServerCore::Impl::write_next(const ConnPtr& c) {
  c->writing = true;
  asio::async_write(c->socket, asio::buffer(c->out.front()),
                    [self = shared_from_this(), c](error_code ec, std::size_t) {
                      c->writing = false;
                      if (c->closed) return;
                      if (ec) {
                        self->close(c);
                        return;
                      }
                      c->out_bytes -= c->out.front().size();
                      c->out.pop_front();
                      if (!c->out.empty()) {
                        self->write_next(c);
                      } else if (c->closing) {
                        self->linger(c);
                      }
                      if (c->paused && !backlogged(*c) && !c->closing && !c->closed) {
                        c->paused = false;
                        self->take_and_read(c);
                      }
                    });
}

void ServerCore::Impl::refuse(const ConnPtr& c, std::uint8_t op, std::uint32_t id, Status status,
                              std::string_view message, std::string_view log_line) {
  log_limited(message, log_line);
  c->in_flight = false;
  send(c, encode_error(op, id, status, message));
  close_after_flush(c);
}

void ServerCore::Impl::close_after_flush(const ConnPtr& c) {
  if (c->closed || c->closing) return;
  c->closing = true;
  unhold(*c);
  torch_forget(*c);
  if (c->torch) torch_unhold(*c);
  arm_deadline(c, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxLinger), "flush");
  if (!c->writing && c->out.empty()) linger(c);
}

void ServerCore::Impl::linger(const ConnPtr& c) {
  // Closing a socket with unread input sends a reset, which can destroy the error reply before
  // the peer reads it. So: half-close, discard input until the peer closes too, bounded by the
  // deadline armed in close_after_flush.
  error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_send, ec);
  auto sink = std::make_shared<std::array<char, 4096>>();
  struct Drain {
    std::shared_ptr<Impl> self;
    ConnPtr c;
    std::shared_ptr<std::array<char, 4096>> sink;
    void operator()(error_code ec, std::size_t) {
      if (c->closed) return;
      if (ec) {
        self->close(c);
        return;
      }
      c->socket.async_read_some(asio::buffer(*sink), std::move(*this));
    }
  };
  c->socket.async_read_some(asio::buffer(*sink), Drain{shared_from_this(), c, sink});
}

void ServerCore::Impl::lost_if_silent(const ConnPtr& c, const error_code& ec) {
  if (ec != asio::error::timed_out || c->joined.empty() || stopped_) return;
  abort(fmt::format("{} ({}) lost: no answer within {} s (a dead host or a cut link)", c->joined,
                    c->peer, kPeerSilenceBoundS));
}

void ServerCore::Impl::close(const ConnPtr& c) {
  if (c->closed) return;
  unhold(*c);
  torch_forget(*c);
  if (c->torch) torch_unhold(*c);
  unpend(*c);
  c->closed = true;
  error_code ec;
  c->socket.close(ec);
  ++c->deadline_seq;
  c->deadline.cancel();
  c->wait_timer.cancel();
  conns_.erase(c.get());
  node_closed(*c);
  if (auto it = heartbeat_conns_.find(c.get()); it != heartbeat_conns_.end()) {
    auto [name, member] = std::move(it->second);
    heartbeat_conns_.erase(it);
    if (stopped_) return;
    auto g = elastic_.find(name);
    if (g == elastic_.end()) return;
    if (auto h = g->second.heard.find(member); h != g->second.heard.end()) h->second.conn = nullptr;
    if (!g->second.running) return;
    for (std::uint32_t i = 0; i < g->second.seats.size(); ++i) {
      if (g->second.seats[i].member == member && g->second.seats[i].alive) {
        lose_member(name, g->second, i, "its connection to the rendezvous closed", c->clean_eof);
        return;
      }
    }
  }
}

// --- Requests --------------------------------------------------------------------------------

void ServerCore::Impl::on_frame(const ConnPtr& c, std::span<const std::uint8_t> payload) {
  const Header& h = c->header;
  if (c->in_flight) {
    // One request at a time per connection keeps every connection's memory bounded.
    refuse(c, h.op, h.request_id, Status::kBadFrame,
           "a request arrived while another was in flight",
           fmt::format("bad frame from {}: request while another was in flight", c->peer));
    return;
  }
  // Before authentication (and in any hello) the payload may hold the job's token, right or
  // nearly right: the log shows its length only.
  bool secret = !c->authed || h.op == static_cast<std::uint8_t>(Op::kHello);
  auto excerpt = [&] {
    return secret ? fmt::format("{} payload bytes, not shown", payload.size())
                  : fmt::format("payload \"{}\"", sanitize(payload));
  };
  if (!is_known_op(h.op)) {
    refuse(c, h.op, h.request_id, Status::kBadFrame, "unknown op",
           fmt::format("bad frame from {}: unknown op {}; {}", c->peer, h.op, excerpt()));
    return;
  }
  Request request;
  Status status = Status::kOk;
  std::string_view what;
  if (!parse_request(h.op, payload, request, &status, &what)) {
    refuse(c, h.op, h.request_id, status, what,
           fmt::format("bad frame from {}: {} op: {}; {}", c->peer, op_name(static_cast<Op>(h.op)),
                       what, excerpt()));
    return;
  }
  c->in_flight = true;
  if (!c->authed) {
    if (h.op != static_cast<std::uint8_t>(Op::kHello)) {
      refuse(c, h.op, h.request_id, Status::kAuthFailed, "the first request must be hello",
             fmt::format("refused {}: first request was {}, not hello", c->peer,
                         op_name(static_cast<Op>(h.op))));
      return;
    }
    on_hello(c, std::get<Hello>(request));
    return;
  }
  if (h.op == static_cast<std::uint8_t>(Op::kHello)) {
    refuse(c, h.op, h.request_id, Status::kBadFrame, "hello sent twice",
           fmt::format("bad frame from {}: hello sent twice", c->peer));
    return;
  }
  if (aborted_ && h.op != static_cast<std::uint8_t>(Op::kAbort)) {
    aborted_joins_ += h.op == static_cast<std::uint8_t>(Op::kJoin);
    reply(c, encode_error(h.op, h.request_id, Status::kAborted, *aborted_));
    return;
  }
  dispatch(c, request);
}

void ServerCore::Impl::on_hello(const ConnPtr& c, const Hello& r) {
  const std::uint32_t id = c->header.request_id;
  constexpr auto op = static_cast<std::uint8_t>(Op::kHello);
  // An address that keeps failing is refused unchecked for a while: a right guess would not be
  // accepted either, so guessing goes no faster than kAuthFailuresPerSecond.
  if (throttled(*c)) {
    refuse(c, op, id, Status::kAuthFailed, "too many failed authentications from this address",
           fmt::format("refused {}: throttled after too many failed authentications", c->peer));
    return;
  }
  if (!same_token(r.token, options_.token)) {
    auth_failed(*c);
    refuse(c, op, id, Status::kAuthFailed, "wrong token",
           fmt::format("refused {}: wrong token", c->peer));
    return;
  }
  if (!options_.job_id.empty() && !r.job_id.empty() && r.job_id != options_.job_id) {
    refuse(c, op, id, Status::kAuthFailed, "wrong job id",
           fmt::format("refused {}: job id {} is not this job's", c->peer, quoted(r.job_id)));
    return;
  }
  c->authed = true;
  unpend(*c);
  // A node of the job (torch_peer).
  if (c->peer_ip) torch_peers_.insert(torch_address(*c->peer_ip));
  ++c->deadline_seq;
  c->deadline.cancel();
  reply(c, encode_reply(Op::kHello, id, HelloReply{}));
}

void ServerCore::Impl::dispatch(const ConnPtr& c, Request& request) {
  std::visit([&](auto& body) { handle(c, body); }, request);
}

void ServerCore::Impl::abort(std::string_view reason) {
  if (aborted_) return;
  aborted_ = std::string(reason);
  std::vector<ConnPtr> held;
  for (auto& [raw, c] : conns_) {
    if (c->held != Held::kNone) held.push_back(c);
  }
  for (auto& c : held) {
    Op op = c->held_op;
    std::uint32_t id = c->held_id;
    aborted_joins_ += op == Op::kJoin;
    unhold(*c);
    reply(c, encode_error(static_cast<std::uint8_t>(op), id, Status::kAborted, *aborted_));
  }
  if (options_.on_abort) options_.on_abort(*aborted_);
}

void ServerCore::Impl::stop() {
  if (stopped_) return;
  stopped_ = true;
  error_code ec;
  for (auto& l : listeners_) {
    l->acceptor.close(ec);
    l->retry_timer.cancel();
  }
  if (sweep_timer_) sweep_timer_->cancel();
  for (auto& [name, g] : elastic_) {
    if (g.last_call) g.last_call->cancel();
  }
  flush_limited_logs();
  std::vector<ConnPtr> all;
  all.reserve(conns_.size());
  for (auto& [raw, c] : conns_) all.push_back(c);
  for (auto& c : all) close(c);
}

// --- ServerCore ------------------------------------------------------------------------------

ServerCore::ServerCore(asio::io_context& io, ServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {
  impl_->listen();
}
ServerCore::~ServerCore() {
  impl_->stop();
}
int ServerCore::port() const {
  return impl_->port();
}
std::string ServerCore::endpoint() const {
  return impl_->endpoint();
}
void ServerCore::abort(std::string_view reason) {
  impl_->abort(reason);
}
void ServerCore::clear_abort() {
  impl_->clear_abort();
}
std::optional<std::string> ServerCore::aborted() const {
  return impl_->aborted();
}
std::size_t ServerCore::connections() const {
  return impl_->connections();
}
std::size_t ServerCore::aborted_joins() const {
  return impl_->aborted_joins();
}
std::size_t ServerCore::torch_refused() const {
  return impl_->torch_refused();
}
std::size_t ServerCore::held_requests() const {
  return impl_->held_requests();
}
std::size_t ServerCore::memory_used() const {
  return impl_->memory_used();
}
std::size_t ServerCore::open_join_groups() const {
  return impl_->open_join_groups();
}
void ServerCore::stop() {
  impl_->stop();
}

// --- Server ----------------------------------------------------------------------------------

struct Server::Impl {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::unique_ptr<ServerCore> core;
  std::thread thread;
  int port = 0;
  std::string endpoint;

  // Runs f on the server's thread and waits for it (or runs it here when already there).
  template <typename F>
  void run_on_loop(F f) {
    if (!thread.joinable() || std::this_thread::get_id() == thread.get_id()) {
      f();
      return;
    }
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::Server(Server&&) noexcept = default;
Server& Server::operator=(Server&& other) noexcept {
  if (this != &other) {
    stop();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Server::~Server() {
  stop();
}

Server Server::start(ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->core = std::make_unique<ServerCore>(impl->io, std::move(options));
  impl->port = impl->core->port();
  impl->endpoint = impl->core->endpoint();
  // A trainer that embeds the server handles its own signals: none may land on this thread.
  impl->thread = thread_without_signals([io = &impl->io] { io->run(); });
  return Server(std::move(impl));
}

int Server::port() const {
  return impl_ ? impl_->port : 0;
}
std::string Server::endpoint() const {
  return impl_ ? impl_->endpoint : std::string();
}

void Server::abort(std::string_view reason) {
  if (!impl_) return;
  impl_->run_on_loop([&] { impl_->core->abort(reason); });
}

std::size_t Server::aborted_joins() const {
  std::size_t n = 0;
  if (impl_) impl_->run_on_loop([&] { n = impl_->core->aborted_joins(); });
  return n;
}

void Server::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    // Called from a callback on the server's own thread: stop serving; the owner joins later.
    impl_->core->stop();
    return;
  }
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->core->stop();
    impl->work.reset();
    // Handlers of closed sockets still queued are dropped with the io_context.
    impl->io.stop();
  });
  impl_->thread.join();
}

}  // namespace mlrun::rendezvous
