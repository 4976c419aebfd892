// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/sync_state.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace ps {
namespace sync {

WorkerClock::Outcome WorkerClock::Count(uint64_t clock) {
  if (Has(clock)) return Outcome::kDuplicate;
  if (clock - next_ > kMaxClockLead) return Outcome::kTooFar;  // clock >= next_ here
  if (clock != next_) {
    ahead_.insert(clock);
    return Outcome::kCounted;
  }
  ++next_;
  while (!ahead_.empty() && *ahead_.begin() == next_) {
    ahead_.erase(ahead_.begin());
    ++next_;
  }
  return Outcome::kCounted;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status ReadPull(const DataRequest& req, Store& store, std::vector<Frame>* out) {
  const Header& h = req.header;
  Frame values;
  Status s = h.sparse() ? store.ReadSparseFrame(h.table,
                                                reinterpret_cast<const Key*>(req.frames[0].data()),
                                                h.count, h.dim, &values)
                        : store.ReadDenseFrame(h.table, h.offset, h.count, &values);
  if (s.ok()) out->push_back(std::move(values));
  return s;
}

Status ApplyPush(const DataRequest& req, Store& store, ApplyOp op) {
  const Header& h = req.header;
  if (h.sparse()) {
    return store.ApplySparse(h.table, reinterpret_cast<const Key*>(req.frames[0].data()), h.count,
                             h.dim, reinterpret_cast<const float*>(req.frames[1].data()), op);
  }
  return store.ApplyDense(h.table, h.offset, h.count,
                          reinterpret_cast<const float*>(req.frames[0].data()), op);
}

void ClockedPolicy::OnMap(const ClusterMap& map, NodeId self) {
  for (const NodeInfo& n : map.nodes) {
    if (n.role == Role::kWorker) rank_of_[n.id] = n.rank;
  }
  for (const auto& kv : map.tables) {
    const TableInfo& t = kv.second;
    if (t.spec.sync != mode_) continue;
    for (const KeyRange& kr : t.ranges) {
      if (kr.server != self) continue;
      RangeInfo info;
      info.table = t.id;
      info.spec = t.spec;
      if (t.dense()) {
        info.first = t.RangeFirstElem(kr);
        info.count = t.RangeEndElem(kr) - info.first;
      }
      auto key = std::make_pair(t.id, info.first);
      if (!ranges_.count(key)) ranges_[key].info = info;
    }
  }
}

Range* ClockedPolicy::Find(const DataRequest& req, Status* error) {
  const Header& h = req.header;
  auto it = ranges_.find(std::make_pair(h.table, h.sparse() ? uint64_t{0} : h.offset));
  const std::string mode = SyncModeName(mode_);
  if (it == ranges_.end() || (!h.sparse() && it->second.info.count != h.count)) {
    *error = InvalidArgument("table " + std::to_string(h.table) + " is synchronized (" + mode +
                             "): a request must cover a whole range this server holds, as "
                             "Worker::Push and Pull do");
    return nullptr;
  }
  return &it->second;
}

uint64_t ClockedPolicy::MinClock(const Range& r) const {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  for (NodeId w : live_) {
    auto it = r.clocks.find(w);
    m = std::min(m, it == r.clocks.end() ? uint64_t{0} : it->second.clock());
  }
  return m;
}

std::string ClockedPolicy::Clocks(const Range& r) const {
  std::string out;
  for (NodeId w : live_) {
    auto it = r.clocks.find(w);
    if (!out.empty()) out += ", ";
    out += "worker node " + std::to_string(w) + " at clock " +
           std::to_string(it == r.clocks.end() ? 0 : it->second.clock());
  }
  return out.empty() ? "no live worker" : out;
}

void ClockedPolicy::Handle(DataRequest&& req, Store& store, const ReplyFn& reply) {
  const Header h = req.header;
  Status err;
  Range* r = Find(req, &err);
  if (r == nullptr) {
    reply(h, err, {});
    return;
  }
  if (h.sparse() && h.count > 0) {
    err = store.CheckSparse(h.table, reinterpret_cast<const Key*>(req.frames[0].data()), h.count,
                            h.dim);
    if (!err.ok()) {
      reply(h, err, {});
      return;
    }
  }
  if (req.op == ApplyOp::kAssign) {  // initialization: no clock, applied at once
    reply(h, ApplyPush(req, store, ApplyOp::kAssign), {});
    return;
  }
  if (!live_.count(h.sender)) {
    reply(h,
          FailedPrecondition("node " + std::to_string(h.sender) +
                             " is not a live worker of this cluster: its clock does not count"),
          {});
    return;
  }
  const std::string where = "table '" + r->info.spec.name + "' (" + SyncModeName(mode_) + ")";
  WorkerClock& mine = r->clocks[h.sender];
  if (mine.base() != 0) {
    // A worker that joined the running job: its clocks from 0 are the range's from base.
    const uint64_t clock = uint64_t{h.clock} + mine.base();
    if (clock > std::numeric_limits<uint32_t>::max()) {
      reply(h, InvalidArgument(where + ": clock " + std::to_string(h.clock) + " past the 2^32 steps a table counts"), {});
      return;
    }
    req.header.clock = static_cast<uint32_t>(clock);
  }
  const Header& hc = req.header;  // the clock in the range's terms
  if (req.pushes) {
    if (mine.Has(hc.clock)) {
      // Already counted (a duplicated message): never applied twice.
      ++duplicates_;
      LOG_EVERY_N(WARNING, 100) << where << ": push of clock " << hc.clock << " from worker node "
                                << h.sender << " was counted before; not applied again ("
                                << duplicates_ << " duplicates so far)";
    } else {
      err = Admit(*r, hc.clock);
      if (err.ok() && mine.Count(hc.clock) == WorkerClock::Outcome::kTooFar) {
        err = InvalidArgument(where + ": push of clock " + std::to_string(hc.clock) +
                              " is more than " + std::to_string(kMaxClockLead) + " past the " +
                              std::to_string(mine.clock()) + " pushes counted from this worker");
      }
      if (err.ok()) err = Accept(*r, req, store);
      if (!err.ok()) {
        reply(h, err, {});
        return;
      }
      Progress(*r, store, reply);
    }
    if (!req.pulls) {
      reply(h, Status::OK(), {});
      return;
    }
  }
  const uint64_t need = PullNeed(hc);
  if (need > mine.clock() + kMaxClockLead + 1) {
    reply(h,
          InvalidArgument(where + ": a pull for clock " + std::to_string(need) +
                          " from a worker with " + std::to_string(mine.clock()) +
                          " pushes counted would wait for pushes "
                          "it has not made"),
          {});
    return;
  }
  if (Ready(*r, need)) {
    std::vector<Frame> out;
    Status s = ReadPull(req, store, &out);
    reply(h, s, std::move(out));
    return;
  }
  if (held_count_ >= kMaxHeld) {
    reply(h, ResourceExhausted(where + ": " + std::to_string(kMaxHeld) + " requests already wait"),
          {});
    return;
  }
  // What the answer needs: dense nothing but the header, sparse the keys.
  req.frames.resize(h.sparse() ? 1 : 0);
  Held held;
  held.req = std::move(req);
  held.need = need;
  held.since_ms = NowMs();
  held.deadline_ms = held.since_ms + hold_timeout_ms_;
  r->held.push_back(std::move(held));
  ++held_count_;
}

void ClockedPolicy::AnswerReady(Range& r, Store& store, const ReplyFn& reply) {
  size_t kept = 0;
  for (size_t i = 0; i < r.held.size(); ++i) {
    Held& held = r.held[i];
    if (Ready(r, held.need)) {
      std::vector<Frame> out;
      Status s = ReadPull(held.req, store, &out);
      reply(held.req.header, s, std::move(out));
      --held_count_;
    } else {
      if (kept != i) r.held[kept] = std::move(held);
      ++kept;
    }
  }
  r.held.resize(kept);
}

void ClockedPolicy::Progress(Range& r, Store& store, const ReplyFn& reply) {
  AnswerReady(r, store, reply);
  while (AdvanceOne(r, store)) AnswerReady(r, store, reply);
}

std::string ClockedPolicy::SetWorkers(const std::set<NodeId>& live, Store& store,
                                      const ReplyFn& reply) {
  std::string held_up;
  for (NodeId gone : live_) {
    if (live.count(gone)) continue;
    for (auto& kv : ranges_) {
      Range& r = kv.second;
      auto it = r.clocks.find(gone);
      const uint64_t c = it == r.clocks.end() ? 0 : it->second.clock();
      uint64_t others = 0;
      for (NodeId w : live) {
        auto o = r.clocks.find(w);
        if (o != r.clocks.end()) others = std::max(others, o->second.clock());
      }
      if (c < others || !r.held.empty()) {
        if (!held_up.empty()) held_up += "; ";
        held_up += "table '" + r.info.spec.name + "' (" + SyncModeName(mode_) + "): node " +
                   std::to_string(gone) + " at clock " + std::to_string(c) + ", the others up to " +
                   std::to_string(others) + ", " + std::to_string(r.held.size()) +
                   " pull(s) waiting";
      }
    }
  }
  // A worker live now and not before, in a running job (a worker joined it, or took a
  // dead worker's rank): its clock starts where the range is, the slowest live worker's
  // clock, so that the others' steps do not wait for it to count up from 0 (its first
  // pull gets the values as they are; docs/recovery.md, "Elastic jobs").
  if (!live_.empty()) {
    for (NodeId w : live) {
      if (live_.count(w)) continue;
      for (auto& kv : ranges_) {
        Range& r = kv.second;
        if (r.clocks.count(w)) continue;
        const uint64_t base = MinClock(r);  // over the workers live until now
        if (base > 0) r.clocks.emplace(w, WorkerClock(base));
      }
    }
  }
  live_ = live;
  for (auto& kv : ranges_) {
    Range& r = kv.second;
    // Held requests of workers that are gone: nobody to answer.
    const size_t before = r.held.size();
    r.held.erase(std::remove_if(r.held.begin(), r.held.end(),
                                [&](const Held& x) { return !live_.count(x.req.header.sender); }),
                 r.held.end());
    held_count_ -= before - r.held.size();
    Progress(r, store, reply);
  }
  return held_up;
}

std::string ClockedPolicy::Ranks() const {
  std::string out;
  for (NodeId w : live_) {
    auto it = rank_of_.find(w);
    if (it == rank_of_.end()) continue;
    out += (out.empty() ? "worker node " : ", node ") + std::to_string(w) + " is rank " +
           std::to_string(it->second);
  }
  return out;
}

void ClockedPolicy::Tick(int64_t now_ms, Store& store, const ReplyFn& reply) {
  for (auto& kv : ranges_) {
    Range& r = kv.second;
    size_t kept = 0;
    for (size_t i = 0; i < r.held.size(); ++i) {
      Held& held = r.held[i];
      if (held.deadline_ms <= now_ms) {
        const std::string why =
            "table '" + r.info.spec.name + "' (" + SyncModeName(mode_) + "): a pull for clock " +
            std::to_string(held.need) + " waited " + std::to_string(now_ms - held.since_ms) +
            " ms (request_timeout_ms) for " + Waiting(r, held.need) + "; " + Clocks(r);
        LOG_EVERY_N(WARNING, 100) << why;
        reply(held.req.header, Unavailable(why), {});
        --held_count_;
      } else {
        const int64_t since_warned = held.warned_ms != 0 ? held.warned_ms : held.since_ms;
        if (stall_warning_ms_ > 0 && now_ms - since_warned >= stall_warning_ms_) {
          held.warned_ms = now_ms;
          stall_warnings_.fetch_add(1);
          LOG(WARNING) << "stall: table '" << r.info.spec.name << "' (" << SyncModeName(mode_)
                       << "): a pull for clock " << held.need << " of worker node "
                       << held.req.header.sender << " has waited " << (now_ms - held.since_ms)
                       << " ms for " << Waiting(r, held.need) << "; " << Clocks(r) << " ("
                       << Ranks() << "; stall_warning_ms=" << stall_warning_ms_
                       << "); still waiting";
        }
        if (kept != i) r.held[kept] = std::move(held);
        ++kept;
      }
    }
    r.held.resize(kept);
  }
}

}  // namespace sync
}  // namespace ps
