// --backend mpi: the job runs under Open MPI's mpirun (mpi/mpirun.h builds its command line),
// supervised as one process: its output re-tagged by rank, its failure summarised, restarted as
// a whole with --max_restarts.
#pragma once

#include "launcher/options.h"
#include "launcher/plan.h"
#include "worker/lifeline.h"

namespace mlrun::mpi {

/// Runs the planned job through mpirun and returns the exit code (mpirun's: the first failed
/// rank's, or 128+N after signal N).
int launch_mpi(const Options& options, const LaunchPlan& plan, Lifeline& lifeline);

}  // namespace mlrun::mpi
