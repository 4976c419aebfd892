// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// NodeRuntime's calls to the scheduler (node_runtime.h): CallScheduler, the request and
// reply it waits for, and the calls built on it (checkpoint, declare and drop a table,
// learning rate, barrier, join, placement). Start and stop, the receive loop and the
// control messages are in node_runtime.cc; heartbeats and scheduler recovery in
// node_runtime_heartbeat.cc.
#include <algorithm>

#include "layerps.pb.h"
#include "node/node_runtime.h"
#include "transport/map_codec.h"

namespace ps {

StatusOr<uint32_t> NodeRuntime::CallScheduler(const std::function<void(uint64_t, void*)>& fill,
                                              std::chrono::milliseconds timeout, const char* what,
                                              std::string* detail) {
  if (!running_) return FailedPrecondition(std::string(what) + ": node is not running");
  uint64_t call_id;
  {
    MutexLock lock(&mu_);
    call_id = next_call_id_++;
    calls_[call_id] = PendingCall{};
  }
  layerps::pb::Control c;
  fill(call_id, &c);
  if (options_.scheduler_recovery_ms > 0) {
    MutexLock lock(&mu_);
    calls_[call_id].request = c.SerializeAsString();
  }
  Status sent = SendToScheduler(MakeControl(id(), c), kControlSendTimeoutMs);
  MutexLock lock(&mu_);
  if (!sent.ok() && !(options_.scheduler_recovery_ms > 0 && scheduler_lost_)) {
    calls_.erase(call_id);
    return sent;
  }
  cv_.WaitFor(&mu_, timeout, [&]() REQUIRES(mu_) { return calls_[call_id].done || shutdown_; });
  PendingCall call = calls_[call_id];
  calls_.erase(call_id);
  if (!call.done) {
    if (shutdown_)
      return shutdown_status_.ok() ? Aborted("the cluster shut down") : shutdown_status_;
    return Timeout(std::string(what) + ": no answer from the scheduler within " +
                   std::to_string(timeout.count()) + " ms");
  }
  if (!call.status.ok()) return call.status;
  if (detail != nullptr) *detail = call.detail;
  return call.value;
}

StatusOr<std::string> NodeRuntime::Checkpoint(const std::string& dir,
                                              std::chrono::milliseconds timeout) {
  std::string path;
  StatusOr<uint32_t> r = CallScheduler(
      [&](uint64_t call_id, void* msg) {
        auto* c = static_cast<layerps::pb::Control*>(msg)->mutable_checkpoint();
        c->set_request_id(call_id);
        c->set_dir(dir);
      },
      timeout, "checkpoint", &path);
  if (!r.ok()) return r.status();
  return path;
}

StatusOr<TableId> NodeRuntime::DeclareTable(const TableSpec& spec,
                                            std::chrono::milliseconds timeout) {
  PS_RETURN_IF_ERROR(spec.Validate());
  StatusOr<uint32_t> id = CallScheduler(
      [&](uint64_t call_id, void* msg) {
        auto* d = static_cast<layerps::pb::Control*>(msg)->mutable_declare_table();
        d->set_request_id(call_id);
        SpecToProto(spec, d->mutable_spec());
      },
      timeout, "declare table");
  if (!id.ok()) return id.status();
  // The reply comes after the map naming the table was installed on every server; make
  // sure this node has it too before the caller pushes.
  MutexLock lock(&mu_);
  const bool have = cv_.WaitFor(&mu_, timeout, [&]() REQUIRES(mu_) {
    return shutdown_ || (map_ && map_->FindTable(*id) != nullptr);
  });
  if (!have || shutdown_)
    return Unavailable("declared table " + spec.name + " but its map did not arrive");
  return static_cast<TableId>(*id);
}

Status NodeRuntime::SetLearningRate(TableId table, float learning_rate,
                                    std::chrono::milliseconds timeout) {
  return CallScheduler(
             [&](uint64_t call_id, void* msg) {
               auto* m = static_cast<layerps::pb::Control*>(msg)->mutable_set_learning_rate();
               m->set_request_id(call_id);
               m->set_table(table);
               m->set_learning_rate(learning_rate);
             },
             timeout, "set learning rate")
      .status();
}

Status NodeRuntime::DropTable(const std::string& name, std::chrono::milliseconds timeout) {
  if (name.empty()) return InvalidArgument("DropTable: empty table name");
  TableId id = kInvalidTable;
  {
    MutexLock lock(&mu_);
    const TableInfo* t = map_ ? map_->FindTableByName(name) : nullptr;
    if (t != nullptr) id = t->id;
  }
  StatusOr<uint32_t> r = CallScheduler(
      [&](uint64_t call_id, void* msg) {
        auto* d = static_cast<layerps::pb::Control*>(msg)->mutable_drop_table();
        d->set_request_id(call_id);
        d->set_name(name);
      },
      timeout, "drop table");
  if (!r.ok()) return r.status();
  // The scheduler broadcast the map without the table before answering.
  MutexLock lock(&mu_);
  const bool gone = cv_.WaitFor(&mu_, timeout, [&]() REQUIRES(mu_) {
    if (shutdown_) return true;
    if (!map_) return false;
    const TableInfo* t = map_->FindTableByName(name);
    return t == nullptr || (id != kInvalidTable && t->id != id);
  });
  if (!gone || shutdown_) return Unavailable("dropped table " + name + " but its map did not arrive");
  return Status::OK();
}

namespace {
// The scheduler enforces the caller's deadline itself (and names who is missing); this
// node waits a little longer for that answer before giving up on its own.
constexpr int64_t kSchedulerDeadlineGraceMs = 2000;
std::chrono::milliseconds WithGrace(std::chrono::milliseconds t) {
  const int64_t cap = int64_t{1} << 40;
  return std::chrono::milliseconds(std::min<int64_t>(t.count(), cap) + kSchedulerDeadlineGraceMs);
}
}  // namespace

Status NodeRuntime::Barrier(Group group, std::chrono::milliseconds timeout, int* participants) {
  uint64_t seq;
  {
    MutexLock lock(&mu_);
    seq = barriers_passed_[static_cast<uint32_t>(group)] + 1;
  }
  StatusOr<uint32_t> r = CallScheduler(
      [&](uint64_t call_id, void* msg) {
        auto* b = static_cast<layerps::pb::Control*>(msg)->mutable_barrier();
        b->set_request_id(call_id);
        b->set_seq(seq);
        b->set_group(static_cast<uint32_t>(group));
        b->set_timeout_ms(static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 1)));
      },
      WithGrace(timeout), "barrier");
  if (r.ok()) {
    MutexLock lock(&mu_);
    barriers_passed_[static_cast<uint32_t>(group)] = seq;
  }
  if (r.ok() && participants != nullptr) *participants = static_cast<int>(*r);
  return r.status();
}

Status NodeRuntime::Join(std::chrono::milliseconds timeout, int* joined) {
  StatusOr<uint32_t> r = CallScheduler(
      [&](uint64_t call_id, void* msg) {
        auto* j = static_cast<layerps::pb::Control*>(msg)->mutable_join();
        j->set_request_id(call_id);
        j->set_timeout_ms(static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 1)));
      },
      WithGrace(timeout), "join");
  if (r.ok() && joined != nullptr) *joined = static_cast<int>(*r);
  return r.status();
}

Status NodeRuntime::InstallPlacement(const std::vector<LayerServers>& placement,
                                     std::chrono::milliseconds timeout) {
  StatusOr<uint32_t> r = CallScheduler(
      [&](uint64_t call_id, void* msg) {
        auto* p = static_cast<layerps::pb::Control*>(msg)->mutable_install_placement();
        p->set_request_id(call_id);
        for (const auto& l : placement) {
          auto* pl = p->add_layers();
          pl->set_layer(l.layer);
          for (uint32_t rank : l.servers) pl->add_server_ranks(rank);
        }
      },
      timeout, "install placement");
  if (!r.ok()) return r.status();
  // The scheduler broadcast the map before answering; wait until it is installed here.
  MutexLock lock(&mu_);
  const bool have = cv_.WaitFor(&mu_, timeout, [&]() REQUIRES(mu_) {
    if (shutdown_ || !map_) return shutdown_;
    for (const auto& l : placement) {
      auto it = map_->placement.find(l.layer);
      if (it == map_->placement.end() || it->second != l.servers) return false;
    }
    return map_->placement.size() == placement.size();
  });
  if (!have || shutdown_) return Unavailable("installed a placement but its map did not arrive");
  return Status::OK();
}

}  // namespace ps
