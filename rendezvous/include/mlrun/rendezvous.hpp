// mlrun's rendezvous: a server that hands out ranks, a key-value store, barriers and NCCL unique
// IDs to the processes of one job, and the client library those processes use. See docs/design.md
// §5, docs/protocol.md (the wire format) and docs/errors.md (what to do after each error).
//
//   Client c = Client::from_env();            // in a worker started by mlrun
//   c.set("k", "v");  std::string v = c.get("k");
//   std::array<char, 128> id = c.nccl_unique_id("world");
//
//   Server s = Server::start(ServerOptions{"127.0.0.1", 0, token});   // a trainer's own server
//   Client k = Client::connect(s.endpoint(), token);
//   k.join(world_size);                       // ranks in join order
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mlrun/rendezvous_export.hpp"

namespace mlrun::rendezvous {

/// Bound of every blocking call made without an explicit timeout (get, wait, barrier, join,
/// nccl_unique_id), and of the reply to every other request.
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);
/// Bound of Client::connect and Client::from_env, retries of a refused connection included.
inline constexpr std::chrono::milliseconds kDefaultConnectTimeout = std::chrono::seconds(60);
/// How long past an operation's own timeout the client waits for the server's reply before it
/// gives up on the connection (the server enforces the timeout; this covers a dead server).
inline constexpr std::chrono::milliseconds kReplyGrace = std::chrono::seconds(10);

// --- Errors (docs/errors.md) -----------------------------------------------------------------

/// Base of every error the library throws. what() reads
/// `rendezvous OP "SUBJECT" at PEER: DETAIL` (the subject part only when there is one).
class MLRUN_RDZV_EXPORT Error : public std::runtime_error {
 public:
  Error(std::string op, std::string subject, std::string peer, std::string detail);
  /// The operation: "get", "barrier", "connect", ...
  const std::string& op() const noexcept { return op_; }
  /// The key, barrier, communicator or group name the operation was about; may be empty.
  const std::string& subject() const noexcept { return subject_; }
  /// The server's endpoint ("host:port").
  const std::string& peer() const noexcept { return peer_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string op_, subject_, peer_, detail_;
};
/// The operation's bound passed. The connection stays usable when the server reported it.
class MLRUN_RDZV_EXPORT TimeoutError : public Error {
 public:
  using Error::Error;
};
/// The server refused the token or the job id. The connection is closed.
class MLRUN_RDZV_EXPORT AuthError : public Error {
 public:
  using Error::Error;
};
/// The job was aborted (by any client or by the server's owner); detail() is the reason.
class MLRUN_RDZV_EXPORT AbortedError : public Error {
 public:
  using Error::Error;
};
/// The peer broke the protocol (bad frame, unsupported version). The connection is closed.
class MLRUN_RDZV_EXPORT ProtocolError : public Error {
 public:
  using Error::Error;
};
/// Could not connect, or the connection was lost. The Client is unusable afterwards.
class MLRUN_RDZV_EXPORT ConnectionError : public Error {
 public:
  using Error::Error;
};

// --- Server ----------------------------------------------------------------------------------

/// Setting this key (any value) starts a fresh key space for PyTorch's TCPStore clients and
/// closes their connections: the launcher sets it before each attempt's workers start, so no
/// attempt or elastic round sees another's keys (docs/torch-store.md).
inline constexpr std::string_view kTorchStoreGenerationKey = "mlrun/torch_store/generation";

/// The server's one cap on the memory it holds for clients (store entries with their overhead,
/// TCPStore keys, held requests and their key lists, join groups and barriers): a request that
/// needs more is refused with "limit exceeded" (docs/protocol.md, "Memory").
inline constexpr std::size_t kDefaultMaxMemoryBytes = std::size_t{1} << 30;
/// The longest the server holds a blocking request (get, wait, barrier, join, elastic join),
/// whatever timeout it asks for: then it is answered "timeout" (docs/protocol.md).
inline constexpr std::chrono::milliseconds kDefaultMaxHold = std::chrono::hours(24);

/// An aggregate: ServerOptions{host, port, token} is the usual spelling.
struct ServerOptions {
  /// Address to listen on ("127.0.0.1", "0.0.0.0", "::", a host name).
  std::string host = "127.0.0.1";
  /// 0: any free port (read it back with Server::port()).
  int port = 0;
  /// The job's secret. Every connection must present it first. Must not be empty.
  std::string token{};
  /// When set, clients that name a different job are refused.
  std::string job_id{};
  /// A connection that has not authenticated within this time is closed.
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  /// An authenticated client that stops in the middle of a frame is closed after this time.
  std::chrono::milliseconds frame_timeout = std::chrono::seconds(30);
  /// Requested listen backlog (the kernel caps it at net.core.somaxconn).
  int listen_backlog = 65535;
  /// Receives one line per notable event (refused token, bad frame, ...). Unset: stderr.
  std::function<void(std::string_view line)> log{};
  /// Called once, on the server's thread, when the job is aborted; the reason as given.
  std::function<void(std::string_view reason)> on_abort{};
  /// Whether a client's abort is a log line (`job aborted by PEER: "REASON"`). A process that
  /// says the abort itself when its nodes learn of it (mlrun's launcher, below -vv) turns it
  /// off, so that the reason is not said twice.
  bool log_client_aborts = true;
  /// Called on the server's thread each time a join group takes a member: the group's name,
  /// its members so far (1 to size), its size, and the sum of their weights (for the node
  /// group of Client::join_node: the ranks joined so far). A member that leaves before the
  /// group is complete is not reported; the next join's count says it. Must not block.
  std::function<void(std::string_view group, std::uint32_t joined, std::uint32_t size,
                     std::uint64_t weight)>
      on_join{};
  /// Also serve PyTorch's c10d TCPStore protocol (torch 1.13 and 2.x clients) on this port,
  /// told apart from mlrun's own per connection (docs/torch-store.md). The protocol has no
  /// authentication: only loopback, the addresses of connections that authenticated with the
  /// token, and torch_store_allow may use it; others are refused, logged and counted.
  bool torch_store = false;
  /// More addresses (numeric) allowed to use the TCPStore protocol.
  std::vector<std::string> torch_store_allow{};
  /// The cap on the memory held for clients, in bytes (kDefaultMaxMemoryBytes).
  std::size_t max_memory = kDefaultMaxMemoryBytes;
  /// The longest a blocking request is held (kDefaultMaxHold); at least 1 ms.
  std::chrono::milliseconds max_hold = kDefaultMaxHold;
};

/// A rendezvous server running on its own thread. Move-only; the destructor stops it.
class MLRUN_RDZV_EXPORT Server {
 public:
  /// Listens and starts serving. Throws ConnectionError when it cannot listen and Error for
  /// bad options. Raises this process's open-file soft limit to the hard limit.
  static Server start(ServerOptions options);

  Server(Server&&) noexcept;
  Server& operator=(Server&&) noexcept;
  ~Server();

  /// The port it listens on (the chosen one when options.port was 0).
  int port() const;
  /// "host:port" ("[v6]:port" for an IPv6 host), as Client::connect takes it.
  std::string endpoint() const;
  /// Aborts the job: every waiter and every later request gets AbortedError(reason).
  void abort(std::string_view reason);
  /// Joins (Client::join, join_node) answered with the abort so far, held ones included: a
  /// launcher that aborted at its start can wait until every node has learned of it.
  std::size_t aborted_joins() const;
  /// Stops serving and closes every connection; waits for the server thread. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// --- Client ----------------------------------------------------------------------------------

struct ClientOptions {
  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;
  /// Default bound of blocking calls (get, wait, barrier, join, nccl_unique_id).
  std::chrono::milliseconds timeout = kDefaultTimeout;
  /// Sent with the token; a server with a job id refuses a different one. Empty: any.
  std::string job_id{};
  /// TORCHELASTIC_RESTART_COUNT: barriers, joins, NCCL IDs and GlooStore keys are scoped by it.
  int generation = 0;
  /// connect() sends `hello` and returns without waiting for its reply; the connection's first
  /// request reads it (and throws AuthError, from "connect", where it is a refusal): one round
  /// trip fewer before that request's answer. A server that cannot be reached still fails
  /// connect(). (mlrun's agents, whose first request follows at once: docs/protocol.md.)
  bool defer_hello = false;
  /// Called while connect() retries a server that refuses, cannot be resolved or does not
  /// answer: first after 5 s of trying, then every 30 s, with why the last try failed and how
  /// long it has tried. For a caller that may wait long (a node whose server starts later) and
  /// should say so. Empty: silent.
  std::function<void(const std::string& why, std::chrono::milliseconds waited)> on_connect_retry{};
};

/// Where a node landed in a node-level join.
struct NodeAssignment {
  int node_rank = 0;
  int nnodes = 0;
  int rank_offset = 0;  ///< The node's first global rank.
  int world_size = 0;   ///< Sum of every node's local world size.
};

/// An elastic node-level join (Client::join_elastic): a membership round of between
/// min_nodes and max_nodes nodes.
struct ElasticJoinOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  int local_world_size = 1;
  /// This node's identity across rounds (e.g. "host#random"); it keeps its node rank while it
  /// stays.
  std::string member{};
  /// A node rank to prefer in the first round it joins; -1: none.
  int preferred_rank = -1;
  /// After min_nodes have joined the first round, wait this long for more (torchrun's
  /// last_call_timeout).
  std::chrono::milliseconds last_call = std::chrono::seconds(30);
  /// A member of a running round not heard from for this long is lost (0: never).
  std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(30);
  /// Bound of the whole join.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

/// Where a node landed in an elastic round.
struct ElasticAssignment {
  int round = 0;  ///< The round's number, unique for the group's life: use it as generation.
  NodeAssignment node;
  std::vector<std::string> members;  ///< Member ids in node-rank order.
};

/// One connection to a rendezvous server. Not thread-safe: use one Client per thread (they
/// are cheap). Every blocking call is bounded; errors are the types above.
class MLRUN_RDZV_EXPORT Client {
 public:
  /// For a worker started by mlrun: MLRUN_RDZV_ENDPOINT, MLRUN_RDZV_TOKEN, MLRUN_JOB_ID, RANK,
  /// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RESTART_COUNT. Missing
  /// rank variables leave the accessors at -1 (join() sets rank and world size).
  static Client from_env();
  /// endpoint is "host:port" or "[v6]:port". Retries refused connections until
  /// options.connect_timeout, then authenticates.
  static Client connect(std::string_view endpoint, std::string_view token,
                        ClientOptions options = {});

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  int rank() const noexcept;
  int world_size() const noexcept;
  int local_rank() const noexcept;
  int local_world_size() const noexcept;
  int node_rank() const noexcept;
  int generation() const noexcept;
  const std::string& endpoint() const noexcept;
  std::chrono::milliseconds timeout() const noexcept;
  void set_timeout(std::chrono::milliseconds timeout);

  /// Stores value under key (replacing any value) and wakes everyone waiting for key.
  void set(std::string_view key, std::string value);
  /// The value of key; blocks until some client sets it, up to timeout() / the given timeout.
  std::string get(std::string_view key);
  std::string get(std::string_view key, std::chrono::milliseconds timeout);
  /// The value of key, or nullopt at once when it is not set.
  std::optional<std::string> try_get(std::string_view key);
  /// Adds delta to the integer at key (a missing key counts as 0) and returns the new value.
  /// The value is stored as decimal text, so get() reads it too.
  std::int64_t add(std::string_view key, std::int64_t delta);
  /// Sets key to desired if its value is expected (a missing key matches only ""). Returns the
  /// value held afterwards ("" if the key is still missing).
  std::string compare_set(std::string_view key, std::string_view expected, std::string desired);
  /// Blocks until every key is set.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// Deletes key; returns whether it existed.
  bool remove(std::string_view key);

  /// Blocks until world_size() clients reached the barrier `name` (of this generation).
  /// The same name can be used again once a round completed.
  void barrier(std::string_view name);
  void barrier(std::string_view name, int count, std::chrono::milliseconds timeout);

  /// The NCCL unique ID of communicator `name` for this generation, identical on every member.
  /// The root (rank 0 by default) makes it with ncclGetUniqueId, loaded with dlopen
  /// ("libnccl.so.2"), and publishes it; the others wait for it. The root's process must live
  /// until every member has initialised the communicator (NCCL's bootstrap runs in it). Asking
  /// again in the same generation returns the same bytes. Throws Error when NCCL cannot be
  /// loaded or fails; the members then get an Error too, not a timeout.
  std::array<char, 128> nccl_unique_id(std::string_view name);
  std::array<char, 128> nccl_unique_id(std::string_view name, bool is_root,
                                       std::chrono::milliseconds timeout);

  /// Tells the server this client is alive; throws AbortedError once the job is aborted.
  void heartbeat();
  /// Aborts the job for everyone: every waiter and every later request gets AbortedError.
  void abort(std::string_view reason);

  /// For a trainer without a launcher: its processes join a group of world_size and get ranks
  /// in join order. Blocks until all joined. Sets rank() and world_size(); returns the rank.
  int join(int world_size);
  int join(int world_size, std::chrono::milliseconds timeout);
  /// As join, asking for `rank` (>= 0; -1: join order), e.g. 0 for the process that embeds the
  /// server. Two processes asking for the same rank: the second gets an Error naming it.
  int join(int world_size, int rank, std::chrono::milliseconds timeout);
  /// For a node agent: joins as one of nnodes nodes running local_world_size workers. Nodes are
  /// numbered in join order unless node_rank >= 0 asks for one. Blocks until every node joined.
  /// Sets node_rank(), local_world_size() and world_size().
  NodeAssignment join_node(int nnodes, int local_world_size, int node_rank = -1);
  NodeAssignment join_node(int nnodes, int local_world_size, int node_rank,
                           std::chrono::milliseconds timeout);

  /// For a node agent of an elastic job: joins the next membership round of `group`. Blocks
  /// until the round closes (max_nodes joined, or at least min_nodes and the last call passed,
  /// or every member of the previous round still alive is back). docs/protocol.md, "Elastic
  /// groups". Sets node_rank(), local_world_size() and world_size().
  ElasticAssignment join_elastic(std::string_view group, const ElasticJoinOptions& options);
  /// Tells the server that `member` of elastic `group` is alive; this connection becomes the
  /// member's lifeline (its close loses the member). Throws Error (conflict) once the member
  /// was declared lost, AbortedError once the job is aborted.
  void heartbeat(std::string_view group, std::string_view member);
  /// For a node of a fixed-size job: tells the server that the node `who` ("node 1 (host2)",
  /// at most 256 bytes) is alive. Once this connection has sent one, the server aborts the job
  /// with `who` named when nothing more comes on it for `timeout` while it stays open (a hung
  /// node); closing the connection ends the watch. docs/protocol.md, "Node heartbeats". Throws
  /// AbortedError once the job is aborted, Error from a server that predates protocol 1.2.
  void node_heartbeat(std::string_view who, std::chrono::milliseconds timeout);
  /// After node_heartbeat, for a node that no head watches: with close_is_loss, the server takes
  /// this connection's close for the node's loss and aborts the job naming it (a node killed by
  /// SIGKILL closes its connections like one that ended); a node takes it back (false) before
  /// it closes the connection at its end. Throws Error from a server that predates protocol 1.3.
  void node_watch(bool close_is_loss);

  /// Closes the connection; later calls throw ConnectionError.
  void close() noexcept;
  /// Ends the connection from another thread: a call blocked on it (a get waiting for its key)
  /// throws ConnectionError at once, and so does every later call. The one member that may run
  /// while another thread is inside a call on this Client; never while it is destroyed or moved.
  void interrupt() noexcept;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlrun::rendezvous
