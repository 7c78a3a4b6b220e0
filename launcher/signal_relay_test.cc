#include "launcher/signal_relay.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

namespace rdzv = mlrun::rendezvous;

constexpr const char* kToken = "signal-relay-test-token";
constexpr const char* kJobId = "signal-relay-test";

class SignalWatcherTest : public ::testing::Test {
 protected:
  SignalWatcherTest() { restart_server(); }

  // A fresh key space: a watcher reads every entry from the first.
  void restart_server() {
    server_.reset();
    rdzv::ServerOptions options;
    options.token = kToken;
    options.job_id = kJobId;
    options.log = [](std::string_view) {};
    server_.emplace(rdzv::Server::start(std::move(options)));
  }

  rdzv::Client client() {
    rdzv::ClientOptions options;
    options.job_id = kJobId;
    return rdzv::Client::connect(server_->endpoint(), kToken, options);
  }

  std::optional<rdzv::Server> server_;
};

// What a watcher's callback saw, for the test's thread to wait on.
struct Seen {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> signals;

  bool wait_for_count(std::size_t n, std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, bound, [&] { return signals.size() >= n; });
  }
};

// A watcher's callback that adds each signal to seen.
std::function<void(int)> record(std::shared_ptr<Seen> seen) {
  return [seen](int sig) {
    std::lock_guard lock(seen->mutex);
    seen->signals.push_back(sig);
    seen->changed.notify_all();
  };
}

TEST_F(SignalWatcherTest, PassesOnOtherOriginsSignalsInOrderAndSkipsItsOwn) {
  auto seen = std::make_shared<Seen>();
  SignalWatcher watcher(server_->endpoint(), kToken, kJobId, "me", record(seen));
  rdzv::Client c = client();
  publish_signal(c, 10, "head");
  publish_signal(c, 12, "me");
  publish_signal(c, 12, "head");
  ASSERT_TRUE(seen->wait_for_count(2));
  std::lock_guard lock(seen->mutex);
  EXPECT_EQ(seen->signals, (std::vector<int>{10, 12}));
}

// Its thread ends before the destructor returns: it lets go of the callback (and of what that
// holds), so a process that exits right after never has the thread unwinding beside exit().
TEST_F(SignalWatcherTest, ItsThreadHasLetGoOfTheCallbackWhenItIsDestroyed) {
  for (int round = 0; round < 20; ++round) {
    restart_server();
    auto seen = std::make_shared<Seen>();
    {
      SignalWatcher watcher(server_->endpoint(), kToken, kJobId, "me", record(seen));
      // The watch is up (its connection blocks in a get) once a signal has come through.
      rdzv::Client c = client();
      publish_signal(c, 10, "head");
      ASSERT_TRUE(seen->wait_for_count(1));
    }
    EXPECT_EQ(seen.use_count(), 1) << "round " << round;
  }
}

TEST_F(SignalWatcherTest, PassesOnNothingAfterStop) {
  auto seen = std::make_shared<Seen>();
  SignalWatcher watcher(server_->endpoint(), kToken, kJobId, "me", record(seen));
  rdzv::Client c = client();
  publish_signal(c, 10, "head");
  ASSERT_TRUE(seen->wait_for_count(1));
  watcher.stop();
  publish_signal(c, 12, "head");
  EXPECT_FALSE(seen->wait_for_count(2, std::chrono::milliseconds(300)));
}

}  // namespace
}  // namespace mlrun
