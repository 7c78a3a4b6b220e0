// The rendezvous server's insides, shared by its source files (internal, not installed):
//   server_accept.cc   the listening sockets and the accept loop
//   server.cc          connections (adopting, reading, writing, closing); hello, dispatch,
//                      abort and stop; ServerCore and the public Server
//   server_store.cc    the key-value store, barriers, joins, and held (blocking) requests
//   server_elastic.cc  elastic groups: membership rounds, member heartbeats, lost members
//   server_admission.cc  unauthenticated connections (cap, eviction), failed-auth throttling,
//                      rate-limited refusal logs
//   server_torch.cc    PyTorch's TCPStore protocol on the same port (docs/torch-store.md)
#pragma once

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/memory.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"
#include "rendezvous/torch_space.h"
#include "rendezvous/torch_store.h"

namespace mlrun::rendezvous {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
// The protocol's messages by their own names: this header is included by the server's
// source files only.
using namespace proto;

// TCP keepalive on every accepted connection (set on the listeners, server_accept.cc): a peer
// silent this long is gone.
inline constexpr int kKeepaliveIdleS = 10;
inline constexpr int kKeepaliveIntervalS = 5;
inline constexpr int kKeepaliveProbes = 3;
inline constexpr int kPeerSilenceBoundS = kKeepaliveIdleS + kKeepaliveIntervalS * kKeepaliveProbes;

// A connection that speaks PyTorch's TCPStore protocol (server_torch.cc).
struct TorchConn {
  torch::Dialect dialect = torch::Dialect::kUnknown;  // kUnknown: silent so far (1.13 callback)
  std::uint64_t generation = 0;                       // the key space it belongs to
  bool validated = false;                             // torch 2.x: VALIDATE seen
  // Unconsumed input starts at c->in[begin]: requests behind a waiting one are served in place
  // when it completes, without moving the buffer a pending read writes into.
  std::size_t begin = 0;
  // The waiting request (WAIT, GET, MULTI_GET), answered once all its keys are set. GET and
  // MULTI_GET hold the requests behind them; WAIT does not (server_torch.cc).
  bool holding = false;
  torch::Request held;
  std::size_t next = 0;    // held.keys[next] is the first key not yet seen set
  std::string waiting_on;  // the key it is registered on in torch_waiters_
  std::size_t held_bytes = 0;  // charged to the server's memory cap while holding
};

enum class Held { kNone, kGet, kWait, kBarrier, kJoin, kElasticJoin };

struct Conn {
  Conn(asio::io_context& io, tcp::socket s) : socket(std::move(s)), deadline(io), wait_timer(io) {}

  tcp::socket socket;
  asio::steady_timer deadline;    // handshake, rest of a frame, or flushing before close
  asio::steady_timer wait_timer;  // timeout of the held request
  std::uint64_t deadline_seq = 0;
  std::string peer;
  std::string peer_address;  // the peer's IP address alone: failed-auth throttling is per address
  std::optional<asio::ip::address> peer_ip;  // unset when accept gave no address
  bool authed = false;
  // Not yet authenticated: listed in pending_ (oldest first), evicted first when it is full, or
  // (from a job node's address, with the TCPStore served: pending_peer) in pending_peers_.
  bool pending = false;
  bool pending_peer = false;
  std::list<Conn*>::iterator pending_at;
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
  // Replies not yet taken by the socket, and their bytes. A client that sends requests without
  // reading the replies would make this grow without end: past kMaxUnsentReplyBytes the server
  // stops handling and reading the connection's requests until the socket drains it (paused).
  std::deque<std::string> out;
  std::size_t out_bytes = 0;
  bool writing = false;
  bool paused = false;  // no read pending: the unsent replies are over the bound

  // The held (blocking) request, answered when its condition holds or its timer fires.
  Held held = Held::kNone;
  std::uint64_t held_seq = 0;
  Op held_op = Op::kHello;
  std::uint32_t held_id = 0;
  std::uint32_t held_timeout_ms = 0;  // the timeout it runs for (capped at max_hold)
  bool held_capped = false;           // it asked for longer than max_hold
  std::string held_name;  // get/wait: the key registered on; barrier/join: the name
  std::vector<std::string> wait_keys;
  std::size_t wait_next = 0;  // wait: index of the first key not yet seen set
  // Charged to the server's memory cap while held: this request's part of the waiter lists,
  // barriers and join groups, and its key list.
  std::size_t held_bytes = 0;

  std::unique_ptr<TorchConn> torch;  // set for a TCPStore client
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

// While a join group or an elastic round is incomplete, the server says so in its log now and
// then (ServerCore::Impl::report_wait): who joined, whom it waits for, and for how long.
struct WaitReport {
  std::shared_ptr<asio::steady_timer> timer;
  std::chrono::steady_clock::time_point since{};
  std::uint32_t bound_ms = 0;  // the first waiter's timeout
};

struct JoinGroup {
  std::uint32_t size = 0;
  std::unordered_map<Conn*, JoinMember> members;
  std::unordered_set<std::int32_t> claimed;
  WaitReport report;
  std::uint64_t weight = 0;  // of the members so far
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
// A node of a fixed-size job that sends node heartbeats on a connection (docs/protocol.md).
struct NodeLiveness {
  std::string who;
  std::uint32_t timeout_ms = 0;
  bool close_is_loss = false;  // node_watch: the connection's close before a disarm loses it
  std::chrono::steady_clock::time_point at{};
  std::chrono::system_clock::time_point wall{};
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
  WaitReport report;                                          // while some wait for a round
};

// An address as the TCPStore allow list holds it (an IPv4-mapped IPv6 address as IPv4).
std::string torch_address(const asio::ip::address& a);

// s, sanitised and cut to 128 bytes, in double quotes: for error messages and log lines.
std::string quoted(std::string_view s);

class ServerCore::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ServerOptions options)
      : io_(io), options_(std::move(options)), memory_(options_.max_memory) {}

  void listen();
  int port() const { return port_; }
  std::string endpoint() const { return endpoint_; }
  void abort(std::string_view reason);
  void clear_abort() { aborted_.reset(); }
  const std::optional<std::string>& aborted() const { return aborted_; }
  std::size_t aborted_joins() const { return aborted_joins_; }
  std::size_t connections() const { return conns_.size(); }
  std::size_t torch_refused() const { return torch_refused_; }
  std::size_t held_requests() const {
    return static_cast<std::size_t>(std::count_if(
        conns_.begin(), conns_.end(), [](const auto& c) { return c.second->held != Held::kNone; }));
  }
  std::size_t memory_used() const { return memory_.used(); }
  std::size_t open_join_groups() const { return groups_.size(); }
  void stop();

 private:
  void log(std::string_view line) {
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "mlrun rdzv: %.*s\n", static_cast<int>(line.size()), line.data());
    }
  }

  // Admission (server_admission.cc): unauthenticated connections are capped (oldest evicted),
  // failed authentications throttled per address, and refusals logged at most once a second per
  // kind, with a count of those not shown.
  void admit(const ConnPtr& c);
  void unpend(Conn& c);
  bool evict_oldest(std::string_view why);
  bool evict_oldest_of(std::list<Conn*>& list, std::size_t cap, std::string_view why);
  // True when c's address has used up its failed-authentication budget: its hello is refused
  // unchecked. auth_failed spends from the budget.
  bool throttled(const Conn& c);
  void auth_failed(const Conn& c);
  void log_limited(std::string_view kind, std::string_view line);
  void flush_limited_logs();
  struct AuthBudget {
    double left = 0;
    std::chrono::steady_clock::time_point at{};
  };
  struct LogLimit {
    std::chrono::steady_clock::time_point last{};
    std::size_t suppressed = 0;
  };
  std::list<Conn*> pending_;
  // Unauthenticated connections from the job's nodes' addresses (not loopback) while the TCPStore
  // is served: torch 1.13 clients' silent second connections, one per rank, until the handshake
  // deadline keeps them (keep_silent_torch). Capped apart, at max_pending_peers_, so that a job
  // of more than kMaxPendingConnections ranks does not evict its own ranks' connections, and
  // evicted only after strangers.
  std::list<Conn*> pending_peers_;
  std::size_t max_pending_peers_ = 0;  // set by listen(): the fd limit's half
  std::size_t max_pending_ = 0;  // set by listen(): kMaxPendingConnections or the fd limit's half
  std::unordered_map<std::string, AuthBudget> auth_budgets_;
  std::unordered_map<std::string, LogLimit> log_limits_;

  // Accepting.
  struct Listener {
    explicit Listener(asio::io_context& io) : acceptor(io), retry_timer(io) {}
    tcp::acceptor acceptor;
    asio::steady_timer retry_timer;
  };
  bool bind_listeners(const tcp::endpoint& at, std::string* why);
  void accept(Listener& l);
  std::size_t accept_burst_ = 0;  // set by listen(): per listener and wake-up
  // Accepts what is queued (accept_burst_ at most); the error that stopped it when it is one
  // accepting again cannot cure (out of descriptors or memory), else success.
  error_code drain_backlog(tcp::acceptor& acceptor);
  void adopt(tcp::socket socket, const std::optional<tcp::endpoint>& remote);

  // Reading and writing.
  void read_more(const ConnPtr& c);
  // Handles what c has buffered, then reads more unless its unsent replies are over the bound.
  void take_and_read(const ConnPtr& c);
  static bool backlogged(const Conn& c) { return c.out_bytes > kMaxUnsentReplyBytes; }
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
  void handle(const ConnPtr& c, NodeHeartbeat& r);
  void handle(const ConnPtr& c, NodeWatch& r);
  void node_closed(Conn& c);
  void handle(const ConnPtr&, Hello&) {}

  // Elastic groups.
  void maybe_close_round(const std::string& name);
  void close_round(const std::string& name, ElasticGroup& g);
  // quiet: no log line (a member that closed its connection cleanly, as every node does when the
  // job ends; the nodes report membership changes themselves).
  void lose_member(const std::string& name, ElasticGroup& g, std::uint32_t index, std::string why,
                   bool quiet = false);
  void publish_change(const std::string& name, ElasticGroup& g);
  void start_sweep();
  void sweep();
  // Aborts the job when a node's heartbeats stopped while its connection stays open (a hung
  // node: SIGSTOP, D state), naming it.
  void sweep_node_heartbeats(std::chrono::steady_clock::time_point now);
  std::string elastic_wait_text(const std::string& name, const ElasticGroup& g) const;
  // The waiting line: its first after min(30 s, half the first waiter's timeout), then one a
  // minute while the group (elastic: its round) is incomplete.
  void arm_wait_report(WaitReport& r, bool elastic, const std::string& name,
                       std::uint32_t timeout_ms);
  void report_wait(bool elastic, const std::string& name, const asio::steady_timer* armed);
  // Sets a key from the server itself (no size check against a client's request) and wakes
  // its waiters.
  void put(const std::string& key, std::string value);

  // PyTorch's TCPStore protocol (server_torch.cc).
  // Routes a connection that has not authenticated: nullopt when it speaks mlrun's protocol
  // (or garbage, refused there), else what take_frames returns.
  std::optional<bool> route_torch(const ConnPtr& c);
  bool torch_peer(const Conn& c) const;
  // torch_peer, not loopback, with the TCPStore served: a job node's connection (pending_peers_).
  bool torch_node(const Conn& c) const;
  // A silent connection from a TCPStore peer when the handshake deadline passes: torch 1.13's
  // callback connection, which never sends a byte. True: keep it.
  bool keep_silent_torch(const ConnPtr& c);
  // Handles every whole request in c->in; compact: the caller is the read handler, so the
  // buffer may move. False when no read should follow (closing, or paused while waiting).
  bool take_torch(const ConnPtr& c, bool compact);
  bool torch_request(const ConnPtr& c, torch::Request& r);
  // SET, APPEND, MULTI_SET, COMPARE_SET, ADD: changes the key space and wakes its waiters.
  bool torch_write(const ConnPtr& c, torch::Request& r);
  // False when the connection is closed (the request would pass the memory cap).
  bool torch_hold(const ConnPtr& c, torch::Request r);
  void torch_unhold(Conn& c);
  bool torch_advance(TorchConn& t);
  void torch_finish(const ConnPtr& c);
  void torch_notify(const std::string& key);
  void torch_forget(Conn& c);
  // Logs why and closes the connection (the protocol has no error reply); false.
  bool torch_fail(const ConnPtr& c, std::string_view why);
  void torch_new_generation();

  // The store.
  bool store(const ConnPtr& c, const std::string& key, std::string value);
  // Sets the entry at `it` (store_.end(): a new one) unchecked; old_bytes: its charge so far.
  void put_entry(std::unordered_map<std::string, std::string>::iterator it, const std::string& key,
                 std::string value, std::size_t old_bytes);
  void notify(const std::string& key);
  bool advance_wait(Conn& c);

  // Memory (rendezvous/memory.h): true when `bytes` more fit the cap; else replies to c's
  // request with "limit exceeded", naming the cap.
  bool room(const ConnPtr& c, std::size_t bytes);
  std::string memory_full_text() const;
  // What holding a request costs: its waiter-list, barrier or group entry (under `name`) and
  // its key list.
  static std::size_t held_cost(const std::string& name, const std::vector<std::string>& keys);

  // Held requests. hold charges `bytes` (checked by room() first); end_hold gives them back.
  void hold(const ConnPtr& c, Held kind, std::uint32_t timeout_ms, std::string name,
            std::size_t bytes);
  void end_hold(Conn& c);
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
  std::size_t aborted_joins_ = 0;  // Joins answered with the abort (ServerCore::aborted_joins).
  std::chrono::steady_clock::time_point last_accept_error_log_{};

  std::unordered_map<Conn*, ConnPtr> conns_;
  // The one cap on memory held for clients (ServerOptions::max_memory): the store, the TCPStore
  // key space, held requests, join groups, finished groups' records.
  MemoryBudget memory_;
  std::unordered_map<std::string, std::string> store_;
  std::unordered_map<std::string, std::unordered_set<Conn*>> key_waiters_;
  std::unordered_map<std::string, BarrierState> barriers_;
  std::unordered_map<std::string, JoinGroup> groups_;  // in the making
  // Finished join groups, by a hash of the name (kept to refuse a late join as "already
  // complete"; the group itself is freed): kFinishedGroupBytes each.
  std::unordered_set<std::uint64_t> finished_groups_;
  std::uint64_t join_seq_ = 0;
  std::unordered_map<std::string, ElasticGroup> elastic_;
  // Heartbeat connections: a member's lifeline. Its close loses the member.
  std::unordered_map<Conn*, std::pair<std::string, std::string>> heartbeat_conns_;
  // Node heartbeats of fixed-size jobs, by the connection they come on; its close forgets them.
  std::unordered_map<Conn*, NodeLiveness> node_beats_;
  std::unique_ptr<asio::steady_timer> sweep_timer_;

  // TCPStore clients' keys: one key space per generation (kTorchStoreGenerationKey).
  std::uint64_t torch_generation_ = 0;
  torch::KeySpace torch_space_{memory_};
  std::unordered_map<std::string, std::unordered_set<Conn*>> torch_waiters_;
  // Addresses of connections that authenticated with the token: the job's nodes.
  std::unordered_set<std::string> torch_peers_;
  std::size_t torch_refused_ = 0;
};

}  // namespace mlrun::rendezvous
