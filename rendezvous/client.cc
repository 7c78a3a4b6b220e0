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
#include <utility>

#include <fmt/format.h>

#include "rendezvous/client_impl.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/integer.h"

namespace mlrun::rendezvous {

namespace {

std::string what_text(const std::string& op, const std::string& subject, const std::string& peer,
                      const std::string& detail) {
  std::string s = "rendezvous " + op;
  if (!subject.empty()) s += " \"" + subject + "\"";
  if (!peer.empty()) s += " at " + peer;
  return s + ": " + detail;
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

}  // namespace

// --- Errors ----------------------------------------------------------------------------------

Error::Error(std::string op, std::string subject, std::string peer, std::string detail)
    : std::runtime_error(what_text(op, subject, peer, detail)),
      op_(std::move(op)),
      subject_(std::move(subject)),
      peer_(std::move(peer)),
      detail_(std::move(detail)) {}

// --- The connection (struct Client::Impl, rendezvous/client_impl.h) --------------------------

Client::Impl::~Impl() {
  if (fd >= 0) ::close(fd);
}

void Client::Impl::drop(std::string why) {
  {
    std::lock_guard lock(fd_mutex);
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  if (lost.empty()) lost = std::move(why);
}

[[noreturn]] void Client::Impl::connection_lost(std::string_view op, std::string_view subject,
                                                std::string detail) {
  drop(detail);
  throw ConnectionError(std::string(op), printable(subject), endpoint, std::move(detail));
}

void Client::Impl::send_all(std::string_view op, std::string_view subject, std::string_view data,
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

void Client::Impl::recv_exact(std::string_view op, std::string_view subject, std::uint8_t* out,
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

std::size_t Client::Impl::receive(std::string_view op, std::string_view subject, std::uint8_t* out,
                                  std::size_t size, Clock::time_point deadline,
                                  milliseconds waited) {
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

std::optional<std::vector<std::uint8_t>> Client::Impl::call(std::string_view op,
                                                            std::string_view subject,
                                                            const Request& request,
                                                            milliseconds reply_within,
                                                            Status tolerated) {
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
  if (hello_pending != 0) {
    // The deferred hello's reply comes first (the server answers in order).
    std::uint32_t hello = std::exchange(hello_pending, 0);
    auto payload =
        read_reply("connect", "", hello, Op::kHello, deadline, reply_within, Status::kOk);
    HelloReply body;
    if (!parse_reply(*payload, body)) {
      drop("bad reply");
      throw ProtocolError("connect", "", endpoint, "malformed reply payload");
    }
  }
  return read_reply(op, subject, id, op_of(request), deadline, reply_within, tolerated);
}

std::optional<std::vector<std::uint8_t>> Client::Impl::read_reply(
    std::string_view op, std::string_view subject, std::uint32_t id, Op request_op,
    Clock::time_point deadline, milliseconds reply_within, Status tolerated) {
  std::uint8_t header_bytes[kHeaderBytes];
  recv_exact(op, subject, header_bytes, kHeaderBytes, deadline, reply_within);
  Header h;
  DecodeResult r = decode_header({header_bytes, kHeaderBytes}, h, kMaxPayloadBytes);
  if (r.status != DecodeStatus::kOk) {
    drop("bad reply");
    throw ProtocolError(std::string(op), printable(subject), endpoint,
                        fmt::format("bad reply from the server: {}", r.what));
  }
  std::uint8_t expected_op = static_cast<std::uint8_t>(request_op) | kReplyBit;
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

[[noreturn]] void Client::Impl::throw_status(std::string_view op_view,
                                             std::string_view subject_view, Status status,
                                             std::string message) {
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

void Client::Impl::check_key(std::string_view op, std::string_view key) {
  if (key.size() > kMaxKeyBytes) {
    throw Error(std::string(op), printable(key), endpoint,
                fmt::format("key of {} bytes is over kMaxKeyBytes ({})", key.size(), kMaxKeyBytes));
  }
}

void Client::Impl::check_value(std::string_view op, std::string_view key, std::size_t size) {
  if (size > kMaxValueBytes) {
    throw Error(std::string(op), printable(key), endpoint,
                fmt::format("value of {} bytes is over kMaxValueBytes ({})", size, kMaxValueBytes));
  }
}

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
  auto notice = start + std::chrono::seconds(5);
  std::string why;
  while (true) {
    impl->fd = try_connect(host, port, deadline, &why);
    if (impl->fd >= 0) break;
    auto now = Clock::now();
    if (now >= deadline) {
      throw ConnectionError("connect", "", impl->endpoint,
                            fmt::format("no connection within {} ms: {}",
                                        impl->options.connect_timeout.count(), why));
    }
    if (now >= notice && impl->options.on_connect_retry) {
      impl->options.on_connect_retry(why, std::chrono::duration_cast<milliseconds>(now - start));
      notice = now + std::chrono::seconds(30);
    }
    std::this_thread::sleep_for(
        std::min<milliseconds>(backoff, milliseconds(remaining_ms(deadline))));
    backoff = std::min<milliseconds>(backoff * 2, milliseconds(1000));
  }
  tune_socket(impl->fd);
  auto left = std::max<milliseconds>(milliseconds(remaining_ms(deadline)), milliseconds(1000));
  Hello hello{std::string(token), impl->options.job_id};
  if (impl->options.defer_hello) {
    std::uint32_t id = impl->next_id++;
    impl->send_all("connect", "", encode_request(id, hello), Clock::now() + left);
    impl->hello_pending = id;
  } else {
    impl->call_for<HelloReply>("connect", "", hello, left);
  }
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

void Client::close() noexcept {
  if (impl_) impl_->drop("closed by the caller");
}

void Client::interrupt() noexcept {
  if (!impl_) return;
  // The owner's call wakes to a closed connection and drops it (reading fd alone; it writes fd
  // only under the lock).
  std::lock_guard lock(impl_->fd_mutex);
  if (impl_->fd >= 0) ::shutdown(impl_->fd, SHUT_RDWR);
}

}  // namespace mlrun::rendezvous
