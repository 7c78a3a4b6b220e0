#include "rendezvous/server.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <netinet/tcp.h>

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <deque>
#include <future>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "rendezvous/protocol.h"

namespace mlrun::rendezvous {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using namespace proto;

namespace {

// Connections with unflushed bytes get this long at most to drain before they are cut.
constexpr auto kMaxLinger = std::chrono::seconds(1);
// After accept fails for lack of descriptors, wait this long before trying again (retrying at
// once would spin: the pending connection stays in the backlog).
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);
// Each connection reads into a buffer this large (grown for a larger frame, then shrunk back):
// one recv usually takes a whole request, and 16,384 connections hold 4 MiB.
constexpr std::size_t kReadChunk = 256;
// Connections taken from the backlog synchronously per wake-up, before yielding to the loop.
constexpr int kAcceptBurst = 512;
// Listening sockets on the one port (SO_REUSEPORT; the kernel spreads new connections over
// them). Each has its own accept queue, capped at net.core.somaxconn (4,096 on stock kernels):
// a storm of 16,384 ranks connecting at once overflows a single queue into one-second SYN
// retransmits, however fast the loop accepts. Eight queues hold 32,768 at the stock cap.
constexpr int kListeners = 8;

enum class Held { kNone, kGet, kWait, kBarrier, kJoin, kElasticJoin };

// TCP keepalive on every accepted connection: a peer silent this long is gone.
constexpr int kKeepaliveIdleS = 10;
constexpr int kKeepaliveIntervalS = 5;
constexpr int kKeepaliveProbes = 3;
constexpr int kPeerSilenceBoundS = kKeepaliveIdleS + kKeepaliveIntervalS * kKeepaliveProbes;

struct Conn {
  Conn(asio::io_context& io, tcp::socket s) : socket(std::move(s)), deadline(io), wait_timer(io) {}

  tcp::socket socket;
  asio::steady_timer deadline;    // handshake, rest of a frame, or flushing before close
  asio::steady_timer wait_timer;  // timeout of the held request
  std::uint64_t deadline_seq = 0;
  std::string peer;
  bool authed = false;
  // Set once a join completed for this connection: "index 2 of join group \"g\"". Such a
  // connection timing out (keepalive) means a member of the job vanished.
  std::string joined;
  bool clean_eof = false;  // the peer closed the connection (FIN), not a reset or a timeout
  bool closing = false;    // last reply queued; close once it is flushed
  bool closed = false;     // out of the registry, socket closed
  bool in_flight = false;  // a request read and not yet answered
  // Received bytes not yet handled: in[0, in_used). header: the last decoded frame header.
  std::vector<std::uint8_t> in;
  std::size_t in_used = 0;
  bool partial = false;  // an authenticated peer's unfinished frame; its deadline is armed
  Header header;
  // At most two frames: the reply to the one request in flight, and a final error.
  std::deque<std::string> out;
  bool writing = false;

  // The held (blocking) request, answered when its condition holds or its timer fires.
  Held held = Held::kNone;
  std::uint64_t held_seq = 0;
  Op held_op = Op::kHello;
  std::uint32_t held_id = 0;
  std::uint32_t held_timeout_ms = 0;
  std::string held_name;  // get/wait: the key registered on; barrier/join: the name
  std::vector<std::string> wait_keys;
  std::size_t wait_next = 0;  // wait: index of the first key not yet seen set
};
using ConnPtr = std::shared_ptr<Conn>;

struct BarrierState {
  std::uint32_t count = 0;
  std::unordered_set<Conn*> arrived;
};

struct JoinMember {
  std::uint64_t seq = 0;  // join order
  std::int32_t index = -1;
  std::uint32_t weight = 1;
};

struct JoinGroup {
  std::uint32_t size = 0;
  bool complete = false;
  std::unordered_map<Conn*, JoinMember> members;
  std::unordered_set<std::int32_t> claimed;
};

// Elastic groups (docs/protocol.md, "Elastic groups"): membership rounds of nodes that come and
// go. A waiter for the next round.
struct ElasticWaiter {
  Conn* conn = nullptr;
  std::string member;
  std::int32_t hint = -1;
  std::uint32_t weight = 1;
  std::uint64_t seq = 0;
};
// A member of the round that closed last, at its index.
struct ElasticSeat {
  std::string member;
  std::uint32_t weight = 1;
  bool alive = true;
};
// When a member was last heard from, and the connection its heartbeats come on.
struct Heard {
  std::chrono::steady_clock::time_point at{};
  std::chrono::system_clock::time_point wall{};
  Conn* conn = nullptr;
};
struct LostMember {
  std::uint32_t index = 0;
  std::string member;
  std::string last_heard;  // "HH:MM:SS" local time
  double silent_s = 0;
  std::string why;
};
struct ElasticGroup {
  bool configured = false;
  std::uint32_t min = 1, max = 1, last_call_ms = 0, heartbeat_timeout_ms = 0;
  std::uint32_t next_round = 0;  // the round being formed
  bool running = false;          // round next_round - 1 has closed; seats are its members
  std::vector<ElasticSeat> seats;
  std::vector<ElasticWaiter> waiting;
  std::shared_ptr<asio::steady_timer> last_call;
  bool last_call_passed = false;
  std::unordered_map<std::string, Heard> heard;
  std::unordered_map<std::string, std::string> lost_members;  // member -> why
  std::vector<std::string> joined;                            // new members, this round
  std::vector<LostMember> lost;                               // seats lost, this round
};

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

std::string quoted(std::string_view s) {
  return "\"" + sanitize({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}, 128) + "\"";
}

}  // namespace

std::size_t raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<std::size_t>(limit.rlim_cur);
}

class ServerCore::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ServerOptions options) : io_(io), options_(std::move(options)) {}

  void listen();
  int port() const { return port_; }
  std::string endpoint() const { return endpoint_; }
  void abort(std::string_view reason);
  void clear_abort() { aborted_.reset(); }
  const std::optional<std::string>& aborted() const { return aborted_; }
  std::size_t connections() const { return conns_.size(); }
  std::size_t held_requests() const {
    return static_cast<std::size_t>(std::count_if(
        conns_.begin(), conns_.end(), [](const auto& c) { return c.second->held != Held::kNone; }));
  }
  void stop();

 private:
  void log(std::string_view line) {
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "mlrun rdzv: %.*s\n", static_cast<int>(line.size()), line.data());
    }
  }

  // Accepting.
  struct Listener {
    explicit Listener(asio::io_context& io) : acceptor(io), retry_timer(io) {}
    tcp::acceptor acceptor;
    asio::steady_timer retry_timer;
  };
  bool bind_listeners(const tcp::endpoint& at, std::string* why);
  void accept(Listener& l);
  void drain_backlog(tcp::acceptor& acceptor);
  void adopt(tcp::socket socket);

  // Reading and writing.
  void read_more(const ConnPtr& c);
  // Handles every whole frame in c->in; false when the connection is closing.
  bool take_frames(const ConnPtr& c);
  void arm_deadline(const ConnPtr& c, std::chrono::milliseconds after, std::string_view why);
  void send(const ConnPtr& c, std::string frame);
  void write_next(const ConnPtr& c);
  void reply(const ConnPtr& c, std::string frame) {
    c->in_flight = false;
    send(c, std::move(frame));
  }
  // Replies with an error, logs one line with the peer, and closes after the reply is sent.
  void refuse(const ConnPtr& c, std::uint8_t op, std::uint32_t id, Status status,
              std::string_view message, std::string_view log_line);
  void close_after_flush(const ConnPtr& c);
  void linger(const ConnPtr& c);
  void close(const ConnPtr& c);
  // A member of a completed join whose connection timed out (its host died or its link was cut,
  // so no FIN or RST came) is gone for good: abort the job, naming it.
  void lost_if_silent(const ConnPtr& c, const error_code& ec);

  // Requests.
  void on_frame(const ConnPtr& c, std::span<const std::uint8_t> payload);
  void on_hello(const ConnPtr& c, const Hello& r);
  void dispatch(const ConnPtr& c, Request& request);
  void handle(const ConnPtr& c, Set& r);
  void handle(const ConnPtr& c, Get& r);
  void handle(const ConnPtr& c, Add& r);
  void handle(const ConnPtr& c, CompareSet& r);
  void handle(const ConnPtr& c, Wait& r);
  void handle(const ConnPtr& c, Delete& r);
  void handle(const ConnPtr& c, Barrier& r);
  void handle(const ConnPtr& c, Join& r);
  void handle(const ConnPtr& c, Heartbeat& r);
  void handle(const ConnPtr& c, Abort& r);
  void handle(const ConnPtr& c, ElasticJoin& r);
  void handle(const ConnPtr& c, MemberHeartbeat& r);
  void handle(const ConnPtr&, Hello&) {}

  // Elastic groups.
  void maybe_close_round(const std::string& name);
  void close_round(const std::string& name, ElasticGroup& g);
  // quiet: no log line (a member that closed its connection cleanly, as every node does when the
  // job ends; the nodes report membership changes themselves).
  void lose_member(const std::string& name, ElasticGroup& g, std::uint32_t index, std::string why,
                   bool quiet = false);
  void publish_change(const std::string& name, ElasticGroup& g);
  void sweep();
  std::string elastic_wait_text(const std::string& name, const ElasticGroup& g) const;
  // Sets a key from the server itself (no size check against a client's request) and wakes
  // its waiters.
  void put(const std::string& key, std::string value);

  // The store.
  bool store(const ConnPtr& c, const std::string& key, std::string value);
  void notify(const std::string& key);
  bool advance_wait(Conn& c);

  // Held requests.
  void hold(const ConnPtr& c, Held kind, std::uint32_t timeout_ms, std::string name);
  void unhold(Conn& c);
  void on_timeout(const ConnPtr& c);
  ConnPtr find(Conn* c) {
    auto it = conns_.find(c);
    return it == conns_.end() ? nullptr : it->second;
  }

  asio::io_context& io_;
  ServerOptions options_;
  // kListeners sockets bound to one address and port; never resized after listen().
  std::vector<std::unique_ptr<Listener>> listeners_;
  int port_ = 0;
  std::string endpoint_;
  bool stopped_ = false;
  std::optional<std::string> aborted_;
  std::chrono::steady_clock::time_point last_accept_error_log_{};

  std::unordered_map<Conn*, ConnPtr> conns_;
  std::unordered_map<std::string, std::string> store_;
  std::size_t store_bytes_ = 0;
  std::unordered_map<std::string, std::unordered_set<Conn*>> key_waiters_;
  std::unordered_map<std::string, BarrierState> barriers_;
  std::unordered_map<std::string, JoinGroup> groups_;
  std::uint64_t join_seq_ = 0;
  std::unordered_map<std::string, ElasticGroup> elastic_;
  // Heartbeat connections: a member's lifeline. Its close loses the member.
  std::unordered_map<Conn*, std::pair<std::string, std::string>> heartbeat_conns_;
  std::unique_ptr<asio::steady_timer> sweep_timer_;
};

// --- Accepting -------------------------------------------------------------------------------

void ServerCore::Impl::listen() {
  if (options_.token.empty()) throw Error("listen", "", options_.host, "the token is empty");
  if (options_.token.size() > kMaxTokenBytes) {
    throw Error("listen", "", options_.host, "the token is longer than kMaxTokenBytes");
  }
  if (options_.port < 0 || options_.port > 65535) {
    throw Error("listen", "", options_.host, fmt::format("bad port {}", options_.port));
  }
  raise_open_file_limit();
  std::string where = fmt::format("{}:{}", options_.host, options_.port);
  error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    throw ConnectionError("listen", "", where, "cannot resolve the host: " + ec.message());
  }
  std::string last_error;
  // With port 0 another process may take the free port between the claim and the group's bind
  // (bind_listeners): then another free port is tried.
  const int attempts = options_.port == 0 ? 3 : 1;
  for (int i = 0; i < attempts && listeners_.empty(); ++i) {
    for (const auto& entry : results) {
      if (bind_listeners(entry.endpoint(), &last_error)) break;
    }
  }
  if (listeners_.empty()) throw ConnectionError("listen", "", where, last_error);
  port_ = listeners_.front()->acceptor.local_endpoint().port();
  // The caller's host as given (a name stays a name: it is what remote clients resolve).
  endpoint_ = options_.host.find(':') == std::string::npos
                  ? fmt::format("{}:{}", options_.host, port_)
                  : fmt::format("[{}]:{}", options_.host, port_);
  for (auto& l : listeners_) accept(*l);
}

bool ServerCore::Impl::bind_listeners(const tcp::endpoint& at, std::string* why) {
  using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
  // First a plain socket (no SO_REUSEPORT) claims the port: this fails while anything listens
  // there, so the group below never joins another server's group on a port given twice (two
  // jobs with one --master_port must fail like torchrun does, not share connections). Port 0
  // becomes a free port here.
  error_code e;
  tcp::endpoint target = at;
  {
    tcp::acceptor probe(io_);
    probe.open(at.protocol(), e);
    if (!e) probe.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) probe.bind(at, e);
    if (!e) target.port(probe.local_endpoint(e).port());
    if (e) {
      *why = e.message();
      return false;
    }
  }
  std::vector<std::unique_ptr<Listener>> group;
  for (int i = 0; i < kListeners && !e; ++i) {
    auto l = std::make_unique<Listener>(io_);
    tcp::acceptor& a = l->acceptor;
    a.open(target.protocol(), e);
    if (!e) a.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) a.set_option(reuse_port(true), e);
    if (!e) a.bind(target, e);
    // A large backlog: a storm of thousands of connecting ranks must not overflow the queue
    // into one-second SYN retransmits (the kernel caps it at somaxconn).
    if (!e) a.listen(options_.listen_backlog, e);
    if (!e) a.non_blocking(true, e);
    if (!e) group.push_back(std::move(l));
  }
  if (e) {
    *why = e.message();
    return false;
  }
  listeners_ = std::move(group);
  return true;
}

void ServerCore::Impl::accept(Listener& l) {
  l.acceptor.async_accept([self = shared_from_this(), &l](error_code ec, tcp::socket socket) {
    if (self->stopped_ || ec == asio::error::operation_aborted) return;
    if (!ec) {
      self->adopt(std::move(socket));
      self->drain_backlog(l.acceptor);
      self->accept(l);
      return;
    }
    // Out of descriptors or memory: say so (at most once a second) and retry shortly.
    auto now = std::chrono::steady_clock::now();
    if (now - self->last_accept_error_log_ > std::chrono::seconds(1)) {
      self->last_accept_error_log_ = now;
      self->log(fmt::format("accept failed: {}", ec.message()));
    }
    l.retry_timer.expires_after(kAcceptRetry);
    l.retry_timer.async_wait([self, &l](error_code e) {
      if (!e && !self->stopped_) self->accept(l);
    });
  });
}

void ServerCore::Impl::drain_backlog(tcp::acceptor& acceptor) {
  // The acceptor is non-blocking: take what is already queued in one go instead of one
  // connection per trip through the loop.
  for (int i = 0; i < kAcceptBurst; ++i) {
    error_code ec;
    tcp::socket socket(io_);
    acceptor.accept(socket, ec);
    if (ec) return;
    adopt(std::move(socket));
  }
}

void ServerCore::Impl::adopt(tcp::socket socket) {
  auto c = std::make_shared<Conn>(io_, std::move(socket));
  error_code ec;
  c->socket.set_option(tcp::no_delay(true), ec);
  c->socket.non_blocking(true, ec);  // send() writes at once when the socket takes it
  c->in.resize(kReadChunk);
  // A peer that vanishes without a FIN or RST (a dead host, a cut link) fails its connection
  // with ETIMEDOUT within kPeerSilenceBound: keepalive probes an idle connection, and the user
  // timeout bounds replies sent into a dead link.
  int fd = c->socket.native_handle();
  int on = 1, idle = kKeepaliveIdleS, interval = kKeepaliveIntervalS, count = kKeepaliveProbes;
  unsigned int user_timeout_ms = kPeerSilenceBoundS * 1000;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
  auto remote = c->socket.remote_endpoint(ec);
  c->peer = ec ? std::string("unknown peer") : endpoint_text(remote.address(), remote.port());
  conns_.emplace(c.get(), c);
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
    if (!c->closing) {
      self->log(fmt::format("closing {}: {} within {} ms", c->peer, why, after.count()));
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
    if (self->take_frames(c)) self->read_more(c);
  });
}

bool ServerCore::Impl::take_frames(const ConnPtr& c) {
  std::size_t begin = 0;
  bool header_decoded = false;  // c->header is that of the frame at `begin`
  while (c->in_used - begin >= kHeaderBytes) {
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
    if (c->in_used - begin < frame) {
      header_decoded = true;
      break;
    }
    on_frame(c, {c->in.data() + begin + kHeaderBytes, c->header.payload_bytes});
    begin += frame;
    if (c->closed || c->closing) return false;
  }
  // Keep the unfinished frame at the front, with room for all of it (payload_bytes was checked
  // against this connection's limit); a buffer grown for a large frame shrinks back after it.
  std::memmove(c->in.data(), c->in.data() + begin, c->in_used - begin);
  c->in_used -= begin;
  std::size_t need =
      header_decoded ? std::max(kReadChunk, kHeaderBytes + c->header.payload_bytes) : kReadChunk;
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
                      c->out.pop_front();
                      if (!c->out.empty()) {
                        self->write_next(c);
                      } else if (c->closing) {
                        self->linger(c);
                      }
                    });
}

void ServerCore::Impl::refuse(const ConnPtr& c, std::uint8_t op, std::uint32_t id, Status status,
                              std::string_view message, std::string_view log_line) {
  log(log_line);
  c->in_flight = false;
  send(c, encode_error(op, id, status, message));
  close_after_flush(c);
}

void ServerCore::Impl::close_after_flush(const ConnPtr& c) {
  if (c->closed || c->closing) return;
  c->closing = true;
  unhold(*c);
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
  c->closed = true;
  error_code ec;
  c->socket.close(ec);
  ++c->deadline_seq;
  c->deadline.cancel();
  c->wait_timer.cancel();
  conns_.erase(c.get());
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
  if (!is_known_op(h.op)) {
    refuse(c, h.op, h.request_id, Status::kBadFrame, "unknown op",
           fmt::format("bad frame from {}: unknown op {}; payload \"{}\"", c->peer, h.op,
                       sanitize(payload)));
    return;
  }
  Request request;
  Status status = Status::kOk;
  std::string_view what;
  if (!parse_request(h.op, payload, request, &status, &what)) {
    refuse(c, h.op, h.request_id, status, what,
           fmt::format("bad frame from {}: {} op: {}; payload \"{}\"", c->peer,
                       op_name(static_cast<Op>(h.op)), what, sanitize(payload)));
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
    reply(c, encode_error(h.op, h.request_id, Status::kAborted, *aborted_));
    return;
  }
  dispatch(c, request);
}

void ServerCore::Impl::on_hello(const ConnPtr& c, const Hello& r) {
  const std::uint32_t id = c->header.request_id;
  constexpr auto op = static_cast<std::uint8_t>(Op::kHello);
  if (!same_token(r.token, options_.token)) {
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
  ++c->deadline_seq;
  c->deadline.cancel();
  reply(c, encode_reply(Op::kHello, id, HelloReply{}));
}

void ServerCore::Impl::dispatch(const ConnPtr& c, Request& request) {
  std::visit([&](auto& body) { handle(c, body); }, request);
}

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

// --- Elastic groups --------------------------------------------------------------------------

void ServerCore::Impl::put(const std::string& key, std::string value) {
  auto it = store_.find(key);
  std::size_t old_bytes = it == store_.end() ? 0 : key.size() + it->second.size();
  store_bytes_ = store_bytes_ - old_bytes + key.size() + value.size();
  store_[key] = std::move(value);
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
  g.waiting.push_back({c.get(), r.member, r.index, r.weight, ++join_seq_});
  std::string name = r.group;
  hold(c, Held::kElasticJoin, r.timeout_ms, r.group);
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
  if (g.heartbeat_timeout_ms > 0 && !sweep_timer_) {
    sweep_timer_ = std::make_unique<asio::steady_timer>(io_);
    sweep();
  }
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
    if (m->held == Held::kElasticJoin) {
      m->held = Held::kNone;
      ++m->held_seq;
      m->wait_timer.cancel();
    }
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

void ServerCore::Impl::sweep() {
  if (stopped_) return;
  auto now = std::chrono::steady_clock::now();
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
std::size_t ServerCore::held_requests() const {
  return impl_->held_requests();
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
  impl->thread = std::thread([io = &impl->io] { io->run(); });
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
