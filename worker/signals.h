// Which signals to the launcher stop the job and which it passes on to the workers while the job
// goes on (docs/launcher.md, "Signals").
//
// Stop signals (SIGINT, SIGTERM and SIGHUP always, plus whatever torchrun's
// --signals_to_handle lists) tear the job down: each is sent to every worker's process group, then
// SIGKILL after the grace period, and mlrun exits 128+N. SIGUSR1 and SIGUSR2, unless listed, are
// forwarded to every worker process and the job goes on, as mpirun does (Slurm's preemption
// warning, Lightning's auto-requeue and checkpoint hooks use them).
#pragma once

#include <signal.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/signal_mask.h"  // AsyncSignalsBlocked, thread_without_signals

namespace mlrun {

/// torchrun 2.9's default --signals_to_handle.
inline constexpr std::string_view kDefaultSignalsToHandle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

/// A SIGINT that comes sooner than this after the first stop signal is the same Ctrl-C delivered
/// twice (the terminal sends it to its foreground group, and a wrapper in that group such as
/// `timeout --foreground` passes its own on), not a second one, which kills at once.
inline constexpr std::chrono::milliseconds kRepeatedSignal{200};

struct SignalPolicy {
  std::vector<int> stop{SIGINT, SIGTERM, SIGHUP};  ///< Signals that end the job.
  std::vector<int> forward{SIGUSR1, SIGUSR2};      ///< Passed to every worker; the job goes on.
  /// Whether a forwarded signal this launcher gets itself goes on to its workers. false for an
  /// agent in a Slurm step: Slurm signals every process of the step, the workers too, so passing
  /// it on would deliver it twice (the head's, through the rendezvous, still go on).
  bool forward_own = true;
  /// Ctrl-Z (SIGTSTP) stops the workers with the launcher, and SIGCONT (fg, bg) starts them again:
  /// each worker leads its own process group, out of the terminal's reach. Only for a job of one
  /// node: a node stopped in a job of several would be taken for a hung one (its heartbeats).
  bool job_control = false;
  bool is_forwarded(int sig) const;
};

/// "SIGUSR1" or "USR1" (any case) as a signal number; 0 when it is not one mlrun handles
/// (INT, TERM, HUP, QUIT, USR1, USR2, ALRM, XCPU, PWR).
int signal_from_name(std::string_view name);
/// "SIGUSR1" for SIGUSR1.
std::string signal_name(int sig);

/// The policy for a --signals_to_handle list ("SIGTERM,SIGUSR1"); every name that is not a
/// signal mlrun handles goes into errors, one message each.
SignalPolicy make_signal_policy(std::string_view signals_to_handle,
                                std::vector<std::string>& errors);

/// Takes SIGHUP out of the policy when this process was started with it ignored (`nohup mlrun
/// ...`, `trap '' HUP`): a handler or a signalfd's wait would undo what the user asked for, and
/// the job would end with the terminal. It stays ignored, in the workers too. Only SIGHUP: a shell
/// without job control starts `mlrun ... &` with SIGINT and SIGQUIT ignored by its own rule, not
/// the user's, and its `kill -INT $!` must still stop the job (torchrun's handlers too ignore
/// an inherited SIG_IGN). Returns whether SIGHUP was taken out.
bool leave_sighup_ignored(SignalPolicy& policy);

/// Whether this process was started with SIGTSTP ignored (no job control wanted): Ctrl-Z is then
/// left alone.
bool sigtstp_ignored();

/// Gives the policy's forwarded signals a handler that does nothing, so that one arriving while
/// no worker runs (before the first starts, after the last ended) cannot end the launcher by its
/// default action. A handler, not SIG_IGN: an ignored signal would stay ignored in the workers
/// after exec, a handled one is reset to its default there.
void keep_forwarded_signals_harmless(const SignalPolicy& policy);

}  // namespace mlrun
