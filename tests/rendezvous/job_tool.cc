// rdzv_job_tool: what the ranks of the shell-driven jobs in examples.cmake run.
//   rdzv_job_tool work               real rendezvous work: every rank sets, gets every other
//                                    rank's key, adds, meets the others at barriers
//   rdzv_job_tool work-after-hostile the same, once the hostile peer is at work
//   rdzv_job_tool hostile            at MLRUN_RDZV_ENDPOINT: idle connections, half frames,
//                                    garbage, a huge length, a wrong version, a wrong token;
//                                    held open while the ranks work (rank 0 runs it beside them)
//   rdzv_job_tool expect-auth-error  connects with the environment's token: exit 0 iff refused
//                                    with AuthError
// Every wait is bounded; exit 0 only when every expectation held.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <mlrun/rendezvous.hpp>

namespace {

namespace rdzv = mlrun::rendezvous;
using namespace std::chrono_literals;

int fail(const std::string& what) {
  std::fprintf(stderr, "rdzv_job_tool: %s\n", what.c_str());
  return 1;
}

// A raw TCP connection to host:port (IPv4 literal or "localhost"), or -1.
int dial(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  std::string host = endpoint.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};  // Every read below is bounded.
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string header(std::uint8_t version, std::uint8_t op, std::uint32_t length) {
  std::string h = "MLRZ";
  h += static_cast<char>(version);
  h += static_cast<char>(op);
  h.append(2, '\0');  // status
  for (std::uint32_t v : {std::uint32_t{7}, length}) {
    for (int i = 0; i < 4; ++i) h += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  return h;
}

// Sends bytes and expects the server to answer (an error reply, perhaps) and close: reads until
// end of file. False when the connection is still open after the read timeout.
bool refused_and_closed(const std::string& endpoint, const std::string& bytes) {
  int fd = dial(endpoint);
  if (fd < 0) return false;
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return true;  // Already closed by the server.
  }
  char buf[4096];
  for (int reads = 0; reads < 1000; ++reads) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      close(fd);
      return true;
    }
    if (n < 0) break;  // Timed out: the server kept it open.
  }
  close(fd);
  return false;
}

int hostile() {
  const char* endpoint_env = std::getenv("MLRUN_RDZV_ENDPOINT");
  if (endpoint_env == nullptr) return fail("MLRUN_RDZV_ENDPOINT is not set");
  std::string endpoint = endpoint_env;
  // 1. Connections that stall the server if anything can: idle ones, and half a frame.
  std::vector<int> held;
  for (int i = 0; i < 16; ++i) {
    int fd = dial(endpoint);
    if (fd < 0) return fail("cannot connect to " + endpoint);
    held.push_back(fd);
  }
  for (int i = 0; i < 8; ++i) {
    int fd = dial(endpoint);
    if (fd < 0) return fail("cannot connect to " + endpoint);
    std::string half = header(1, 1, 40).substr(0, 9);
    if (write(fd, half.data(), half.size()) < 0) return fail("write failed");
    held.push_back(fd);
  }
  // 2. Garbage of every kind: each must be refused and closed, alone.
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::string random(512, '\0');
  for (std::size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>(i * 131 + 7);
  std::vector<Case> cases = {
      {"HTTP", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"random bytes", random},
      {"bad magic", "MLRX" + header(1, 1, 0).substr(4)},
      {"wrong version", header(9, 1, 0)},
      {"huge length", header(1, 1, 0xffffffffu)},
      {"unknown op before hello", header(1, 77, 0)},
      {"a request before hello", header(1, 3, 0)},
  };
  int failures = 0;
  for (const auto& c : cases) {
    if (!refused_and_closed(endpoint, c.bytes)) {
      ++failures;
      std::fprintf(stderr, "rdzv_job_tool: %s: the server did not close the connection\n", c.what);
    }
  }
  // 3. A client with a wrong token: AuthError.
  try {
    rdzv::ClientOptions o;
    o.connect_timeout = 10s;
    rdzv::Client::connect(endpoint, "not-the-token", o);
    ++failures;
    std::fprintf(stderr, "rdzv_job_tool: a wrong token was accepted\n");
  } catch (const rdzv::AuthError&) {
  }
  // 4. Tell the ranks to start, and hold the stalled connections until they are done.
  rdzv::Client legit = rdzv::Client::from_env();
  legit.set("hostile/ready", "1");
  legit.get("work/done", 60s);
  for (int fd : held) close(fd);
  if (failures > 0) return fail(std::to_string(failures) + " hostile cases were not refused");
  std::printf("rdzv_job_tool: hostile: %zu stalled connections held, %zu garbage cases refused\n",
              held.size(), cases.size());
  return 0;
}

int work(bool after_hostile) {
  rdzv::Client c = rdzv::Client::from_env();
  c.set_timeout(60s);
  const int rank = c.rank(), world = c.world_size();
  if (rank < 0 || world < 1) return fail("RANK and WORLD_SIZE must be set");
  // From here on the hostile peer holds idle and half-open connections.
  if (after_hostile) c.wait({"hostile/ready"});
  c.set("work/rank/" + std::to_string(rank), std::to_string(rank * rank));
  for (int r = 0; r < world; ++r) {
    std::string v = c.get("work/rank/" + std::to_string(r));
    if (v != std::to_string(r * r)) return fail("rank " + std::to_string(r) + "'s value is " + v);
  }
  c.add("work/sum", rank);
  c.barrier("work/added");
  std::int64_t sum = std::stoll(c.get("work/sum"));
  if (sum != static_cast<std::int64_t>(world) * (world - 1) / 2) {
    return fail("sum is " + std::to_string(sum));
  }
  c.barrier("work/checked");
  if (rank == 0) c.set("work/done", "1");
  std::printf("rdzv_job_tool: rank %d of %d: work done\n", rank, world);
  return 0;
}

int expect_auth_error() {
  try {
    rdzv::Client::from_env();
  } catch (const rdzv::AuthError& e) {
    std::printf("rdzv_job_tool: refused as expected: %s\n", e.what());
    return 0;
  }
  return fail("a client with a wrong MLRUN_RDZV_TOKEN was accepted");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "work") return work(false);
    if (mode == "work-after-hostile") return work(true);
    if (mode == "hostile") return hostile();
    if (mode == "expect-auth-error") return expect_auth_error();
  } catch (const std::exception& e) {
    return fail(mode + ": " + e.what());
  }
  std::fprintf(stderr, "usage: rdzv_job_tool work|work-after-hostile|hostile|expect-auth-error\n");
  return 2;
}
