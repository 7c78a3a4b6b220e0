// bench/rdzv: the bare TCP floor. One thread, one epoll set, non-blocking sockets: every byte a
// client sends is written straight back. Accepts until EAGAIN on every wake-up (aggressively,
// as the kernel's backlog of 4,096 otherwise costs SYN retransmits).
//   echo_server [HOST [LISTENERS]]
// LISTENERS (default 1, the floor): that many sockets on the one port with SO_REUSEPORT,
// each its own accept queue, as mlrun's server listens (docs/protocol.md).
// Prints "port N" on stdout once it listens; serves until stdin closes or reads "quit".
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
struct Pending {
  std::string bytes;  // echo not yet written (the socket buffer was full)
};
}  // namespace

int main(int argc, char** argv) {
  const char* host = argc > 1 ? argv[1] : "127.0.0.1";
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  int listeners = argc > 2 ? std::atoi(argv[2]) : 1;
  if (listeners < 1 || listeners > 64) {
    std::fprintf(stderr, "echo_server: LISTENERS must be 1..64\n");
    return 2;
  }
  int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    std::fprintf(stderr, "echo_server: bad host %s\n", host);
    return 2;
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  std::vector<int> lfds;
  for (int i = 0; i < listeners; ++i) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listeners > 1) setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(lfd, 65535) != 0) {
      std::perror("echo_server: bind/listen");
      return 1;
    }
    socklen_t len = sizeof addr;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);  // the next ones take this port
    ev.data.fd = lfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    lfds.push_back(lfd);
  }
  ev.data.fd = 0;  // stdin: "quit" or EOF ends the server
  epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
  std::printf("port %d\n", ntohs(addr.sin_port));
  std::fflush(stdout);

  std::unordered_map<int, Pending> pending;
  epoll_event events[1024];
  char buf[65536];
  bool running = true;
  while (running) {
    int n = epoll_wait(ep, events, 1024, -1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == 0) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r <= 0 || ::memmem(buf, static_cast<std::size_t>(r), "quit", 4) != nullptr) {
          running = false;
        }
        continue;
      }
      if (std::find(lfds.begin(), lfds.end(), fd) != lfds.end()) {
        int lfd = fd;
        while (true) {
          int c = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) break;  // EAGAIN, or EMFILE (then the next wake-up retries)
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          epoll_event cev{};
          cev.events = EPOLLIN;
          cev.data.fd = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        }
        continue;
      }
      auto close_fd = [&] {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        pending.erase(fd);
      };
      if (events[i].events & EPOLLOUT) {
        auto it = pending.find(fd);
        if (it != pending.end()) {
          ssize_t w = write(fd, it->second.bytes.data(), it->second.bytes.size());
          if (w < 0 && errno != EAGAIN) {
            close_fd();
            continue;
          }
          if (w > 0) it->second.bytes.erase(0, static_cast<std::size_t>(w));
          if (it->second.bytes.empty()) {
            pending.erase(it);
            epoll_event cev{};
            cev.events = EPOLLIN;
            cev.data.fd = fd;
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev);
          }
        }
      }
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
          close_fd();
          continue;
        }
        if (r < 0) continue;
        auto it = pending.find(fd);
        if (it != pending.end()) {  // still behind: queue after what is owed
          it->second.bytes.append(buf, static_cast<std::size_t>(r));
          continue;
        }
        ssize_t w = write(fd, buf, static_cast<std::size_t>(r));
        if (w < 0 && errno != EAGAIN) {
          close_fd();
          continue;
        }
        if (w < 0) w = 0;
        if (w < r) {
          pending[fd].bytes.assign(buf + w, static_cast<std::size_t>(r - w));
          epoll_event cev{};
          cev.events = EPOLLIN | EPOLLOUT;
          cev.data.fd = fd;
          epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev);
        }
      }
    }
  }
  return 0;
}
