#include "worker/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "worker/text_file.h"

namespace mlrun {

namespace {

// A TCP socket bound to port on every local address (IPv6's wildcard, dual-stack where there is
// IPv6; else IPv4's), or -1 with errno set. port 0: any; *bound gets the port.
int bind_wildcard(int port, int* bound) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<std::uint16_t>(port));
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      *bound = ntohs(a.sin6_port);
      return fd;
    }
    int e = errno;
    close(fd);
    // Only a machine without IPv6 falls back; a port in use is in use for IPv4 too.
    if (e != EAFNOSUPPORT && e != EADDRNOTAVAIL) {
      errno = e;  // for the caller's message
      return -1;
    }
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    *bound = ntohs(a.sin_port);
    return fd;
  }
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

}  // namespace

std::pair<int, int> ephemeral_port_range() {
  std::pair<int, int> range{32768, 60999};  // Linux's default.
  if (auto text = read_text_file("/proc/sys/net/ipv4/ip_local_port_range")) {
    int lo = 0, hi = 0;
    if (std::sscanf(text->c_str(), "%d %d", &lo, &hi) == 2 && 0 < lo && lo <= hi && hi < 65536) {
      range = {lo, hi};
    }
  }
  return range;
}

int free_tcp_port() {
  // Outside the kernel's ephemeral range when there is room: a port from it can be taken by any
  // process's outgoing connection between this check and rank 0's bind (seen when another job
  // opened thousands of connections: "Address already in use" in init_process_group). A port
  // outside it is only ever taken by an explicit bind. Below the range from 20000, else above it.
  auto [lo, hi] = ephemeral_port_range();
  int first = 20000, last = lo - 1;
  if (last - first < 1000) {
    first = hi + 1;
    last = 65535;
  }
  if (last - first >= 1000) {
    std::mt19937 pick(std::random_device{}());
    std::uniform_int_distribution<int> port(first, last);
    for (int i = 0; i < 32; ++i) {
      int bound = 0;
      if (int fd = bind_wildcard(port(pick), &bound); fd >= 0) {
        close(fd);
        return bound;
      }
    }
  }
  int bound = 0;
  int fd = bind_wildcard(0, &bound);
  if (fd < 0) {
    throw std::runtime_error(fmt::format("cannot find a free TCP port: {}", std::strerror(errno)));
  }
  close(fd);
  return bound;
}

std::string host_name() {
  // A simulated node (--launcher sim, transport/local.h) goes by its hostfile name.
  if (const char* sim = std::getenv("MLRUN_NODE_NAME"); sim && *sim) return sim;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace mlrun

#include <arpa/inet.h>
#include <netdb.h>

namespace mlrun {

std::string local_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &found);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("cannot resolve {}: {}", host, gai_strerror(rc)));
  }
  std::string out;
  for (addrinfo* a = found; a != nullptr && out.empty(); a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) out = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (out.empty()) throw std::runtime_error(fmt::format("no route to {}", host));
  return out;
}

bool is_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &found) != 0) return false;
  bool local = false;
  int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    local = bind(fd, found->ai_addr, found->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(found);
  return local;
}

std::vector<std::string> numeric_addresses(const std::string& host, int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, raw, text, sizeof text) != nullptr) out.emplace_back(text);
  }
  freeaddrinfo(found);
  return out;
}

}  // namespace mlrun
