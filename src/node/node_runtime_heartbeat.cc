// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// NodeRuntime's heartbeats and scheduler recovery (node_runtime.h): the heartbeat thread,
// which notices a silent scheduler, and, with scheduler_recovery_ms, the wait for a
// scheduler to take the cluster over (Rejoin; docs/recovery.md).
#include <glog/logging.h>

#include "common/host.h"
#include "layerps.pb.h"
#include "node/node_runtime.h"
#include "transport/map_codec.h"

namespace ps {

void NodeRuntime::HeartbeatLoop() {
  Ticker ticker(clock_.get());
  while (!stopping_) {
    {
      MutexLock lock(&mu_);
      ticker.WaitFor(&mu_, &cv_, options_.heartbeat_interval_ms, [this]() REQUIRES(mu_) {
        mu_.AssertHeld();
        return stopping_.load() || shutdown_;
      });
      if (stopping_ || shutdown_) return;
    }
    layerps::pb::Control c;
    c.mutable_heartbeat();
    SendToScheduler(MakeControl(id(), c), options_.heartbeat_interval_ms);
    if (!handling_control_ && options_.scheduler_recovery_ms > 0 &&
        clock_->NowMs() - last_scheduler_contact_ms_ > options_.heartbeat_timeout_ms) {
      if (!AwaitScheduler(&ticker)) return;
      continue;
    }
    if (!handling_control_ &&
        clock_->NowMs() - last_scheduler_contact_ms_ > options_.heartbeat_timeout_ms) {
      Status lost = Unavailable("lost the scheduler: silent for more than " +
                                std::to_string(options_.heartbeat_timeout_ms) + " ms");
      LOG(ERROR) << lost;
      if (handlers_.on_node_dead) handlers_.on_node_dead(kSchedulerId, lost, false);
      // Nothing queued may wait for a cluster that is gone: discard it, so that buffers
      // lent to the transport are released and the requests complete.
      if (auto m = map()) {
        for (const auto& n : m->nodes) transport_->Disconnect(n.id);
      }
      FinishShutdown(lost);
      return;
    }
  }
}

// The scheduler is silent: this node keeps its data traffic going and sends a Rejoin to
// the scheduler's address every heartbeat interval, until a scheduler speaks again (a
// restarted one answers with a new map once the cluster is rebuilt) or
// scheduler_recovery_ms passes (then the node shuts down as without recovery). Once one
// speaks, the calls still waiting for an answer are sent to it again.
bool NodeRuntime::AwaitScheduler(Ticker* ticker) {
  const int64_t since = clock_->NowMs();
  const uint64_t heard = scheduler_messages_.load();
  {
    MutexLock lock(&mu_);
    scheduler_lost_ = true;
  }
  LOG(WARNING) << "lost the scheduler (silent for more than " << options_.heartbeat_timeout_ms
               << " ms); waiting up to " << options_.scheduler_recovery_ms
               << " ms for a scheduler at " << options_.scheduler_address
               << " to take the cluster over (scheduler_recovery_ms)";
  while (!stopping_) {
    {
      MutexLock lock(&mu_);
      // A scheduler that speaks ends the wait at once (ReceiveLoop signals): the calls
      // waiting for an answer go to it without waiting out the interval.
      ticker->WaitFor(&mu_, &cv_, options_.heartbeat_interval_ms, [this, heard]() REQUIRES(mu_) {
        mu_.AssertHeld();
        return stopping_.load() || shutdown_ || scheduler_messages_.load() != heard;
      });
      if (stopping_ || shutdown_) return false;
    }
    if (scheduler_messages_.load() != heard) break;
    if (clock_->NowMs() - since > options_.scheduler_recovery_ms) {
      Status lost = Unavailable("lost the scheduler: silent for more than " +
                                std::to_string(options_.heartbeat_timeout_ms) +
                                " ms, and no scheduler took the cluster over within "
                                "scheduler_recovery_ms=" +
                                std::to_string(options_.scheduler_recovery_ms));
      LOG(ERROR) << lost;
      if (handlers_.on_node_dead) handlers_.on_node_dead(kSchedulerId, lost, false);
      if (auto m = map()) {
        for (const auto& n : m->nodes) transport_->Disconnect(n.id);
      }
      FinishShutdown(lost);
      return false;
    }
    SendToScheduler(RejoinMessage(), options_.heartbeat_interval_ms);
  }
  std::vector<std::string> resend;
  {
    MutexLock lock(&mu_);
    scheduler_lost_ = false;
    for (const auto& kv : calls_) {
      if (!kv.second.done && !kv.second.request.empty()) resend.push_back(kv.second.request);
    }
  }
  LOG(WARNING) << "a scheduler took the cluster over after "
               << clock_->NowMs() - since << " ms; " << resend.size()
               << " call(s) waiting for an answer sent to it again";
  for (const std::string& r : resend) {
    layerps::pb::Control c;
    if (c.ParseFromString(r)) SendToScheduler(MakeControl(id(), c), kControlSendTimeoutMs);
  }
  return true;
}

Message NodeRuntime::RejoinMessage() {
  layerps::pb::Control c;
  auto* r = c.mutable_rejoin();
  r->set_token(options_.token);
  r->set_session(secret_);
  r->set_id(id());
  r->set_role(static_cast<layerps::pb::Role>(role_));
  r->set_rank(rank());
  r->set_endpoint(endpoint_);
  r->set_hostname(LocalHostname());
  MutexLock lock(&mu_);
  r->set_tag(tag_);
  if (map_) MapToProto(*map_, r->mutable_map());
  for (const auto& kv : barriers_passed_) {
    auto* b = r->add_barriers();
    b->set_group(kv.first);
    b->set_passed(kv.second);
  }
  return MakeControl(id(), c);
}

}  // namespace ps
