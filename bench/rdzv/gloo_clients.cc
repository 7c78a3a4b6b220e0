// bench/rdzv: one client process of the store benchmark (bench/rdzv/torch_store_bench.py,
// --protocols): NTHREADS threads (64 KiB stacks), one rank each, doing Gloo's init pattern over
// one of two wire protocols against mlrun's server, so the two are compared with the same client
// language and the same pattern:
//   mlrun:    the real client library (Client::connect, set, wait, get, add);
//   torch113: PyTorch 1.13's TCPStore wire protocol (docs/torch-store.md), as its client sends
//             it: a store connection plus the idle second connection every 1.13 client opens.
// The pattern per rank r: SET gloo/r (136 bytes); WAIT + GET the two ring neighbours' keys;
// ADD barrier 1, then ADD barrier 0 every 10 ms until it reaches WORLD (torch 1.13's
// _store_based_barrier).
//   gloo_clients MODE HOST PORT TOKEN WORLD NTHREADS FIRST_RANK
// Prints "ready" once every thread waits, then "result START END FAILED" (CLOCK_MONOTONIC ns).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mlrun/rendezvous.hpp"

namespace {

constexpr int kStackBytes = 64 * 1024;
constexpr int kTimeoutMs = 120'000;
constexpr auto kPoll = std::chrono::milliseconds(10);
const std::string kValue(136, 'v');

std::string mode, host, port, token;
int world = 0, first_rank = 0;
std::atomic<int> go{0};
std::atomic<int> failed{0};

std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string key(int r) {
  return "gloo/" + std::to_string((r + world) % world);
}

void run_mlrun(int r) {
  using namespace mlrun::rendezvous;
  ClientOptions o;
  o.connect_timeout = o.timeout = std::chrono::milliseconds(kTimeoutMs);
  Client c = Client::connect(host + ":" + port, token, o);
  c.set(key(r), kValue);
  for (int peer : {r - 1, r + 1}) {
    c.wait({key(peer)});
    if (c.get(key(peer)).size() != kValue.size()) throw std::runtime_error("wrong value");
  }
  c.add("barrier", 1);
  while (c.add("barrier", 0) < world) std::this_thread::sleep_for(kPoll);
}

// A blocking TCPStore 1.13 connection: requests written whole, replies read exactly.
class Torch113 {
 public:
  Torch113() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port.c_str())));
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{kTimeoutMs / 1000, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Torch113() { close(fd_); }
  void set(const std::string& k, const std::string& v) { send(op(0) + bytes(k) + bytes(v)); }
  void wait(const std::string& k) {
    send(op(5) + u64(1) + bytes(k));
    recv(1);
  }
  std::string get(const std::string& k) {
    send(op(2) + bytes(k));
    std::string n = recv(8);
    std::uint64_t len = 0;
    std::memcpy(&len, n.data(), 8);
    return recv(len);
  }
  std::int64_t add(const std::string& k, std::int64_t d) {
    send(op(3) + bytes(k) + u64(static_cast<std::uint64_t>(d)));
    std::string r = recv(8);
    std::int64_t v = 0;
    std::memcpy(&v, r.data(), 8);
    return v;
  }

 private:
  static std::string op(char c) { return std::string(1, c); }
  static std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }
  static std::string bytes(const std::string& s) { return u64(s.size()) + s; }
  void send(const std::string& s) {
    if (::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(s.size())) {
      throw std::runtime_error("send");
    }
  }
  std::string recv(std::size_t n) {
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      ssize_t k = ::recv(fd_, out.data() + got, n - got, 0);
      if (k <= 0) throw std::runtime_error("the store closed the connection or timed out");
      got += static_cast<std::size_t>(k);
    }
    return out;
  }
  int fd_ = -1;
};

void run_torch113(int r) {
  Torch113 store;
  Torch113 callback;  // torch 1.13's second connection: opened, never used
  store.set(key(r), kValue);
  for (int peer : {r - 1, r + 1}) {
    store.wait(key(peer));
    if (store.get(key(peer)).size() != kValue.size()) throw std::runtime_error("wrong value");
  }
  store.add("barrier", 1);
  while (store.add("barrier", 0) < world) std::this_thread::sleep_for(kPoll);
}

struct Arg {
  int rank;
  std::int64_t start = 0, end = 0;
};

void* thread_main(void* p) {
  auto* a = static_cast<Arg*>(p);
  go.wait(0);
  try {
    a->start = now_ns();
    mode == "mlrun" ? run_mlrun(a->rank) : run_torch113(a->rank);
    a->end = now_ns();
  } catch (const std::exception& e) {
    if (failed.fetch_add(1) == 0) std::fprintf(stderr, "gloo_clients: %s\n", e.what());
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8 || (std::string(argv[1]) != "mlrun" && std::string(argv[1]) != "torch113")) {
    std::fprintf(stderr,
                 "usage: gloo_clients mlrun|torch113 HOST PORT TOKEN WORLD NTHREADS FIRST\n");
    return 2;
  }
  mode = argv[1], host = argv[2], port = argv[3], token = argv[4];
  world = std::atoi(argv[5]);
  int n = std::atoi(argv[6]);
  first_rank = std::atoi(argv[7]);
  std::vector<Arg> args(static_cast<std::size_t>(n));
  std::vector<pthread_t> threads(args.size());
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  for (int i = 0; i < n; ++i) {
    args[i].rank = first_rank + i;
    if (pthread_create(&threads[i], &attr, thread_main, &args[i]) != 0) return 1;
  }
  std::cout << "ready" << std::endl;
  std::string line;
  std::getline(std::cin, line);
  go.store(1);
  go.notify_all();
  for (auto& t : threads) pthread_join(t, nullptr);
  std::int64_t start = INT64_MAX, end = 0;
  for (const auto& a : args) {
    if (a.end == 0) continue;
    start = std::min(start, a.start);
    end = std::max(end, a.end);
  }
  std::cout << "result " << start << " " << end << " " << failed.load() << std::endl;
  return failed.load() == 0 ? 0 : 1;
}
