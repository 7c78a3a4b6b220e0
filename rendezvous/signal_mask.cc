#include "rendezvous/signal_mask.h"

#include <pthread.h>

namespace mlrun {

AsyncSignalsBlocked::AsyncSignalsBlocked() {
  sigset_t block;
  sigfillset(&block);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS})
    sigdelset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old_);
}

AsyncSignalsBlocked::~AsyncSignalsBlocked() {
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace mlrun
