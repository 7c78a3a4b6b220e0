// mlrun-lifeline: the lifeline (worker/lifeline.h) as a program of its own, which a launcher
// starts by posix_spawn instead of forking itself (Lifeline::start says why).
//
//   mlrun-lifeline LAUNCHER_PID BOUND_MS WATCH
//
// Descriptor 3 is the launcher's pipe; WATCH 1: descriptor 4 is the agent's stdin to watch.
#include <cstdio>
#include <cstdlib>

#include "worker/lifeline.h"

int main(int argc, char** argv) {
  char* end = nullptr;
  long launcher = argc == 4 ? std::strtol(argv[1], &end, 10) : 0;
  if (argc != 4 || *end != '\0' || launcher <= 0) {
    std::fputs("mlrun-lifeline: started by mlrun only (worker/lifeline.h)\n", stderr);
    return 2;
  }
  long bound_ms = std::strtol(argv[2], nullptr, 10);
  bool watch = argv[3][0] == '1';
  mlrun::lifeline_main(3, watch ? 4 : -1, bound_ms, static_cast<pid_t>(launcher));
}
