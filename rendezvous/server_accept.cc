// Accepting: the listening sockets (one port, kListeners SO_REUSEPORT queues) and the accept
// loop that hands each new connection to adopt() (server.cc).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "rendezvous/server.h"
#include "rendezvous/server_impl.h"

namespace mlrun::rendezvous {

namespace {

// After accept fails for lack of descriptors, wait this long before trying again (retrying at
// once would spin: the pending connection stays in the backlog).
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);
// Connections taken from the backlog synchronously per wake-up, before yielding to the loop (at
// most; listen() lowers it where the cap of unauthenticated connections is low).
constexpr std::size_t kAcceptBurst = 512;
// Listening sockets on the one port (SO_REUSEPORT; the kernel spreads new connections over
// them). Each has its own accept queue, capped at net.core.somaxconn (4,096 on stock kernels):
// a storm of 16,384 ranks connecting at once overflows a single queue into one-second SYN
// retransmits, however fast the loop accepts. Eight queues hold 32,768 at the stock cap.
constexpr int kListeners = 8;

// Options every accepted connection needs, set once on each listener: Linux copies them to the
// sockets accepted from it (tcp(7)), which saves six system calls per connection. No Nagle
// delay on replies; a peer that vanishes without a FIN or RST (a dead host, a cut link) fails
// its connection with ETIMEDOUT within kPeerSilenceBoundS: keepalive probes an idle connection,
// and the user timeout bounds replies sent into a dead link.
bool set_connection_options(int fd) {
  const int on = 1, idle = kKeepaliveIdleS, interval = kKeepaliveIntervalS;
  const int count = kKeepaliveProbes;
  const unsigned int user_timeout_ms = kPeerSilenceBoundS * 1000;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0 &&
         setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) == 0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms) ==
             0;
}

// accept(2)'s errors that concern only the connection being accepted (it was reset while
// queued, or the network failed under it): the next one may be fine.
bool passing_accept_error(int e) {
  switch (e) {
    case ECONNABORTED:
    case EINTR:
    case EPROTO:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETDOWN:
    case ENETUNREACH:
    case EPERM:  // refused by a firewall rule
      return true;
    default:
      return false;
  }
}

std::optional<tcp::endpoint> endpoint_of(const sockaddr_storage& a, socklen_t len) {
  tcp::endpoint e;
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return std::nullopt;
  if (len == 0 || len > e.capacity()) return std::nullopt;
  std::memcpy(e.data(), &a, len);
  e.resize(len);
  return e;
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

void ServerCore::Impl::listen() {
  if (options_.token.empty()) throw Error("listen", "", options_.host, "the token is empty");
  if (options_.token.size() > kMaxTokenBytes) {
    throw Error("listen", "", options_.host, "the token is longer than kMaxTokenBytes");
  }
  if (options_.port < 0 || options_.port > 65535) {
    throw Error("listen", "", options_.host, fmt::format("bad port {}", options_.port));
  }
  // Half the descriptors at most for connections that have not authenticated: the rest stay for
  // the job's own.
  std::size_t half = raise_open_file_limit() / 2;
  max_pending_ = std::max<std::size_t>(16, std::min(kMaxPendingConnections, half));
  max_pending_peers_ = std::max(max_pending_, half);
  // A connection just accepted gets its first read after the other listeners' wake-ups of the
  // same trip through the loop: all of them together must accept fewer than the cap, or a
  // client whose hello is already there is evicted unread (a queue of thousands, a low
  // descriptor limit: cli.rdzv_queued_hello). Half the cap, for a margin.
  accept_burst_ = std::clamp<std::size_t>(max_pending_ / (2 * kListeners), 1, kAcceptBurst);
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
    if (!e && !set_connection_options(a.native_handle())) {
      e = error_code(errno, boost::system::system_category());
    }
    if (!e) a.bind(target, e);
    // A large backlog: a storm of thousands of connecting ranks must not overflow the queue
    // into one-second SYN retransmits (the kernel caps it at somaxconn).
    if (!e) a.listen(options_.listen_backlog, e);
    if (!e) a.non_blocking(true, e);
    // Asio opens sockets without close-on-exec: workers the launcher spawns would inherit the
    // port and hold it past mlrun's end (and look like its listener, docs/torch-store.md).
    if (!e) fcntl(a.native_handle(), F_SETFD, FD_CLOEXEC);
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
  // Woken when connections are queued; drain_backlog takes them (accept4: close-on-exec and the
  // peer's address in the one call).
  l.acceptor.async_wait(tcp::acceptor::wait_read, [self = shared_from_this(), &l](error_code ec) {
    if (self->stopped_ || ec == asio::error::operation_aborted) return;
    if (!ec) ec = self->drain_backlog(l.acceptor);
    if (!ec) {
      self->accept(l);
      return;
    }
    // Out of descriptors: the oldest unauthenticated connection makes room, at once.
    if ((ec == asio::error::no_descriptors || ec.value() == ENFILE) &&
        self->evict_oldest("out of descriptors")) {
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

error_code ServerCore::Impl::drain_backlog(tcp::acceptor& acceptor) {
  // The acceptor is non-blocking: take what is already queued in one go instead of one
  // connection per trip through the loop.
  for (std::size_t i = 0; i < accept_burst_; ++i) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    int fd =
        ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      if (passing_accept_error(errno)) continue;
      return error_code(errno, boost::system::system_category());
    }
    std::optional<tcp::endpoint> remote = endpoint_of(from, len);
    error_code ec;
    tcp::socket socket(io_);
    socket.assign(remote ? remote->protocol() : acceptor.local_endpoint(ec).protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      continue;
    }
    adopt(std::move(socket), remote);
  }
  return {};
}

}  // namespace mlrun::rendezvous
