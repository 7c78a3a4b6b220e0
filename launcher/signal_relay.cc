#include "launcher/signal_relay.h"

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "worker/signals.h"

namespace mlrun {

namespace rdzv = mlrun::rendezvous;
using nlohmann::json;

namespace {

constexpr const char* kCountKey = "mlrun/signal/count";
constexpr std::chrono::seconds kEndBound{1};

std::string entry_key(std::int64_t n) {
  return fmt::format("mlrun/signal/{}", n);
}

void publish(rdzv::Client& c, const json& entry) {
  std::int64_t n = c.add(kCountKey, 1);
  c.set(entry_key(n), entry.dump());
}

}  // namespace

// Shared by the watcher's thread and its owner, so that a thread left behind by stop() touches
// nothing of the owner's.
struct SignalWatcher::State {
  std::mutex mutex;
  bool stopped = false;
  bool ended = false;  // The thread is past its last use of the connection and of on_signal.
  std::condition_variable end;
  std::function<void(int)> on_signal;
  std::string origin;
  rdzv::Client* client = nullptr;  // The watcher's connection while it is open: stop() ends it.
};

std::string make_signal_origin() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

void publish_signal(rdzv::Client& c, int sig, const std::string& origin) {
  publish(c, json{{"sig", sig}, {"from", origin}});
}

SignalWatcher::SignalWatcher(const std::string& endpoint, const std::string& token,
                             const std::string& job_id, std::string origin,
                             std::function<void(int)> on_signal)
    : state_(std::make_shared<State>()) {
  state_->origin = std::move(origin);
  state_->on_signal = std::move(on_signal);
  // Detached, it may outlive the loop that handles the process's signals: it takes none.
  thread_without_signals([state = state_, endpoint, token, job_id] {
    try {
      rdzv::ClientOptions options;
      options.job_id = job_id;
      rdzv::Client c = rdzv::Client::connect(endpoint, token, options);
      // Registered while c lives, so that stop() interrupts a live connection only.
      struct Registration {
        State& state;
        Registration(State& s, rdzv::Client& c) : state(s) {
          std::lock_guard lock(state.mutex);
          if (state.stopped) c.interrupt();
          state.client = &c;
        }
        ~Registration() {
          std::lock_guard lock(state.mutex);
          state.client = nullptr;
        }
      } registration(*state, c);
      for (std::int64_t n = 1;; ++n) {
        std::string text;
        // An entry may take days to come; the connection's loss ends the wait at once.
        while (true) {
          try {
            text = c.get(entry_key(n), std::chrono::hours(1));
            break;
          } catch (const rdzv::TimeoutError&) {
          }
        }
        json entry = json::parse(text, nullptr, false);
        if (!entry.is_object()) continue;
        // An end entry is an older node's (the header says why).
        if (entry.value("end", false) || entry.value("from", "") == state->origin) continue;
        std::lock_guard lock(state->mutex);
        if (state->stopped) break;
        int sig = entry.value("sig", 0);
        if (state->on_signal && sig > 0) state->on_signal(sig);
      }
    } catch (const std::exception&) {
      // An aborted job or a lost server (or stop()): the node ends for that reason anyway.
    }
    std::lock_guard lock(state->mutex);
    state->on_signal = nullptr;  // What it captured is the owner's.
    state->ended = true;
    state->end.notify_all();
  }).detach();
}

void SignalWatcher::stop() {
  std::lock_guard lock(state_->mutex);
  if (state_->stopped) return;
  state_->stopped = true;
  // Its blocked get wakes with ConnectionError and the thread ends.
  if (state_->client != nullptr) state_->client->interrupt();
}

SignalWatcher::~SignalWatcher() {
  stop();
  // The interrupted thread is done long before an agent's end (the join's last round trips
  // come between), so this seldom waits; a thread still connecting is left after the bound.
  std::unique_lock lock(state_->mutex);
  state_->end.wait_for(lock, kEndBound, [this] { return state_->ended; });
}

}  // namespace mlrun
