// What the nodes of a job pass each other through the rendezvous (keys in coordinator/keys.h,
// docs/multinode.md): the first failure's record, each node's result of an attempt, and the
// server's membership change of an elastic round. Each record has one encoder and one decoder;
// a decoder throws RecordError, naming the record and the cause, for text it cannot read.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlrun::coordinator {

/// A record that cannot be read; what() says which record and why.
class RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The first failed worker of an attempt, anywhere (mlrun/G/failed, first writer wins). Every
/// node prints it (launcher/summary.h format_record_summary) and takes its code as the job's.
struct FailureRecord {
  int node = -1;
  std::string host;
  int rank = 0;
  int local_rank = 0;
  int pid = -1;
  std::string status;             ///< "exit code 3", "signal SIGSEGV (11)".
  int code = 1;                   ///< The exit code the job ends with: the code, or 128+N.
  std::string time;               ///< When it ended (launcher/summary.h format_time).
  std::vector<std::string> tail;  ///< The last lines of its stderr.
  std::string error;              ///< Its TORCHELASTIC_ERROR_FILE message, or empty.

  std::string encode() const;
  static FailureRecord decode(const std::string& text);
};

/// The code of a failure record, 1 for one that cannot be read (a failure it still is).
int failure_code(const std::string& text);

/// One node's group of an attempt ended (mlrun/G/result/N). A lost node's result is written for
/// it by the nodes that saw it lost (lost: true), so that every node can settle the round.
struct NodeResult {
  bool ok = false;
  int code = 0;
  bool lost = false;

  std::string encode() const;
  static NodeResult decode(const std::string& text);
};

/// A node the server lost while an elastic round ran.
struct LostNode {
  int node = -1;
  std::string member;      ///< "host#1a2b3c4d".
  std::string why;         ///< The server's cause, or the node's own (it left on SIGTERM).
  std::string last_heard;  ///< Wall clock of its last heartbeat.
  double silent_s = 0;
};

/// The server's mlrun/elastic/nodes/R/change: nodes joined (waiting for the next round) or lost
/// while round R ran (rendezvous/server_elastic.cc publish_change writes it).
struct MembershipChange {
  int round = 0;
  int alive = 0;  ///< Nodes of the round still alive.
  int min = 0;
  int max = 0;
  std::vector<std::string> joined;
  std::vector<LostNode> lost;

  std::string encode() const;
  static MembershipChange decode(const std::string& text);
  /// "node 1 (host2#ab) lost: why; last heard from at 12:00:03 (31.0 s ago)", one per node.
  std::string describe_lost() const;
  /// describe_lost and "host3#cd is waiting to join", one per joined node.
  std::string describe() const;
};

}  // namespace mlrun::coordinator
