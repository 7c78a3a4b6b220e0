// How a node joins each attempt and settles it with every node: a fixed-size job's attempts
// (generation g, restarts only on failure) or an elastic job's membership rounds (a change of
// membership starts a new round without spending a restart). NodeCoordinator runs one loop over
// either (coordinator/coordinator.h).
#pragma once

#include <memory>
#include <string>

#include <mlrun/rendezvous.hpp>

#include "coordinator/node.h"

namespace mlrun::coordinator {

namespace rdzv = mlrun::rendezvous;

/// How this node reaches the rendezvous: every connection of the coordinator is made here, so a
/// test can count, refuse or wrap them.
class RendezvousConnector {
 public:
  virtual ~RendezvousConnector() = default;
  /// A new, authenticated connection (throws rdzv::Error).
  virtual rdzv::Client connect(const rdzv::ClientOptions& options) = 0;
};

/// The real one: endpoint "host:port" with token.
std::unique_ptr<RendezvousConnector> make_tcp_connector(std::string endpoint, std::string token);

/// One joined attempt: its number g (the generation, or the elastic round), this node's place,
/// and the connection that waits for its end.
struct Joined {
  int g = 0;
  rdzv::NodeAssignment assignment;
  rdzv::Client client;
  /// Printed when the attempt starts (elastic: the round's members); may be empty.
  std::string note;
};

/// The job-wide verdict on an attempt; every node computes the same one from the same keys.
struct Settled {
  bool failed = false;
  int code = 0;
  std::string
      record;  ///< The first failure's record (coordinator/records.h), if one was published.
  /// Elastic: the membership changed; the next round starts without spending a restart.
  bool change = false;
  std::string change_text;
};

class JoinStrategy {
 public:
  virtual ~JoinStrategy() = default;
  /// "attempt" or "round", for messages.
  virtual const char* word() const = 0;
  /// Elastic: rounds, heartbeats into the group, the change key watched while a round runs.
  virtual bool elastic() const = 0;
  /// Joins the next attempt; blocks until every node of it has joined (bounded by the job's
  /// join_timeout). restarts_spent: restarts used so far, for the note.
  virtual Joined join(int restarts_spent) = 0;
  /// Waits (renewed: an attempt may run for days) until every node's result of j is in.
  virtual Settled settle(Joined& j) = 0;
  /// From another thread: a join blocked now, or begun later, throws rdzv::ConnectionError at
  /// once (an elastic node that leaves on SIGTERM while it waits for a round).
  virtual void interrupt() noexcept {}
};

/// The strategy for job: elastic when job.elastic(), else fixed-size. member: this node's identity
/// in the elastic group.
std::unique_ptr<JoinStrategy> make_join_strategy(const NodeJob& job, RendezvousConnector& rdzv,
                                                 const rdzv::ClientOptions& options,
                                                 const std::string& member);

/// A fixed-size job's verdict on attempt g (for a head that watches the job: watch_job).
Settled settle_attempt(rdzv::Client& c, int g);

struct MembershipChange;
/// The lost members' causes, where they left on their own (keys.h left_key).
void add_leave_causes(rdzv::Client& c, MembershipChange& change);

/// Waits for a key that is set when a training attempt ends, which can take days. Liveness is
/// the connection's business (a lost server is a ConnectionError at once), so the bound is
/// renewed.
std::string get_eventually(rdzv::Client& c, const std::string& key);

}  // namespace mlrun::coordinator
