#include "coordinator/join.h"

#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "coordinator/keys.h"
#include "coordinator/records.h"
#include "worker/log.h"

namespace mlrun::coordinator {
namespace {

class TcpConnector final : public RendezvousConnector {
 public:
  TcpConnector(std::string endpoint, std::string token)
      : endpoint_(std::move(endpoint)), token_(std::move(token)) {}
  rdzv::Client connect(const rdzv::ClientOptions& options) override {
    return rdzv::Client::connect(endpoint_, token_, options);
  }

 private:
  std::string endpoint_, token_;
};

void log_joined(const char* word, int g, const rdzv::NodeAssignment& a, int nproc,
                std::chrono::steady_clock::time_point joining) {
  log::info("{} {}: ranks joined {}/{} ({} node{}) in {:.2f} s; this is node {}, ranks {}-{}", word,
            g, a.world_size, a.world_size, a.nnodes, a.nnodes == 1 ? "" : "s", log::since(joining),
            a.node_rank, a.rank_offset, a.rank_offset + nproc - 1);
}

// A fixed-size job: attempt g is generation g of a node-level join of exactly nnodes nodes.
class StaticJoin final : public JoinStrategy {
 public:
  StaticJoin(const NodeJob& job, RendezvousConnector& rdzv, const rdzv::ClientOptions& options)
      : job_(job), rdzv_(rdzv), options_(options) {}
  const char* word() const override { return "attempt"; }
  bool elastic() const override { return false; }

  Joined join(int /*restarts_spent*/) override {
    const int g = next_++;
    rdzv::ClientOptions options = options_;
    options.generation = g;
    auto joining = std::chrono::steady_clock::now();
    log::debug("attempt {}: joining the rendezvous at {} with {} worker{}", g, job_.endpoint,
               job_.nproc, job_.nproc == 1 ? "" : "s");
    rdzv::Client c = rdzv_.connect(options);
    // join_node returns once every node has joined: every rank of the attempt is known.
    rdzv::NodeAssignment a =
        c.join_node(job_.nnodes, job_.nproc, job_.node_rank, job_.join_timeout);
    log_joined(word(), g, a, job_.nproc, joining);
    return Joined{g, a, std::move(c), {}};
  }

  // Each node counts its result into one counter, and the last one sets `settled`: one wait
  // per node, where reading every node's result from every node was N^2 requests (43 s at 1,024
  // nodes, docs/scale.md).
  Settled settle(Joined& j) override { return settle_attempt(j.client, j.g); }

 private:
  const NodeJob& job_;
  RendezvousConnector& rdzv_;
  rdzv::ClientOptions options_;
  int next_ = 0;
};

// An elastic job: each round is joined through the server's membership rounds; its number is
// the attempt (g) that scopes every key.
class ElasticJoin final : public JoinStrategy {
 public:
  ElasticJoin(const NodeJob& job, RendezvousConnector& rdzv, const rdzv::ClientOptions& options,
              std::string member)
      : job_(job), rdzv_(rdzv), options_(options), member_(std::move(member)) {}
  const char* word() const override { return "round"; }
  bool elastic() const override { return true; }

  Joined join(int restarts_spent) override {
    rdzv::Client c = rdzv_.connect(options_);
    auto joining = std::chrono::steady_clock::now();
    log::debug("joining an elastic round at {} as {}", job_.endpoint, member_);
    {
      std::lock_guard lock(mutex_);
      if (interrupted_) {
        throw rdzv::ConnectionError("join_elastic", std::string(kElasticGroup), job_.endpoint,
                                    "interrupted: this node leaves");
      }
      joining_ = &c;
    }
    std::optional<rdzv::ElasticAssignment> joined;
    try {
      joined = c.join_elastic(kElasticGroup, join_options());
    } catch (...) {
      std::lock_guard lock(mutex_);
      joining_ = nullptr;
      throw;
    }
    {
      std::lock_guard lock(mutex_);
      joining_ = nullptr;
    }
    const rdzv::ElasticAssignment& ea = *joined;
    const rdzv::NodeAssignment& a = ea.node;
    log_joined(word(), ea.round, a, job_.nproc, joining);
    std::string note = fmt::format(
        "mlrun: round {}: {} node{} ({}), world size {}; this node ({}) is node {}, "
        "{} of {} restarts used\n",
        ea.round, a.nnodes, a.nnodes == 1 ? "" : "s", fmt::join(ea.members, ", "), a.world_size,
        member_, a.node_rank, restarts_spent, job_.max_restarts);
    return Joined{ea.round, a, std::move(c), std::move(note)};
  }

  Settled settle(Joined& j) override;

  // Closing the join's connection also takes this node out of the round's waiters on the server
  // (the others then wait for another node, not for this one).
  void interrupt() noexcept override {
    std::lock_guard lock(mutex_);
    interrupted_ = true;
    if (joining_ != nullptr) joining_->interrupt();
  }

 private:
  rdzv::ElasticJoinOptions join_options() const {
    rdzv::ElasticJoinOptions eo;
    eo.min_nodes = job_.nnodes_min;
    eo.max_nodes = job_.nnodes;
    eo.local_world_size = job_.nproc;
    eo.member = member_;
    eo.preferred_rank = job_.node_rank;
    eo.last_call = job_.last_call;
    eo.heartbeat_timeout = job_.heartbeat_timeout;
    eo.timeout = job_.join_timeout;
    return eo;
  }

  const NodeJob& job_;
  RendezvousConnector& rdzv_;
  rdzv::ClientOptions options_;
  std::string member_;
  std::mutex mutex_;  // Guards joining_ and interrupted_ (interrupt comes from the event loop).
  rdzv::Client* joining_ = nullptr;
  bool interrupted_ = false;
};

// The verdict on an elastic round: success, a membership change (no restart spent), or a
// failure.
Settled ElasticJoin::settle(Joined& j) {
  rdzv::Client& c = j.client;
  const int g = j.g;
  Settled v;
  bool all_ok = true;
  std::optional<int> first_code;
  for (int n = 0; n < j.assignment.nnodes; ++n) {
    NodeResult result = NodeResult::decode(get_eventually(c, result_key(g, n)));
    if (result.lost) continue;  // A lost node's result was filled in for it.
    if (!result.ok) {
      all_ok = false;
      if (!first_code) first_code = result.code;
    }
  }
  // Every node still here finished its workers: the job is done, whoever was lost or waits.
  if (all_ok) return v;
  auto failed = c.try_get(key(g, "failed"));
  auto changed = c.try_get(key(g, "changed"));
  bool lost = false;
  std::optional<MembershipChange> change;
  if (changed) {
    try {
      change = MembershipChange::decode(*changed);
      lost = !change->lost.empty();
      add_leave_causes(c, *change);
    } catch (const RecordError&) {
      // Shown as it is, below.
    }
  }
  v.failed = true;
  v.code = failed ? failure_code(*failed) : first_code.value_or(1);
  if (failed) v.record = *failed;
  // A membership change stops every node without spending a restart; so does a failure in a
  // round that lost a node (its peers' errors are the loss's).
  if (changed && (lost || !failed)) {
    v.change = true;
    v.change_text = change ? change->describe() : *changed;
  }
  return v;
}

}  // namespace

std::unique_ptr<RendezvousConnector> make_tcp_connector(std::string endpoint, std::string token) {
  return std::make_unique<TcpConnector>(std::move(endpoint), std::move(token));
}

std::unique_ptr<JoinStrategy> make_join_strategy(const NodeJob& job, RendezvousConnector& rdzv,
                                                 const rdzv::ClientOptions& options,
                                                 const std::string& member) {
  if (job.elastic()) return std::make_unique<ElasticJoin>(job, rdzv, options, member);
  return std::make_unique<StaticJoin>(job, rdzv, options);
}

void add_leave_causes(rdzv::Client& c, MembershipChange& change) {
  for (auto& l : change.lost) {
    if (auto why = c.try_get(left_key(l.member))) l.why = *why;
  }
}

Settled settle_attempt(rdzv::Client& c, int g) {
  if (get_eventually(c, key(g, "settled")) == kSettledOk) return {};
  if (auto record = c.try_get(key(g, "failed"))) return {true, failure_code(*record), *record};
  if (auto bad = c.try_get(key(g, "first_bad"))) return {true, failure_code(*bad), {}};
  return {};
}

std::string get_eventually(rdzv::Client& c, const std::string& k) {
  while (true) {
    try {
      return c.get(k, std::chrono::hours(1));
    } catch (const rdzv::TimeoutError&) {
    }
  }
}

}  // namespace mlrun::coordinator
