#include "worker/signals.h"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace mlrun {
namespace {

constexpr int kHandled[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGUSR1,
                            SIGUSR2, SIGALRM, SIGXCPU, SIGPWR};

void add_once(std::vector<int>& v, int sig) {
  if (std::find(v.begin(), v.end(), sig) == v.end()) v.push_back(sig);
}

void do_nothing(int) {}

}  // namespace

bool SignalPolicy::is_forwarded(int sig) const {
  return std::find(forward.begin(), forward.end(), sig) != forward.end();
}

int signal_from_name(std::string_view name) {
  std::string upper;
  for (char c : name) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  if (upper.rfind("SIG", 0) == 0) upper.erase(0, 3);
  for (int sig : kHandled) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev != nullptr && upper == abbrev) return sig;
  }
  return 0;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

SignalPolicy make_signal_policy(std::string_view list, std::vector<std::string>& errors) {
  SignalPolicy p;
  p.stop.clear();
  p.forward.clear();
  // mlrun's contract (docs/launcher.md): these three always stop the job, listed or not; a
  // launcher that died of them by default would leave its workers to the lifeline.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) add_once(p.stop, sig);
  std::string_view rest = list;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.find_first_not_of(" \t") == std::string_view::npos) continue;
    int sig = signal_from_name(item);
    if (sig == 0) {
      errors.push_back(fmt::format(
          "--signals_to_handle: '{}' is not a signal mlrun handles (SIGINT, SIGTERM, SIGHUP, "
          "SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGPWR)",
          item));
      continue;
    }
    add_once(p.stop, sig);
  }
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(p.stop.begin(), p.stop.end(), sig) == p.stop.end()) p.forward.push_back(sig);
  }
  return p;
}

bool sigtstp_ignored() {
  struct sigaction now {};
  return sigaction(SIGTSTP, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) == 0 &&
         now.sa_handler == SIG_IGN;
}

bool leave_sighup_ignored(SignalPolicy& policy) {
  struct sigaction now {};
  if (sigaction(SIGHUP, nullptr, &now) != 0 || (now.sa_flags & SA_SIGINFO) != 0 ||
      now.sa_handler != SIG_IGN) {
    return false;
  }
  std::erase(policy.stop, SIGHUP);
  return true;
}

void keep_forwarded_signals_harmless(const SignalPolicy& policy) {
  struct sigaction sa {};
  sa.sa_handler = do_nothing;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : policy.forward) sigaction(sig, &sa, nullptr);
}

}  // namespace mlrun
