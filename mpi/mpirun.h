// --backend mpi (docs/design.md §6): the job runs through Open MPI's mpirun, so an MPI program gets
// a real MPI world of the planned size. A rank started without mpirun is a singleton world of size
// 1 whatever variables it is given, so mlrun delegates the launch to mpirun: a generated hostfile,
// -np WORLD, and -x NAME for every variable mlrun sets, the way horovodrun does.
//
// Everything here is pure except write_mpi_hostfile: the command is built from the plan and
// unit-tested without running mpirun.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlrun::mpi {

/// One host of the plan, in rank order: it runs the next `slots` ranks.
struct MpiHost {
  std::string host;  ///< A name or address that mpirun can reach (it uses SSH for others).
  int slots = 1;     ///< Ranks on this host.
  int cores = 0;     ///< Its online CPUs when known; 0: unknown.
};

/// A planned job, as --backend mpi needs it.
struct MpiJob {
  std::vector<MpiHost> hosts;
  int world_size = 1;             ///< -np; at most the sum of the hosts' slots.
  std::vector<std::string> argv;  ///< The program every rank runs, argv[0] resolved.
  /// mpirun's own environment before mlrun's variables ("NAME=value"): the launcher's.
  std::vector<std::string> base_env;
  /// Set for every rank, replacing the launcher's value (mlrun's own and -x VAR=VALUE).
  std::vector<std::pair<std::string, std::string>> overrides;
  /// Set only where base_env has no value (backend and network defaults: the user wins).
  std::vector<std::pair<std::string, std::string>> defaults;
  /// Exported as they are in base_env when set there: docs/design.md §6 carries the launching
  /// node's PATH and LD_LIBRARY_PATH to every remote rank (an MPI install outside the default paths
  /// is otherwise not found on remote nodes).
  std::vector<std::string> inherit = {"PATH", "LD_LIBRARY_PATH"};
  std::string mpirun = "mpirun";  ///< The mpirun to run (a resolved path, preferably).
  std::string hostfile_dir;       ///< Where the generated hostfile goes.
  bool as_root = false;           ///< The launcher runs as root (Open MPI refuses without leave).
  std::string prefix;             ///< Non-empty: --prefix DIR, where orted lives on remote hosts.
};

/// What to run: mpirun's argv and complete environment, and the hostfile it reads.
struct MpiCommand {
  std::vector<std::string> argv;
  std::vector<std::string> env;  ///< "NAME=value", complete.
  std::string hostfile_path;     ///< hostfile_dir + "/hostfile".
  std::string hostfile_text;     ///< "host slots=N\n" per host, in rank order.
};

/// Builds the mpirun command line for job:
///   mpirun [--allow-run-as-root] --hostfile H -np WORLD --map-by slot --bind-to none
///          [--oversubscribe] --tag-output [--prefix P] -x NAME ... -- PROGRAM ARGS...
/// Ranks fill the hosts in order (--map-by slot), as docs/design.md §4 lays them out. Binding is
/// off: mlrun's workers (PyTorch, data loaders) start their own threads, and Open MPI's default
/// binding with np > 2 pins each rank to one socket or core. --oversubscribe when a host runs
/// more ranks than its known cores: with slots= given Open MPI 4.1 already runs that many, and
/// the flag keeps its core-count checks from refusing the plan. Values reach the ranks through
/// mpirun's environment (env), never its argv, so a secret such as MLRUN_RDZV_TOKEN stays out
/// of `ps`. Throws std::invalid_argument for a job mpirun cannot run as planned: no hosts, no
/// program, world_size < 1 or above the slots, a host with slots < 1, a host name that starts
/// with '-' or holds whitespace, a variable name that is not NAME.
MpiCommand build_mpirun_command(const MpiJob& job);

/// Writes command.hostfile_text to command.hostfile_path. Throws std::runtime_error naming the
/// file and errno's message.
void write_mpi_hostfile(const MpiCommand& command);

/// The stream a line of mpirun's output came from.
enum class MpiStream { kStdout, kStderr, kStddiag, kUntagged };

/// One piece of rank output recovered from mpirun's --tag-output.
struct MpiOutputPiece {
  int rank = -1;  ///< -1 for kUntagged (mpirun's own messages).
  MpiStream stream = MpiStream::kUntagged;
  std::string_view text;  ///< Without the tag and without the line's newline.
};

/// Parses one line (newline removed) of mpirun --tag-output output: "[JOB,RANK]<stdout>:text",
/// "<stderr>" or "<stddiag>". A rank that writes without a final newline makes mpirun put the
/// next tag right after its text ("[1,0]<stdout>:partial[1,1]<stdout>:hi"), so a line may hold
/// several pieces; each is returned in order. A line that does not start with a tag is one
/// kUntagged piece. The pieces point into line.
std::vector<MpiOutputPiece> parse_mpi_output_line(std::string_view line);

}  // namespace mlrun::mpi
