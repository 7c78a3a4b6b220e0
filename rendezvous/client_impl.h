// The rendezvous client's insides, shared by its source files (internal, not installed):
//   client.cc      errors; the connection: connecting with retries, hello, request and reply
//                  framing, a reply's status as the error it names; from_env and the accessors
//   client_ops.cc  the typed operations: the key-value store, barriers, NCCL unique IDs, joins
//                  (trainer, node, elastic), heartbeats and abort
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/protocol.h"

namespace mlrun::rendezvous {

// The protocol's messages by their own names: this header is included by the client's source
// files only.
using namespace proto;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Keys and names in messages are the caller's own strings, but may be binary: keep them short
// and printable.
inline std::string printable(std::string_view s) {
  return sanitize({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}, 200);
}

inline std::uint32_t to_wire_ms(milliseconds timeout) {
  // 0 on the wire means "do not wait"; a blocking call waits at least 1 ms.
  if (timeout.count() < 1) return 1;
  if (timeout.count() > 0xfffffffeLL) return 0xfffffffeu;
  return static_cast<std::uint32_t>(timeout.count());
}

// One connection to the server (client.cc).
struct Client::Impl {
  int fd = -1;
  // Held where fd is closed (drop) and where another thread shuts it down (interrupt), so that
  // an interrupt never reaches a descriptor that was closed, and maybe reused, meanwhile.
  std::mutex fd_mutex;
  std::string endpoint;
  ClientOptions options;
  int rank = -1, world_size = -1, local_rank = -1, local_world_size = -1, node_rank = -1;
  std::uint32_t next_id = 1;
  std::string lost;  // why the connection is unusable; empty while it is fine
  // Received and not yet consumed: in[in_begin, in_end).
  std::uint8_t in[4096];
  std::size_t in_begin = 0, in_end = 0;
  // The request id of a `hello` sent and not yet answered (ClientOptions::defer_hello); 0: none.
  std::uint32_t hello_pending = 0;

  ~Impl();

  void drop(std::string why);

  [[noreturn]] void connection_lost(std::string_view op, std::string_view subject,
                                    std::string detail);

  void send_all(std::string_view op, std::string_view subject, std::string_view data,
                Clock::time_point deadline);

  // Copies the next `size` bytes of the reply stream to `out`. Replies come through a small
  // buffer, so that a frame's header and payload cost one recv (the floor of the benchmark,
  // bench/rdzv, is one recv per round trip); a payload larger than the buffer goes straight
  // to `out`.
  void recv_exact(std::string_view op, std::string_view subject, std::uint8_t* out,
                  std::size_t size, Clock::time_point deadline, milliseconds waited);

  // One recv of at most `size` bytes, waiting for them first: a reply is never there the
  // moment its request has gone, so poll comes before the recv, not after an EAGAIN.
  std::size_t receive(std::string_view op, std::string_view subject, std::uint8_t* out,
                      std::size_t size, Clock::time_point deadline, milliseconds waited);

  // Sends request and returns the reply's payload when its status is kOk; throws the error
  // type of any other status, except `tolerated`, which returns nullopt.
  std::optional<std::vector<std::uint8_t>> call(std::string_view op, std::string_view subject,
                                                const Request& request, milliseconds reply_within,
                                                Status tolerated = Status::kOk);

  // Reads the reply to request id of op (reply_within since deadline's start): its payload when
  // its status is kOk; else as call().
  std::optional<std::vector<std::uint8_t>> read_reply(std::string_view op, std::string_view subject,
                                                      std::uint32_t id, Op request_op,
                                                      Clock::time_point deadline,
                                                      milliseconds reply_within, Status tolerated);

  [[noreturn]] void throw_status(std::string_view op_view, std::string_view subject_view,
                                 Status status, std::string message);

  template <typename Body>
  Body call_for(std::string_view op, std::string_view subject, const Request& request,
                milliseconds reply_within) {
    auto payload = call(op, subject, request, reply_within);
    Body body;
    if (!parse_reply(*payload, body)) {
      drop("bad reply");
      throw ProtocolError(std::string(op), printable(subject), endpoint, "malformed reply payload");
    }
    return body;
  }

  void check_key(std::string_view op, std::string_view key);
  void check_value(std::string_view op, std::string_view key, std::size_t size);

  milliseconds quick() const { return options.timeout; }
  static milliseconds blocking(milliseconds timeout) {
    return milliseconds(to_wire_ms(timeout)) + kReplyGrace;
  }
  std::string scoped(std::string_view kind, std::string_view name) const {
    return fmt::format("mlrun/{}/g{}/{}", kind, options.generation, name);
  }
};

}  // namespace mlrun::rendezvous
