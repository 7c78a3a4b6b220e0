// Helpers for the rendezvous tests: a server on a test-owned loop (so tests can look at its
// state between events), and a raw socket that speaks frames byte by byte.
#pragma once

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "rendezvous/protocol.h"
#include "rendezvous/server.h"

namespace mlrun::rendezvous::testing {

/// A ServerCore on its own loop thread; log lines are collected.
class LoopServer {
 public:
  explicit LoopServer(ServerOptions options) {
    options.log = [this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
    };
    core_ = std::make_unique<ServerCore>(io_, std::move(options));
    thread_ = std::thread([this] { io_.run(); });
  }
  ~LoopServer() { stop(); }

  template <typename F>
  auto on_loop(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }

  void stop() {
    if (!thread_.joinable()) return;
    on_loop([this] {
      core_->stop();
      work_.reset();
      io_.stop();
    });
    thread_.join();
  }

  std::string endpoint() const { return core_->endpoint(); }
  int port() const { return core_->port(); }
  std::size_t connections() {
    return on_loop([this] { return core_->connections(); });
  }

  /// Polls (bounded) until the server holds `n` connections; the loop thread decides when it
  /// sees a peer's close, so tests that depend on it must wait for it.
  bool wait_connections(std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (connections() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

  std::size_t held_requests() {
    return on_loop([this] { return core_->held_requests(); });
  }

  /// Polls (bounded) until the server holds `n` blocking requests.
  bool wait_held(std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (held_requests() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

  std::vector<std::string> log_lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

  ServerCore& core() { return *core_; }

 private:
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::unique_ptr<ServerCore> core_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

/// A raw TCP connection to ip:port (IPv4) with bounded reads.
class RawPeer {
 public:
  explicit RawPeer(int port, const char* ip = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    inet_pton(AF_INET, ip, &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    int one = 1;
    if (fd_ >= 0) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  RawPeer(const RawPeer&) = delete;
  ~RawPeer() { close(); }

  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  struct Frame {
    proto::Header header;
    std::string payload;
  };

  /// The next frame, or nullopt on EOF, reset, a malformed frame or the time limit.
  std::optional<Frame> read_frame(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (true) {
      proto::Header h;
      std::span<const std::uint8_t> payload;
      auto r = proto::decode_frame(
          {reinterpret_cast<const std::uint8_t*>(buffer_.data()), buffer_.size()}, h, payload,
          proto::kMaxPayloadBytes);
      if (r.status == proto::DecodeStatus::kError) return std::nullopt;
      if (r.status == proto::DecodeStatus::kOk) {
        Frame f{h, std::string(reinterpret_cast<const char*>(payload.data()), payload.size())};
        buffer_.erase(0, r.consumed);
        return f;
      }
      if (!fill(end)) return std::nullopt;
    }
  }

  /// True when the server closes the connection (EOF or reset) within the limit; anything
  /// it sends first is discarded.
  bool closed_by_peer(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (true) {
      if (!fill(end)) return !timed_out_;
    }
  }

  /// Exactly n bytes (a TCPStore reply has no frame), or nullopt on EOF or the time limit.
  std::optional<std::string> read_bytes(std::size_t n,
                                        std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (buffer_.size() < n) {
      if (!fill(end)) return std::nullopt;
    }
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return out;
  }

  /// Authenticates with token; returns the reply's status.
  proto::Status hello(const std::string& token) {
    send(proto::encode_request(1, proto::Hello{token, ""}));
    auto f = read_frame();
    return f ? f->header.status : proto::Status::kShuttingDown;
  }

  int fd() const { return fd_; }

 private:
  // Reads what is there; false on EOF, error or the time limit (timed_out_ tells which).
  bool fill(std::chrono::steady_clock::time_point end) {
    timed_out_ = false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out_ = true;
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) == 0) {
      timed_out_ = true;
      return false;
    }
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
  bool timed_out_ = false;
};

}  // namespace mlrun::rendezvous::testing
