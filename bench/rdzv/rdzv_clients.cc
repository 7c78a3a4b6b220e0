// bench/rdzv: one client process of the rendezvous benchmark. It starts NTHREADS threads (64 KiB
// stacks), each of which, on "go" (a line on stdin), opens its own connection and does one rank's
// part of the sequence:
//   mlrun: Client::connect (TCP connect + hello), join(W), rank 0 set("bench/id", 128 bytes),
//          get("bench/id"), barrier("done") -- the real client library, blocking sockets;
//   echo:  TCP connect, then the same number of round trips to the echo server (bench/rdzv/
//          echo_server.cc), each as large as the larger of mlrun's request and reply (the
//          connection whose index is 0 makes the extra one rank 0's set makes).
//   rdzv_clients MODE HOST PORT TOKEN WORLD NTHREADS FIRST_INDEX
// Prints "ready" once every thread waits, then after the run one line:
//   result START END CONNECTED JOINED GOT ERRORS
// START: the earliest moment a thread began to connect; END: the latest barrier exit; the others:
// the latest moment a thread finished that phase. CLOCK_MONOTONIC nanoseconds, comparable
// between processes. Every blocking call is bounded (120 s).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "mlrun/rendezvous.hpp"

namespace {

constexpr int kStackBytes = 64 * 1024;
constexpr int kTimeoutMs = 120'000;

std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Config {
  std::string mode, host, port, token;
  int world = 0, first_index = 0;
};
Config config;

std::atomic<int> go{0};
std::atomic<int> errors{0};
std::mutex first_error_mutex;
bool first_error_printed = false;

struct Stamps {
  std::int64_t start = 0, connected = 0, joined = 0, got = 0, end = 0;
};

void report_error(const std::string& what) {
  errors.fetch_add(1);
  std::lock_guard<std::mutex> lock(first_error_mutex);
  if (!first_error_printed) {
    first_error_printed = true;
    std::fprintf(stderr, "rdzv_clients: %s\n", what.c_str());
  }
}

std::string make_id() {
  std::string id(128, '\0');
  for (int i = 0; i < 128; ++i) id[static_cast<std::size_t>(i)] = static_cast<char>(i * 7 + 3);
  return id;
}

void run_mlrun(int index, Stamps& s) {
  using namespace mlrun::rendezvous;
  (void)index;
  ClientOptions options;
  options.connect_timeout = std::chrono::milliseconds(kTimeoutMs);
  options.timeout = std::chrono::milliseconds(kTimeoutMs);
  s.start = now_ns();
  Client c = Client::connect(config.host + ":" + config.port, config.token, options);
  s.connected = now_ns();
  int rank = c.join(config.world);
  s.joined = now_ns();
  if (rank == 0) c.set("bench/id", make_id());
  std::string id = c.get("bench/id");
  s.got = now_ns();
  if (id != make_id()) throw std::runtime_error("wrong id bytes");
  c.barrier("done");
  s.end = now_ns();
}

// Blocking socket helpers for the echo floor; every wait bounded by poll.
bool wait_fd(int fd, short what) {
  pollfd p{fd, what, 0};
  int r;
  while ((r = poll(&p, 1, kTimeoutMs)) < 0 && errno == EINTR) {
  }
  return r > 0;
}

void round_trip(int fd, std::size_t bytes) {
  static const std::string payload(4096, 'x');
  std::size_t sent = 0;
  while (sent < bytes) {
    ssize_t n = send(fd, payload.data(), bytes - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT)) throw std::runtime_error("echo send timed out");
    } else {
      throw std::runtime_error(std::string("echo send: ") + std::strerror(errno));
    }
  }
  char buf[4096];
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = recv(fd, buf, std::min(sizeof buf, bytes - got), 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw std::runtime_error("echo server closed the connection");
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!wait_fd(fd, POLLIN)) throw std::runtime_error("echo reply timed out");
    } else {
      throw std::runtime_error(std::string("echo recv: ") + std::strerror(errno));
    }
  }
}

void run_echo(int index, Stamps& s) {
  // Sizes: max(request, reply) of mlrun's frames with this benchmark's names and a 32-byte token.
  constexpr std::size_t kHello = 56, kJoin = 57, kSet = 160, kGet = 148, kBarrier = 49;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(config.port.c_str())));
  inet_pton(AF_INET, config.host.c_str(), &addr.sin_addr);
  s.start = now_ns();
  // Like mlrun's client: a non-blocking connect waited for with poll, then TCP_NODELAY.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    if (!wait_fd(fd, POLLOUT)) throw std::runtime_error("connect timed out");
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) throw std::runtime_error(std::string("connect: ") + std::strerror(err));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  round_trip(fd, kHello);
  s.connected = now_ns();
  round_trip(fd, kJoin);
  s.joined = now_ns();
  if (index == 0) round_trip(fd, kSet);
  round_trip(fd, kGet);
  s.got = now_ns();
  round_trip(fd, kBarrier);
  s.end = now_ns();
}

struct ThreadArg {
  int index;
  Stamps stamps;
};

void* thread_main(void* p) {
  auto* arg = static_cast<ThreadArg*>(p);
  go.wait(0);
  try {
    if (config.mode == "mlrun") {
      run_mlrun(arg->index, arg->stamps);
    } else {
      run_echo(arg->index, arg->stamps);
    }
  } catch (const std::exception& e) {
    arg->stamps.end = 0;
    report_error(e.what());
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: rdzv_clients mlrun|echo HOST PORT TOKEN WORLD NTHREADS FIRST_INDEX\n");
    return 2;
  }
  config.mode = argv[1];
  config.host = argv[2];
  config.port = argv[3];
  config.token = argv[4];
  config.world = std::atoi(argv[5]);
  int nthreads = std::atoi(argv[6]);
  config.first_index = std::atoi(argv[7]);
  if (config.mode != "mlrun" && config.mode != "echo") {
    std::fprintf(stderr, "rdzv_clients: unknown mode %s\n", argv[1]);
    return 2;
  }
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  // Warm the resolver (getaddrinfo loads its configuration once) on the big main stack.
  addrinfo* list = nullptr;
  if (getaddrinfo(config.host.c_str(), config.port.c_str(), nullptr, &list) == 0) freeaddrinfo(list);

  std::vector<ThreadArg> args(static_cast<std::size_t>(nthreads));
  std::vector<pthread_t> threads(static_cast<std::size_t>(nthreads));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  int started = 0;
  for (int i = 0; i < nthreads; ++i) {
    args[static_cast<std::size_t>(i)].index = config.first_index + i;
    int rc = pthread_create(&threads[static_cast<std::size_t>(i)], &attr, thread_main,
                            &args[static_cast<std::size_t>(i)]);
    if (rc != 0) {
      std::fprintf(stderr, "rdzv_clients: pthread_create: %s (after %d threads)\n", std::strerror(rc), i);
      break;
    }
    ++started;
  }
  std::printf("ready %d\n", started);
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);  // "go" (or EOF: run anyway, so that nothing hangs)
  go.store(1);
  go.notify_all();
  for (int i = 0; i < started; ++i) pthread_join(threads[static_cast<std::size_t>(i)], nullptr);
  Stamps agg;
  agg.start = INT64_MAX;
  for (int i = 0; i < started; ++i) {
    const Stamps& s = args[static_cast<std::size_t>(i)].stamps;
    if (s.start != 0) agg.start = std::min(agg.start, s.start);
    agg.connected = std::max(agg.connected, s.connected);
    agg.joined = std::max(agg.joined, s.joined);
    agg.got = std::max(agg.got, s.got);
    agg.end = std::max(agg.end, s.end);
  }
  int errs = errors.load() + (nthreads - started);
  std::printf("result %lld %lld %lld %lld %lld %d\n", static_cast<long long>(agg.start),
              static_cast<long long>(agg.end), static_cast<long long>(agg.connected),
              static_cast<long long>(agg.joined), static_cast<long long>(agg.got), errs);
  std::fflush(stdout);
  return errs == 0 ? 0 : 1;
}
