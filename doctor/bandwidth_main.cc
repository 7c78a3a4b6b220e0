// mlrun-allreduce-sweep: one rank of `mlrun doctor --bandwidth`. A program of its own so that
// Gloo (and the InfiniBand libraries it pulls in), the CUDA runtime and NCCL are loaded by the
// sweep's ranks only, never by the launcher, whose memory stays small.
#include <string>
#include <vector>

#include "doctor/bandwidth.h"

int main(int argc, char** argv) {
  return mlrun::doctor::allreduce_sweep_command(std::vector<std::string>(argv + 1, argv + argc));
}
