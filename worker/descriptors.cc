// close_descriptors_from (worker/process.h): apart from process.cc, since the mlrun-lifeline
// program needs it too and links no more than it uses (launcher/CMakeLists.txt).
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "worker/process.h"

namespace mlrun {

// Close-on-exec alone is not enough: libraries (libssh, Asio, NCCL) open descriptors without it,
// and a worker's daemon that inherited the rendezvous' listening socket would keep its port bound
// after mlrun exits.
void close_descriptors_from(int first) {
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
  // Kernels before 5.9: every descriptor the limit allows.
  struct rlimit limit;
  rlim_t end = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  if (end == RLIM_INFINITY || end > (1u << 20)) end = 1u << 20;
  for (rlim_t fd = static_cast<rlim_t>(first); fd < end; ++fd) close(static_cast<int>(fd));
}

}  // namespace mlrun
