// What the loop watches besides the workers: the head's lifeline, and every tick a heartbeat
// when one is due and, elastic, the running round's change key (quick requests only).
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "coordinator/coordinator.h"
#include "coordinator/keys.h"
#include "worker/log.h"

namespace mlrun::coordinator {

// The head's lifeline (an agent's stdin): end-of-file means the head is gone.
void NodeCoordinator::watch_lifeline() {
  lifeline_stream_->async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [this](const boost::system::error_code& ec) {
        if (ec) return;
        char buf[256];
        ssize_t n = ::read(lifeline_stream_->native_handle(), buf, sizeof buf);
        if (n > 0 || (n < 0 && errno == EINTR)) return watch_lifeline();
        parent_gone_ = true;
        abort_here(job_.tree_parent.empty()
                       ? std::string("the head's connection is gone")
                       : fmt::format("the connection of {}, its parent in the launch tree, is gone",
                                     job_.tree_parent),
                   1);
      });
}

void NodeCoordinator::arm_tick() {
  const auto every =
      std::min<std::chrono::milliseconds>(job_.heartbeat_interval, std::chrono::milliseconds(1000));
  tick_.expires_after(every);
  tick_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || lost_here_ || leaving_) return;
    tick();
  });
}

void NodeCoordinator::tick() {
  try {
    auto now = std::chrono::steady_clock::now();
    if (elastic_ && now - last_beat_ >= job_.heartbeat_interval) {
      last_beat_ = now;
      beat_->heartbeat(kElasticGroup, member_);
    } else if (!elastic_ && !beat_name_.empty() && now - last_beat_ >= job_.heartbeat_interval) {
      last_beat_ = now;
      send_node_beat();
      if (lost_here_) return;
    }
  } catch (const rdzv::AbortedError&) {
    // The coordinator wakes with the abort too and ends this node.
  } catch (const rdzv::Error& e) {
    lost_here_ = true;
    abort_here(fmt::format("this node lost the rendezvous at {}: {}", job_.endpoint, e.what()), 1);
    return;
  }
  try {
    if (active_round_ >= 0) check_change();
  } catch (const rdzv::Error&) {
    // The heartbeat or the coordinator reports a lost server.
  }
  report_join(std::chrono::steady_clock::now());
  arm_tick();
}

void NodeCoordinator::report_join(std::chrono::steady_clock::time_point now) {
  using std::chrono::milliseconds;
  const std::int64_t since = joining_since_ms_;
  if (since == 0 || job_.serves_rendezvous || !job_.print_summary || !job_.report_join_wait ||
      job_.join_timeout < std::chrono::seconds(2)) {
    return;
  }
  if (since != reported_join_) {
    reported_join_ = since;
    next_join_report_ = std::min<milliseconds>(std::chrono::seconds(30), job_.join_timeout / 2);
  }
  const milliseconds waited =
      std::chrono::duration_cast<milliseconds>(now.time_since_epoch()) - milliseconds(since);
  if (waited < next_join_report_) return;
  next_join_report_ += std::chrono::seconds(60);
  fmt::print(stderr,
             "mlrun: waiting for the other nodes to join the rendezvous at {}: {:.0f} s so far, up "
             "to {:.0f} s (the node serving it names who is missing)\n",
             job_.endpoint, waited.count() / 1000.0, job_.join_timeout.count() / 1000.0);
}

std::string NodeCoordinator::heartbeat_name(int node_rank) const {
  return fmt::format("node {} ({})", node_rank, job_.host);
}

std::string NodeCoordinator::self_name() const {
  return node_rank_ < 0 ? fmt::format("{} (no rank yet)", job_.host) : heartbeat_name(node_rank_);
}

// One heartbeat of a fixed-size node. A server older than protocol 1.2 refuses the op: the job
// runs without, and says so once. A lost server ends this node, as an elastic one.
void NodeCoordinator::send_node_beat() {
  try {
    beat_->node_heartbeat(beat_name_, job_.heartbeat_timeout);
    if (!node_beats_work_) {
      log::debug("heartbeats as {} every {} ms; the server ends the job after {} ms without",
                 beat_name_, job_.heartbeat_interval.count(), job_.heartbeat_timeout.count());
      node_beats_work_ = true;
      if (job_.lost_on_close) arm_close_watch();
    }
  } catch (const rdzv::AbortedError&) {
    // The coordinator wakes with the abort too and ends this node.
  } catch (const rdzv::Error& e) {
    if (!node_beats_work_ && dynamic_cast<const rdzv::ConnectionError*>(&e) == nullptr) {
      fmt::print(stderr,
                 "mlrun: warning: node {}: the rendezvous server at {} has no node heartbeats "
                 "(protocol 1.2; {}): a hung node will not be noticed\n",
                 node_rank_, job_.endpoint, e.what());
      beat_name_.clear();
      return;
    }
    lost_here_ = true;
    abort_here(fmt::format("this node lost the rendezvous at {}: {}", job_.endpoint, e.what()), 1);
  }
}

// No head will say that this node died: the server is to take the heartbeats' connection closing
// for it (node_watch), until run() takes that back at the node's end. A server before protocol
// 1.3 cannot: a killed node is then waited for as before (join_timeout, or for ever once joined).
void NodeCoordinator::arm_close_watch() {
  try {
    beat_->node_watch(true);
    close_watch_armed_ = true;
  } catch (const rdzv::AbortedError&) {
    // The coordinator wakes with the abort too and ends this node.
  } catch (const rdzv::ConnectionError&) {
    // The next heartbeat finds the server gone.
  } catch (const rdzv::Error& e) {
    log::debug(
        "the rendezvous server at {} cannot watch this node's connection (protocol 1.3; "
        "{}): the others would wait for it if it were killed",
        job_.endpoint, e.what());
  }
}

// A lost node reports nothing: its result is filled in, so that every node can settle.
void NodeCoordinator::fill_lost_results(int g, const MembershipChange& change) {
  for (const auto& l : change.lost) {
    if (l.node < 0 || !lost_filled_.insert(l.node).second) continue;
    control_.compare_set(result_key(g, l.node), "", NodeResult{false, 1, /*lost=*/true}.encode());
  }
}

// Elastic: a change of the running round stops every node's workers for a new round, unless it
// leaves fewer than the minimum, which ends the job.
void NodeCoordinator::check_change() {
  const int g = active_round_;
  auto text = control_.try_get(change_key(g));
  if (!text) return;
  MembershipChange change;
  try {
    change = MembershipChange::decode(*text);
  } catch (const RecordError&) {
    return;
  }
  add_leave_causes(control_, change);
  fill_lost_results(g, change);
  // Once this node's result is out, the verdict decides (every node the same way).
  if (change_handled_ || result_written_) return;
  change_handled_ = true;
  if (!change.lost.empty() && change.alive < job_.nnodes_min) {
    publish_abort(fmt::format("{}; {} node{} left, fewer than the minimum of --nnodes={}:{}",
                              change.describe_lost(), change.alive, change.alive == 1 ? "" : "s",
                              job_.nnodes_min, job_.nnodes));
    return;
  }
  if (control_.compare_set(key(g, "changed"), "", *text) != *text) return;
  for (int n = 0; n < nnodes_; ++n) control_.compare_set(notify_key(g, n), "", "change");
}

}  // namespace mlrun::coordinator
