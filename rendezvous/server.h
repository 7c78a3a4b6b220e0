// The rendezvous server's engine on a caller's Asio event loop (internal API; the public
// Server in <mlrun/rendezvous.hpp> runs one of these on its own thread).
//
// One io_context, one thread: every connection is a socket with asynchronous reads and writes
// and, while a blocking request (get, wait, barrier, join) is held, a timer. Nothing blocks, so
// an idle, slow or half-open peer only ever costs its own connection.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "mlrun/rendezvous.hpp"

namespace boost::asio {
class io_context;
}

namespace mlrun::rendezvous {

/// Replies one connection may have waiting for its socket before the server stops reading its
/// requests (until the peer reads them): at most this plus one reply is held per connection.
inline constexpr std::size_t kMaxUnsentReplyBytes = std::size_t{256} << 10;

/// Connections that have not authenticated yet (the fd limit's half when that is lower): past
/// it the oldest is closed. A legitimate client authenticates within milliseconds of connecting,
/// so a flood of silent connections cannot keep it out.
inline constexpr std::size_t kMaxPendingConnections = 8192;
/// Failed authentications one peer address may make in a burst, and per second after it; past
/// them its hellos are refused unchecked ("throttled") until the budget refills.
inline constexpr double kAuthFailureBurst = 32;
inline constexpr double kAuthFailuresPerSecond = 10;
/// Addresses whose budget is remembered (the oldest refilled ones are forgotten past it).
inline constexpr std::size_t kMaxThrottledAddresses = 65536;

class ServerCore {
 public:
  /// Binds and listens (throws ConnectionError when it cannot, Error for bad options), and
  /// queues the first accept on io. io must be run by exactly one thread, and every member
  /// function below must be called on that thread (or before the loop runs / after it stopped).
  ServerCore(boost::asio::io_context& io, ServerOptions options);
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;
  /// Calls stop().
  ~ServerCore();

  int port() const;
  /// "host:port" ("[v6]:port" for an IPv6 host).
  std::string endpoint() const;

  /// Aborts the job: every held request and every later one gets kAborted with the reason.
  /// The first reason wins; options.on_abort is called once.
  void abort(std::string_view reason);
  /// For a launcher starting a new attempt after an abort: requests are served again.
  void clear_abort();
  /// The abort reason, if the job is aborted.
  std::optional<std::string> aborted() const;
  /// Joins answered with the abort, held ones included: each a node (or process) that learned
  /// of it while joining.
  std::size_t aborted_joins() const;

  /// Connections open now (authenticated or not).
  std::size_t connections() const;
  /// TCPStore connections refused for their address (docs/torch-store.md).
  std::size_t torch_refused() const;
  /// Blocking requests (get, wait, barrier, join) held now.
  std::size_t held_requests() const;
  /// Memory charged to the server's one cap now (rendezvous/memory.h), and join groups in the
  /// making (finished ones are freed).
  std::size_t memory_used() const;
  std::size_t open_join_groups() const;

  /// Stops accepting, fails every held request with kShuttingDown and closes every
  /// connection. Idempotent. Handlers still queued on io finish harmlessly.
  void stop();

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

/// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the soft limit now in force.
std::size_t raise_open_file_limit();

}  // namespace mlrun::rendezvous
