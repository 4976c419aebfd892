// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "scheduler/checkpoints.h"

#include <glog/logging.h>

#include <chrono>

#include "common/status_wire.h"
#include "layerps.pb.h"

namespace ps {

void Checkpoints::Answer(const Waiter& w, const Status& result, const std::string& detail) {
  layerps::pb::Control r;
  auto* cr = r.mutable_call_reply();
  cr->set_request_id(w.request_id);
  cr->set_code(static_cast<int>(result.code()));
  if (!result.ok()) cr->set_error(result.message());
  cr->set_detail(detail);
  state_->Send(w.node, r);
}

void Checkpoints::HandleRequest(NodeId from, const layerps::pb::Checkpoint& c, int64_t now_ms) {
  const Waiter w{from, c.request_id()};
  const std::string dir = c.dir().empty() ? default_dir_ : c.dir();
  if (dir.empty()) {
    Answer(w, InvalidArgument("checkpoint: no directory given, and the scheduler has no "
                              "checkpoint_dir"), "");
    return;
  }
  if (dir.size() > 4096) {
    Answer(w, InvalidArgument("checkpoint: directory name longer than 4096 bytes"), "");
    return;
  }
  if (active_) {
    if (dir == dir_) {
      waiters_.push_back(w);  // answered with the set in progress
    } else {
      Answer(w, FailedPrecondition("checkpoint: a checkpoint to " + dir_ +
                                   " is in progress; retry when it is done"), "");
    }
    return;
  }
  waiters_.push_back(w);
  StartSet(dir, now_ms);
}

void Checkpoints::StartSet(const std::string& dir, int64_t now_ms) {
  const uint64_t wall = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  std::chrono::system_clock::now().time_since_epoch())
                                                  .count());
  set_ = wall > last_set_ ? wall : last_set_ + 1;
  last_set_ = set_;
  dir_ = dir;
  set_path_.clear();
  started_ms_ = now_ms;
  active_ = true;
  pending_.clear();
  // A set without a dead server's file would be incomplete, and the live servers would
  // delete their files of older complete sets (checkpoint_keep): the set a replacement
  // restores from must survive until it has.
  for (const NodeInfo& n : state_->map().nodes) {
    if (n.role == Role::kServer && !n.alive) {
      Finish(Unavailable("checkpoint: server rank " + std::to_string(n.rank) + " (node " +
                         std::to_string(n.id) + ") is dead; no set is written until it is "
                         "replaced"),
             now_ms);
      return;
    }
  }
  layerps::pb::Control c;
  c.mutable_write_checkpoint()->set_set(set_);
  c.mutable_write_checkpoint()->set_dir(dir);
  for (const NodeInfo& n : state_->map().nodes) {
    if (n.role != Role::kServer || !n.alive) continue;
    pending_.insert(n.id);
    state_->Send(n.id, c);
  }
  LOG(INFO) << "checkpoint set " << set_ << " to " << dir << ": asked " << pending_.size()
            << " server(s)";
  if (pending_.empty()) Finish(Unavailable("checkpoint: no live server"), now_ms);
}

void Checkpoints::HandleDone(NodeId from, const layerps::pb::CheckpointDone& d, int64_t now_ms) {
  if (!active_ || d.set() != set_ || !pending_.count(from)) return;  // late or stray
  pending_.erase(from);
  if (d.code() != 0) {
    const NodeInfo* n = state_->map().FindNode(from);
    Finish(StatusFromWire(d.code(), "checkpoint: server rank " +
                                        std::to_string(n ? n->rank : 0) + " failed: " +
                                        d.error().substr(0, 4096)),
           now_ms);
    return;
  }
  if (set_path_.empty()) {
    const std::string& p = d.path();
    const size_t slash = p.rfind('/');
    set_path_ = slash == std::string::npos ? p : p.substr(0, slash);
  }
  if (pending_.empty()) Finish(Status::OK(), now_ms);
}

void Checkpoints::OnServerDead(NodeId id, int64_t now_ms) {
  if (!active_ || !pending_.count(id)) return;
  Finish(Unavailable("checkpoint: server node " + std::to_string(id) +
                     " died before writing its file"),
         now_ms);
}

void Checkpoints::Tick(int64_t now_ms) {
  if (active_ && now_ms - started_ms_ > kSetDeadlineMs) {
    Finish(Timeout("checkpoint: " + std::to_string(pending_.size()) +
                   " server(s) did not answer within an hour"),
           now_ms);
  }
  if (every_ms_ <= 0) return;
  if (next_periodic_ms_ < 0) next_periodic_ms_ = now_ms + every_ms_;
  if (now_ms >= next_periodic_ms_ && !active_) {
    next_periodic_ms_ = now_ms + every_ms_;
    StartSet(default_dir_, now_ms);
  }
}

void Checkpoints::Finish(const Status& result, int64_t now_ms) {
  active_ = false;
  if (result.ok()) {
    LOG(INFO) << "checkpoint set " << set_ << " complete: " << set_path_ << " ("
              << now_ms - started_ms_ << " ms)";
  } else {
    LOG(ERROR) << "checkpoint set " << set_ << " failed: " << result;
  }
  for (const Waiter& w : waiters_) Answer(w, result, result.ok() ? set_path_ : std::string());
  waiters_.clear();
  pending_.clear();
}

}  // namespace ps
