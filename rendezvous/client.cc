#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/endpoint.h"
#include "rendezvous/integer.h"
#include "rendezvous/nccl_library.h"
#include "rendezvous/protocol.h"

namespace mlrun::rendezvous {

using namespace proto;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string what_text(const std::string& op, const std::string& subject, const std::string& peer,
                      const std::string& detail) {
  std::string s = "rendezvous " + op;
  if (!subject.empty()) s += " \"" + subject + "\"";
  if (!peer.empty()) s += " at " + peer;
  return s + ": " + detail;
}

// Keys and names in messages are the caller's own strings, but may be binary: keep them short
// and printable.
std::string printable(std::string_view s) {
  return sanitize({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}, 200);
}

std::uint32_t to_wire_ms(milliseconds timeout) {
  // 0 on the wire means "do not wait"; a blocking call waits at least 1 ms.
  if (timeout.count() < 1) return 1;
  if (timeout.count() > 0xfffffffeLL) return 0xfffffffeu;
  return static_cast<std::uint32_t>(timeout.count());
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

// One non-blocking connect attempt to each address of host:port. Returns the fd or -1 with
// *why set.
int try_connect(const std::string& host, const std::string& port, Clock::time_point deadline,
                std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) {
    *why = std::string("cannot resolve the host: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *why = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int n;
        while ((n = poll(&p, 1, remaining_ms(deadline))) < 0 && errno == EINTR) {
        }
        socklen_t len = sizeof err;
        if (n == 0) {
          err = ETIMEDOUT;
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      *why = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(list);
  return fd;
}

void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A server host that vanishes without a reset is noticed by keepalive probes, not only by
  // the operation's own timeout.
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 30, interval = 5, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  // Keepalive only probes an idle connection; bytes sent into a dead link would otherwise be
  // retransmitted for many minutes. Either way the connection fails within this bound.
  unsigned int user_timeout_ms = (idle + interval * count) * 1000;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

int env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return -1;
  int value = 0;
  if (!parse_integer(std::string_view(text), value, 0)) {
    throw Error("from_env", name, "",
                fmt::format("not a non-negative integer: \"{}\"", printable(text)));
  }
  return value;
}

// What the root publishes instead of an ID when it cannot make one, so that the members fail
// with its reason at once instead of timing out. Never 128 bytes long.
constexpr std::string_view kNcclErrorMarker = "mlrun-nccl-error: ";

}  // namespace

// --- Errors ----------------------------------------------------------------------------------

Error::Error(std::string op, std::string subject, std::string peer, std::string detail)
    : std::runtime_error(what_text(op, subject, peer, detail)),
      op_(std::move(op)),
      subject_(std::move(subject)),
      peer_(std::move(peer)),
      detail_(std::move(detail)) {}

// --- The connection --------------------------------------------------------------------------

struct Client::Impl {
  int fd = -1;
  std::string endpoint;
  ClientOptions options;
  int rank = -1, world_size = -1, local_rank = -1, local_world_size = -1, node_rank = -1;
  std::uint32_t next_id = 1;
  std::string lost;  // why the connection is unusable; empty while it is fine
  // Received and not yet consumed: in[in_begin, in_end).
  std::uint8_t in[4096];
  std::size_t in_begin = 0, in_end = 0;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  void drop(std::string why) {
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (lost.empty()) lost = std::move(why);
  }

  [[noreturn]] void connection_lost(std::string_view op, std::string_view subject,
                                    std::string detail) {
    drop(detail);
    throw ConnectionError(std::string(op), printable(subject), endpoint, std::move(detail));
  }

  void send_all(std::string_view op, std::string_view subject, std::string_view data,
                Clock::time_point deadline) {
    while (!data.empty()) {
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        int r = poll(&p, 1, remaining_ms(deadline));
        if (r == 0) {
          drop("send timed out");
          throw TimeoutError(std::string(op), printable(subject), endpoint,
                             "the server did not take the request in time");
        }
        continue;
      }
      connection_lost(op, subject, std::string("send failed: ") + std::strerror(errno));
    }
  }

  // Copies the next `size` bytes of the reply stream to `out`. Replies come through a small
  // buffer, so that a frame's header and payload cost one recv (the floor of the benchmark,
  // bench/rdzv, is one recv per round trip); a payload larger than the buffer goes straight
  // to `out`.
  void recv_exact(std::string_view op, std::string_view subject, std::uint8_t* out,
                  std::size_t size, Clock::time_point deadline, milliseconds waited) {
    while (size > 0) {
      if (in_begin == in_end) {
        bool direct = size >= sizeof in;
        std::size_t n =
            receive(op, subject, direct ? out : in, direct ? size : sizeof in, deadline, waited);
        if (direct) {
          out += n;
          size -= n;
          continue;
        }
        in_begin = 0;
        in_end = n;
      }
      std::size_t n = std::min(size, in_end - in_begin);
      std::memcpy(out, in + in_begin, n);
      in_begin += n;
      out += n;
      size -= n;
    }
  }

  // One recv of at most `size` bytes, waiting for them first: a reply is never there the
  // moment its request has gone, so poll comes before the recv, not after an EAGAIN.
  std::size_t receive(std::string_view op, std::string_view subject, std::uint8_t* out,
                      std::size_t size, Clock::time_point deadline, milliseconds waited) {
    while (true) {
      pollfd p{fd, POLLIN, 0};
      int r = poll(&p, 1, remaining_ms(deadline));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        // The reply may still come; the connection cannot be trusted to stay in step.
        drop("an earlier reply did not come in time");
        throw TimeoutError(std::string(op), printable(subject), endpoint,
                           fmt::format("no reply from the server within {} ms", waited.count()));
      }
      ssize_t n = ::recv(fd, out, size, 0);
      if (n > 0) return static_cast<std::size_t>(n);
      if (n == 0) connection_lost(op, subject, "the server closed the connection");
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      connection_lost(op, subject, std::string("connection lost: ") + std::strerror(errno));
    }
  }

  // Sends request and returns the reply's payload when its status is kOk; throws the error
  // type of any other status, except `tolerated`, which returns nullopt.
  std::optional<std::vector<std::uint8_t>> call(std::string_view op, std::string_view subject,
                                                const Request& request, milliseconds reply_within,
                                                Status tolerated = Status::kOk) {
    if (fd < 0) {
      throw ConnectionError(std::string(op), printable(subject), endpoint,
                            "the connection is closed: " + (lost.empty() ? "closed" : lost));
    }
    std::uint32_t id = next_id++;
    std::string frame = encode_request(id, request);
    if (frame.size() - kHeaderBytes > kMaxPayloadBytes) {
      throw Error(std::string(op), printable(subject), endpoint,
                  fmt::format("request of {} bytes is over kMaxPayloadBytes ({})",
                              frame.size() - kHeaderBytes, kMaxPayloadBytes));
    }
    auto deadline = Clock::now() + reply_within;
    send_all(op, subject, frame, deadline);
    std::uint8_t header_bytes[kHeaderBytes];
    recv_exact(op, subject, header_bytes, kHeaderBytes, deadline, reply_within);
    Header h;
    DecodeResult r = decode_header({header_bytes, kHeaderBytes}, h, kMaxPayloadBytes);
    if (r.status != DecodeStatus::kOk) {
      drop("bad reply");
      throw ProtocolError(std::string(op), printable(subject), endpoint,
                          fmt::format("bad reply from the server: {}", r.what));
    }
    std::uint8_t expected_op = static_cast<std::uint8_t>(op_of(request)) | kReplyBit;
    if (h.request_id != id || (h.op != expected_op && h.status == Status::kOk)) {
      drop("reply out of step");
      throw ProtocolError(std::string(op), printable(subject), endpoint,
                          "the reply does not match the request");
    }
    std::vector<std::uint8_t> payload(h.payload_bytes);  // checked against the limit above
    recv_exact(op, subject, payload.data(), payload.size(), deadline, reply_within);
    if (h.status == Status::kOk) return payload;
    if (h.status == tolerated) return std::nullopt;
    throw_status(op, subject, h.status, error_message(payload));
  }

  [[noreturn]] void throw_status(std::string_view op_view, std::string_view subject_view,
                                 Status status, std::string message) {
    std::string op(op_view), subject = printable(subject_view);
    switch (status) {
      case Status::kTimeout:
        throw TimeoutError(op, subject, endpoint, message);
      case Status::kAuthFailed:
        drop("authentication failed");
        throw AuthError(op, subject, endpoint, "refused: " + message);
      case Status::kAborted:
        throw AbortedError(op, subject, endpoint, message);
      case Status::kBadFrame:
      case Status::kUnsupportedVersion:
        drop("protocol error");
        throw ProtocolError(op, subject, endpoint,
                            fmt::format("{}: {}", status_name(status), message));
      case Status::kShuttingDown:
        drop("server shutting down");
        throw ConnectionError(op, subject, endpoint, "the server is shutting down");
      default:
        throw Error(op, subject, endpoint, fmt::format("{}: {}", status_name(status), message));
    }
  }

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

  void check_key(std::string_view op, std::string_view key) {
    if (key.size() > kMaxKeyBytes) {
      throw Error(
          std::string(op), printable(key), endpoint,
          fmt::format("key of {} bytes is over kMaxKeyBytes ({})", key.size(), kMaxKeyBytes));
    }
  }
  void check_value(std::string_view op, std::string_view key, std::size_t size) {
    if (size > kMaxValueBytes) {
      throw Error(
          std::string(op), printable(key), endpoint,
          fmt::format("value of {} bytes is over kMaxValueBytes ({})", size, kMaxValueBytes));
    }
  }

  milliseconds quick() const { return options.timeout; }
  static milliseconds blocking(milliseconds timeout) {
    return milliseconds(to_wire_ms(timeout)) + kReplyGrace;
  }
  std::string scoped(std::string_view kind, std::string_view name) const {
    return fmt::format("mlrun/{}/g{}/{}", kind, options.generation, name);
  }
};

// --- Client ----------------------------------------------------------------------------------

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Client Client::connect(std::string_view endpoint, std::string_view token, ClientOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->endpoint = std::string(endpoint);
  impl->options = std::move(options);
  std::optional<Endpoint> parsed = parse_endpoint(endpoint);
  if (!parsed) {
    throw Error("connect", "", impl->endpoint, "the endpoint is not host:port or [v6]:port");
  }
  std::string host = parsed->host, port = std::to_string(parsed->port);
  if (token.empty() || token.size() > kMaxTokenBytes) {
    throw AuthError("connect", "", impl->endpoint,
                    "the token is empty or longer than kMaxTokenBytes");
  }
  if (impl->options.job_id.size() > kMaxJobIdBytes) {
    throw Error("connect", "", impl->endpoint, "the job id is longer than kMaxJobIdBytes");
  }
  // A worker may start before the server listens (a trainer whose rank 0 embeds it): refused
  // connections are retried with backoff until the connect timeout.
  auto start = Clock::now();
  auto deadline = start + impl->options.connect_timeout;
  auto backoff = milliseconds(10);
  std::string why;
  while (true) {
    impl->fd = try_connect(host, port, deadline, &why);
    if (impl->fd >= 0) break;
    if (Clock::now() >= deadline) {
      throw ConnectionError("connect", "", impl->endpoint,
                            fmt::format("no connection within {} ms: {}",
                                        impl->options.connect_timeout.count(), why));
    }
    std::this_thread::sleep_for(
        std::min<milliseconds>(backoff, milliseconds(remaining_ms(deadline))));
    backoff = std::min<milliseconds>(backoff * 2, milliseconds(1000));
  }
  tune_socket(impl->fd);
  auto left = std::max<milliseconds>(milliseconds(remaining_ms(deadline)), milliseconds(1000));
  impl->call_for<HelloReply>("connect", "", Hello{std::string(token), impl->options.job_id}, left);
  return Client(std::move(impl));
}

Client Client::from_env() {
  const char* endpoint = std::getenv("MLRUN_RDZV_ENDPOINT");
  const char* token = std::getenv("MLRUN_RDZV_TOKEN");
  if (endpoint == nullptr || *endpoint == '\0') {
    throw Error("from_env", "MLRUN_RDZV_ENDPOINT", "", "not set; is this process run by mlrun?");
  }
  if (token == nullptr || *token == '\0') {
    throw Error("from_env", "MLRUN_RDZV_TOKEN", "", "not set; is this process run by mlrun?");
  }
  ClientOptions options;
  if (const char* job = std::getenv("MLRUN_JOB_ID")) options.job_id = job;
  // MLRUN_RDZV_ROUND (an elastic job's membership round) when set: it changes without a
  // restart being spent, so TORCHELASTIC_RESTART_COUNT alone would repeat a generation.
  int generation = env_int("MLRUN_RDZV_ROUND");
  if (generation < 0) generation = env_int("TORCHELASTIC_RESTART_COUNT");
  options.generation = generation < 0 ? 0 : generation;
  // Read every variable before connecting, so a bad one is reported without a connection.
  int rank = env_int("RANK"), world = env_int("WORLD_SIZE"), local = env_int("LOCAL_RANK"),
      local_world = env_int("LOCAL_WORLD_SIZE"), node = env_int("GROUP_RANK");
  Client c = connect(endpoint, token, std::move(options));
  c.impl_->rank = rank;
  c.impl_->world_size = world;
  c.impl_->local_rank = local;
  c.impl_->local_world_size = local_world;
  c.impl_->node_rank = node;
  return c;
}

int Client::rank() const noexcept {
  return impl_->rank;
}
int Client::world_size() const noexcept {
  return impl_->world_size;
}
int Client::local_rank() const noexcept {
  return impl_->local_rank;
}
int Client::local_world_size() const noexcept {
  return impl_->local_world_size;
}
int Client::node_rank() const noexcept {
  return impl_->node_rank;
}
int Client::generation() const noexcept {
  return impl_->options.generation;
}
const std::string& Client::endpoint() const noexcept {
  return impl_->endpoint;
}
milliseconds Client::timeout() const noexcept {
  return impl_->options.timeout;
}
void Client::set_timeout(milliseconds timeout) {
  impl_->options.timeout = timeout;
}

void Client::set(std::string_view key, std::string value) {
  impl_->check_key("set", key);
  impl_->check_value("set", key, value.size());
  impl_->call_for<EmptyReply>("set", key, Set{std::string(key), std::move(value)}, impl_->quick());
}

std::string Client::get(std::string_view key) {
  return get(key, impl_->options.timeout);
}

std::string Client::get(std::string_view key, milliseconds timeout) {
  impl_->check_key("get", key);
  return impl_
      ->call_for<ValueReply>("get", key, Get{std::string(key), to_wire_ms(timeout)},
                             Impl::blocking(timeout))
      .value;
}

std::optional<std::string> Client::try_get(std::string_view key) {
  impl_->check_key("get", key);
  auto payload =
      impl_->call("get", key, Get{std::string(key), 0}, impl_->quick(), Status::kNotFound);
  if (!payload) return std::nullopt;
  ValueReply body;
  if (!parse_reply(*payload, body)) {
    impl_->drop("bad reply");
    throw ProtocolError("get", printable(key), impl_->endpoint, "malformed reply payload");
  }
  return std::move(body.value);
}

std::int64_t Client::add(std::string_view key, std::int64_t delta) {
  impl_->check_key("add", key);
  return impl_->call_for<AddReply>("add", key, Add{std::string(key), delta}, impl_->quick()).value;
}

std::string Client::compare_set(std::string_view key, std::string_view expected,
                                std::string desired) {
  impl_->check_key("compare_set", key);
  impl_->check_value("compare_set", key, std::max(expected.size(), desired.size()));
  return impl_
      ->call_for<CompareSetReply>(
          "compare_set", key,
          CompareSet{std::string(key), std::string(expected), std::move(desired)}, impl_->quick())
      .value;
}

void Client::wait(const std::vector<std::string>& keys) {
  wait(keys, impl_->options.timeout);
}

void Client::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::string subject = keys.empty() ? "" : keys.front();
  if (keys.size() > 1) subject += fmt::format(" and {} more", keys.size() - 1);
  if (keys.size() > kMaxKeysPerWait) {
    throw Error("wait", subject, impl_->endpoint,
                fmt::format("{} keys is over kMaxKeysPerWait ({})", keys.size(), kMaxKeysPerWait));
  }
  for (const auto& k : keys) impl_->check_key("wait", k);
  impl_->call_for<EmptyReply>("wait", subject, Wait{keys, to_wire_ms(timeout)},
                              Impl::blocking(timeout));
}

bool Client::remove(std::string_view key) {
  impl_->check_key("delete", key);
  return impl_->call_for<DeleteReply>("delete", key, Delete{std::string(key)}, impl_->quick())
      .existed;
}

void Client::barrier(std::string_view name) {
  if (impl_->world_size < 1) {
    throw Error("barrier", printable(name), impl_->endpoint,
                "the world size is unknown: set WORLD_SIZE, call join(), or pass a count");
  }
  barrier(name, impl_->world_size, impl_->options.timeout);
}

void Client::barrier(std::string_view name, int count, milliseconds timeout) {
  impl_->check_key("barrier", name);
  if (count < 1 || static_cast<std::uint32_t>(count) > kMaxGroupSize) {
    throw Error("barrier", printable(name), impl_->endpoint,
                fmt::format("count {} is outside [1, kMaxGroupSize]", count));
  }
  impl_->call_for<EmptyReply>(
      "barrier", name,
      proto::Barrier{impl_->scoped("barrier", name), static_cast<std::uint32_t>(count),
                     to_wire_ms(timeout)},
      Impl::blocking(timeout));
}

std::array<char, 128> Client::nccl_unique_id(std::string_view name) {
  if (impl_->rank < 0) {
    throw Error("nccl_unique_id", printable(name), impl_->endpoint,
                "the rank is unknown: set RANK, call join(), or say who the root is");
  }
  return nccl_unique_id(name, impl_->rank == 0, impl_->options.timeout);
}

std::array<char, 128> Client::nccl_unique_id(std::string_view name, bool is_root,
                                             milliseconds timeout) {
  std::string key = impl_->scoped("nccl", name);
  impl_->check_key("nccl_unique_id", key);
  std::string value;
  if (is_root) {
    // Idempotent per generation: a second call returns the ID already published (its
    // bootstrap root is already running in this process).
    if (auto existing = try_get(key); existing && existing->size() == 128) {
      value = std::move(*existing);
    } else {
      // Through dlopen, no link-time dependency on NCCL; the library stays loaded for the life
      // of the process: the ID's bootstrap root is a thread inside NCCL.
      const NcclLibrary& nccl = NcclLibrary::resident();
      auto get_unique_id = nccl.function<int (*)(void*)>("ncclGetUniqueId");
      std::array<char, 128> id{};
      std::string failure = nccl.error();
      if (failure.empty() && get_unique_id == nullptr) failure = nccl.missing("ncclGetUniqueId");
      if (failure.empty()) {
        if (int rc = get_unique_id(id.data()); rc != 0) {
          failure = fmt::format("ncclGetUniqueId failed ({}): {}", rc, nccl.describe(rc));
        }
      }
      if (!failure.empty()) {
        // Tell the members, so they fail with the reason instead of a timeout.
        compare_set(key, "", std::string(kNcclErrorMarker) + failure);
        throw Error("nccl_unique_id", printable(name), impl_->endpoint, failure);
      }
      value = compare_set(key, "", std::string(id.data(), id.size()));
    }
  } else {
    value = get(key, timeout);
  }
  if (value.size() != 128) {
    std::string detail =
        value.starts_with(kNcclErrorMarker)
            ? "the root could not make the ID: " + value.substr(kNcclErrorMarker.size())
            : fmt::format("the stored ID is {} bytes, not 128", value.size());
    throw Error("nccl_unique_id", printable(name), impl_->endpoint, detail);
  }
  std::array<char, 128> id;
  std::copy(value.begin(), value.end(), id.begin());
  return id;
}

void Client::heartbeat() {
  impl_->call_for<EmptyReply>("heartbeat", "", Heartbeat{}, impl_->quick());
}

void Client::abort(std::string_view reason) {
  if (reason.size() > kMaxMessageBytes) reason = reason.substr(0, kMaxMessageBytes);
  impl_->call_for<EmptyReply>("abort", "", Abort{std::string(reason)}, impl_->quick());
}

int Client::join(int world_size) {
  return join(world_size, impl_->options.timeout);
}

int Client::join(int world_size, milliseconds timeout) {
  return join(world_size, -1, timeout);
}

int Client::join(int world_size, int rank, milliseconds timeout) {
  std::string group = impl_->scoped("join", "trainer");
  if (world_size < 1 || static_cast<std::uint32_t>(world_size) > kMaxGroupSize) {
    throw Error("join", group, impl_->endpoint,
                fmt::format("world size {} is outside [1, kMaxGroupSize]", world_size));
  }
  if (rank < -1 || rank >= world_size) {
    throw Error("join", group, impl_->endpoint,
                fmt::format("rank {} is outside [0, {}) (or -1 for join order)", rank, world_size));
  }
  auto reply = impl_->call_for<JoinReply>(
      "join", group,
      Join{group, static_cast<std::uint32_t>(world_size), rank, 1, to_wire_ms(timeout)},
      Impl::blocking(timeout));
  impl_->rank = static_cast<int>(reply.index);
  impl_->world_size = static_cast<int>(reply.size);
  return impl_->rank;
}

NodeAssignment Client::join_node(int nnodes, int local_world_size, int node_rank) {
  return join_node(nnodes, local_world_size, node_rank, impl_->options.timeout);
}

NodeAssignment Client::join_node(int nnodes, int local_world_size, int node_rank,
                                 milliseconds timeout) {
  std::string group = impl_->scoped("join", "nodes");
  if (nnodes < 1 || static_cast<std::uint32_t>(nnodes) > kMaxGroupSize || local_world_size < 1 ||
      static_cast<std::uint32_t>(local_world_size) > kMaxJoinWeight || node_rank < -1 ||
      node_rank >= nnodes) {
    throw Error("join_node", group, impl_->endpoint,
                fmt::format("bad arguments: nnodes {}, local world size {}, node rank {}", nnodes,
                            local_world_size, node_rank));
  }
  auto reply = impl_->call_for<JoinReply>(
      "join_node", group,
      Join{group, static_cast<std::uint32_t>(nnodes), node_rank,
           static_cast<std::uint32_t>(local_world_size), to_wire_ms(timeout)},
      Impl::blocking(timeout));
  if (reply.total > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    throw ProtocolError("join_node", group, impl_->endpoint, "world size does not fit an int");
  }
  NodeAssignment a{static_cast<int>(reply.index), static_cast<int>(reply.size),
                   static_cast<int>(reply.offset), static_cast<int>(reply.total)};
  impl_->node_rank = a.node_rank;
  impl_->local_world_size = local_world_size;
  impl_->world_size = a.world_size;
  return a;
}

ElasticAssignment Client::join_elastic(std::string_view group, const ElasticJoinOptions& o) {
  std::string name(group);
  impl_->check_key("join_elastic", name);
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes ||
      static_cast<std::uint32_t>(o.max_nodes) > kMaxGroupSize || o.local_world_size < 1 ||
      static_cast<std::uint32_t>(o.local_world_size) > kMaxJoinWeight || o.member.empty() ||
      o.member.size() > kMaxMemberBytes || o.preferred_rank < -1 ||
      o.preferred_rank >= o.max_nodes) {
    throw Error("join_elastic", name, impl_->endpoint,
                fmt::format("bad arguments: nodes {}:{}, local world size {}, member of {} bytes, "
                            "preferred rank {}",
                            o.min_nodes, o.max_nodes, o.local_world_size, o.member.size(),
                            o.preferred_rank));
  }
  ElasticJoin request{name,
                      o.member,
                      static_cast<std::uint32_t>(o.min_nodes),
                      static_cast<std::uint32_t>(o.max_nodes),
                      o.preferred_rank,
                      static_cast<std::uint32_t>(o.local_world_size),
                      to_wire_ms(o.last_call),
                      to_wire_ms(o.heartbeat_timeout),
                      to_wire_ms(o.timeout)};
  auto reply = impl_->call_for<ElasticJoinReply>("join_elastic", name, std::move(request),
                                                 Impl::blocking(o.timeout));
  if (reply.total > static_cast<std::uint64_t>(std::numeric_limits<int>::max()) ||
      reply.round > static_cast<std::uint32_t>(std::numeric_limits<int>::max())) {
    throw ProtocolError("join_elastic", name, impl_->endpoint, "a count does not fit an int");
  }
  ElasticAssignment a;
  a.round = static_cast<int>(reply.round);
  a.node = NodeAssignment{static_cast<int>(reply.index), static_cast<int>(reply.size),
                          static_cast<int>(reply.offset), static_cast<int>(reply.total)};
  std::size_t start = 0;
  while (start < reply.members.size()) {
    std::size_t end = reply.members.find('\n', start);
    if (end == std::string::npos) end = reply.members.size();
    a.members.push_back(reply.members.substr(start, end - start));
    start = end + 1;
  }
  impl_->node_rank = a.node.node_rank;
  impl_->local_world_size = o.local_world_size;
  impl_->world_size = a.node.world_size;
  return a;
}

void Client::heartbeat(std::string_view group, std::string_view member) {
  impl_->check_key("heartbeat", group);
  if (member.empty() || member.size() > kMaxMemberBytes) {
    throw Error("heartbeat", printable(group), impl_->endpoint, "bad member id");
  }
  impl_->call_for<EmptyReply>(
      "heartbeat", group, MemberHeartbeat{std::string(group), std::string(member)}, impl_->quick());
}

void Client::node_heartbeat(std::string_view who, std::chrono::milliseconds timeout) {
  if (who.empty() || who.size() > kMaxMemberBytes) {
    throw Error("node heartbeat", printable(who), impl_->endpoint, "bad node name");
  }
  auto ms = std::clamp<std::int64_t>(timeout.count(), 1, UINT32_MAX);
  impl_->call_for<EmptyReply>("node heartbeat", who,
                              NodeHeartbeat{std::string(who), static_cast<std::uint32_t>(ms)},
                              impl_->quick());
}

void Client::close() noexcept {
  if (impl_) impl_->drop("closed by the caller");
}

}  // namespace mlrun::rendezvous
