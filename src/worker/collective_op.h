// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A running collective (worker/collectives.h): its members, tag base, deadline, the count
// of its messages still outstanding, its failure, its descriptors; and the one primitive
// every algorithm builds on: typed messages of at most one segment to and from a member,
// counted, withdrawn when the op fails, narrowed to the wire type when compressed
// (SendData/RecvData, and SendSegments/RecvSegments for a whole block). Shared by the
// engine (collectives*.cc) and the algorithms (collective_algorithms.h); nothing else.
#ifndef PS_WORKER_COLLECTIVE_OP_H_
#define PS_WORKER_COLLECTIVE_OP_H_

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/reduce.h"
#include "common/wire_type.h"
#include "worker/collective_host.h"
#include "worker/collective_protocol.h"
#include "worker/collectives.h"
#include "worker/peer_messages.h"
#include "worker/request_tracker.h"

namespace ps {
namespace collective {

struct Op {
  OpHost* host = nullptr;
  std::string what;  // "AllReduce 'name'", for errors
  DataType type = DataType::kFloat32;
  size_t esize = 4;                              // bytes per element of `type`
  pack::WireType wire = pack::WireType::kFloat32;  // compression (float32 data only)
  size_t wsize = 4;                              // bytes per element on the wire
  ReduceOp rop = ReduceOp::kSum;
  std::vector<NodeId> members;
  std::vector<uint32_t> ranks;
  size_t pos = 0;
  uint64_t epoch = 0;
  uint64_t tag_base = 0;
  uint64_t seq = 0;  // the set's collective number (its low 23 bits are in the tag)
  int64_t deadline_ms = 0;
  int64_t limit_ms = 0;
  bool limited_by_request_timeout = false;
  Ticket done = 0;

  Descriptor mine;
  // AllToAllV: the elements this member sends to each member (descriptor aux).
  std::vector<size_t> send_counts;
  // The kind's last step, after every message completed OK (scaling, copying out).
  std::function<Status()> finish;
  // V variants: member `from`'s descriptor arrived (and agrees): post its receives.
  std::function<void(size_t from)> on_descriptor;

  // The data plane.
  uint8_t* data = nullptr;
  size_t n = 0;
  RingPlan plan;
  // Direct all-reduce and reduce-scatter: each contribution lands in its sender's slot
  // (wire format); `arrived` counts them per segment under mu, and the last to arrive
  // combines them all into `data` in member order (the same float result every run).
  std::shared_ptr<uint8_t> staging;
  std::shared_ptr<uint8_t> staging_keep;  // a joined member's identity buffer
  std::vector<size_t> arrived;

  Mutex mu;
  int outstanding GUARDED_BY(mu) = 1;  // messages not completed + posting hold
  bool failed GUARDED_BY(mu) = false;
  int priority GUARDED_BY(mu) = 0;  // of `status` (see Fail)
  Status status GUARDED_BY(mu);
  bool finished GUARDED_BY(mu) = false;
  bool decided GUARDED_BY(mu) = false;  // a final Join round: no failure counts
  bool cancelled_data GUARDED_BY(mu) = false;  // data receives withdrawn
  bool cancelled_all GUARDED_BY(mu) = false;  // descriptor receives withdrawn too
  std::vector<Descriptor> descs GUARDED_BY(mu);  // until every one arrived
  std::vector<char> have GUARDED_BY(mu);
  size_t descs_in GUARDED_BY(mu) = 0;
  std::vector<Ticket> data_receives GUARDED_BY(mu);
  std::vector<Ticket> desc_receives GUARDED_BY(mu);

  size_t world() const { return members.size(); }
  uint64_t Tag(uint64_t index) const { return tag_base | index; }
  bool compressed() const { return wire != pack::WireType::kFloat32; }

  // Priorities: a descriptor mismatch beats a member's death, which beats the deadline, a
  // lost scheduler or a failed message (kUnavailable, kAborted, kTimeout), which beat any
  // other error: every member then reports the same. A later failure of a higher priority
  // replaces the status as long as the op has not completed.
  static constexpr int kMismatchPriority = 4;
  static constexpr int kDeathPriority = 3;
  static int PriorityOf(const Status& s) {
    return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kAborted ||
                   s.code() == StatusCode::kTimeout
               ? 2
               : 1;
  }

  // Records a failure and withdraws the receives it makes pointless (`all`: the
  // descriptor receives too).
  void Fail(const Status& s, int prio, bool all) {
    std::vector<Ticket> cancel;
    Status why;
    {
      MutexLock lock(&mu);
      if (decided) return;
      if (prio > priority) {
        status = s;
        priority = prio;
      }
      failed = true;
      why = status;
      if (!cancelled_data) {
        cancelled_data = true;
        cancel.swap(data_receives);
      }
      if (all && !cancelled_all) {
        cancelled_all = true;
        cancel.insert(cancel.end(), desc_receives.begin(), desc_receives.end());
        desc_receives.clear();
      }
    }
    for (Ticket t : cancel) host->tracker().Cancel(t, why);
  }

  // Counts a message about to be issued; false once the op failed (issue nothing more).
  // Descriptors are issued whatever happens (`always`).
  bool Begin(bool always = false) {
    MutexLock lock(&mu);
    if (failed && !always) return false;
    ++outstanding;
    return true;
  }

  // A receive was posted: remembered for withdrawal, or withdrawn now if the op failed
  // meanwhile.
  void Posted(Ticket t, bool descriptor) {
    bool cancel_now = false;
    Status why;
    {
      MutexLock lock(&mu);
      if (descriptor ? cancelled_all : cancelled_data) {
        cancel_now = true;
        why = status;
      } else {
        (descriptor ? desc_receives : data_receives).push_back(t);
      }
    }
    if (cancel_now) host->tracker().Cancel(t, why);
  }

  // A receive from member `q` was posted: as Posted, and failed at once if `q` left
  // cleanly (what it sent before leaving was kept and taken by now: this one never
  // comes). A ticket delivered meanwhile ignores the cancel.
  void PostedFrom(Ticket t, size_t q, bool descriptor) {
    Posted(t, descriptor);
    if (host->HasLeft(members[q])) host->tracker().Cancel(t, MemberDied(q));
  }

  // The status a send to member `q` counts with: delivered if it failed because `q`
  // left cleanly (Collectives::OnNodeDead), or because a Join round outlived it.
  Status Sent(size_t q, const Status& s) {
    if (s.ok() || host->HasLeft(members[q]) || Outlived(q)) return Status::OK();
    return s;
  }

  // The error every survivor reports when the member at position `q` died (or left):
  // built from what every member knows alike (the collective, its number in the set, the
  // member), so that the text is the same on every survivor whichever way the death
  // reached it (the scheduler's notice, a failed message, the map, a call started after).
  Status MemberDied(size_t q) const {
    return Unavailable(what + " #" + std::to_string(seq) + " failed: member rank " +
                       std::to_string(ranks[q]) + " (node " + std::to_string(members[q]) +
                       ") died");
  }

  // A Join round outlives a member whose Join descriptor is in: that member may leave
  // (its own Join returned once it heard from everyone) before this one heard from every
  // other member, and its leaving changes nothing here.
  bool Outlived(size_t q) {
    MutexLock lock(&mu);
    return mine.kind == kJoinKind && have[q] && descs[q].kind == kJoinKind;
  }

  // A failure of `s`: a member's death when `s` is kUnavailable and a member is known
  // dead (a message to or from it failed), else `s` as it is.
  void FailWith(const Status& s, bool all) {
    if (s.code() == StatusCode::kUnavailable) {
      const size_t q = host->DeadPosition(*this);
      if (q < world()) {
        Fail(MemberDied(q), kDeathPriority, true);
        return;
      }
    }
    Fail(s, PriorityOf(s), all);
  }

  // One message (or the posting hold) completed with `s`.
  void Done(const std::shared_ptr<Op>& self, const Status& s) {
    if (!s.ok()) FailWith(s, false);
    bool complete = false;
    {
      MutexLock lock(&mu);
      complete = --outstanding == 0 && !finished;
      if (complete) finished = true;
    }
    if (complete) host->Complete(self);
  }

  // Member at position `q`'s descriptor is in descs[q].
  void OnDescriptor(const std::shared_ptr<Op>& self, size_t q) {
    bool all = false, agrees = false;
    {
      MutexLock lock(&mu);
      if (have[q]) return;
      have[q] = 1;
      all = ++descs_in == world() - 1;
      agrees = Differs(mine, descs[q]).empty();
    }
    if (agrees && on_descriptor) on_descriptor(q);
    if (!all) return;
    // Every descriptor is in: compare them all with the lowest rank's, so that every
    // member finds the same difference and says it the same way.
    std::vector<Descriptor> all_descs;
    {
      MutexLock lock(&mu);
      all_descs = descs;
    }
    all_descs[pos] = mine;
    bool all_joined = false;
    size_t reference = 0;
    const std::string error = CheckDescriptors(all_descs, ranks, &all_joined, &reference);
    if (!error.empty()) Fail(InvalidArgument(error), kMismatchPriority, false);
    if (error.empty() && all_joined && mine.kind == kJoinKind) {
      // Every member joined: the outcome is known, and a member that leaves now (its own
      // join returned) while our acknowledgements are on their way changes nothing.
      MutexLock lock(&mu);
      decided = true;
    }
    (void)self;
  }

  // Sends `len` elements at `src` (the op's type) to member `to` under `index`: lent
  // without a copy, or narrowed to the wire type into a buffer of its own.
  void SendData(const std::shared_ptr<Op>& self, size_t to, uint64_t index, const uint8_t* src,
                size_t len) {
    if (!Begin()) return;
    auto cb = [self, to](const Status& s) { self->Done(self, self->Sent(to, s)); };
    const int64_t deadline = deadline_ms + kRequestGraceMs;
    if (compressed()) {
      std::shared_ptr<uint8_t> buf = RawBuffer(len * wsize);
      pack::ToWire(reinterpret_cast<const float*>(src), len, wire, buf.get());
      host->peers().SendTyped(members[to], Tag(index), buf.get(), len * wsize,
                               static_cast<uint8_t>(wire), buf, epoch, cb, deadline);
    } else {
      host->peers().SendTyped(members[to], Tag(index), src, len * esize,
                               static_cast<uint8_t>(type), nullptr, epoch, cb, deadline);
    }
  }

  // Receives `len` wire elements from member `from` under `index` into `sink`; `then`
  // runs once they arrived, before the message counts as done.
  void RecvData(const std::shared_ptr<Op>& self, size_t from, uint64_t index, size_t len,
                std::function<void(const void*, size_t)> sink, std::function<void()> then) {
    if (!Begin()) return;
    auto cb = [self, then = std::move(then)](const Status& s) {
      if (s.ok() && then) then();
      self->Done(self, s);
    };
    const uint8_t dtype = compressed() ? static_cast<uint8_t>(wire) : static_cast<uint8_t>(type);
    const Ticket t = host->peers().RecvTyped(members[from], Tag(index), dtype, len * wsize,
                                              std::move(sink), cb, deadline_ms + kRequestGraceMs);
    PostedFrom(t, from, false);
  }

  // A whole block through the two above: `count` elements at `src` to member `to`, as
  // messages of at most `seg` elements under indices first, first + 1, ...; the receiver
  // posts the matching RecvSegments (the op's type; narrowed on the wire when compressed).
  void SendSegments(const std::shared_ptr<Op>& self, size_t to, uint64_t first, const uint8_t* src,
                    size_t count, size_t seg) {
    for (size_t k = 0; k < Segments(count, seg); ++k)
      SendData(self, to, first + k, src + k * seg * esize, std::min(seg, count - k * seg));
  }
  void RecvSegments(const std::shared_ptr<Op>& self, size_t from, uint64_t first, uint8_t* dst,
                    size_t count, size_t seg) {
    for (size_t k = 0; k < Segments(count, seg); ++k) {
      const size_t len = std::min(seg, count - k * seg);
      RecvData(self, from, first + k, len, CopyInto(dst + k * seg * esize, len), nullptr);
    }
  }

  // Sinks: combine into, or copy into, `dst` (the op's type; wire elements arrive).
  std::function<void(const void*, size_t)> CombineInto(uint8_t* dst, size_t len) {
    if (compressed()) {
      const ReduceOp r = rop;
      const pack::WireType w = wire;
      return [dst, len, r, w](const void* src, size_t) {
        reduce::CombineWidening(r, reinterpret_cast<float*>(dst), src, w, len);
      };
    }
    const DataType t = type;
    const ReduceOp r = rop;
    return [dst, len, t, r](const void* src, size_t) { reduce::Combine(t, r, dst, src, len); };
  }
  std::function<void(const void*, size_t)> CopyInto(uint8_t* dst, size_t len) {
    if (compressed()) {
      const pack::WireType w = wire;
      return [dst, len, w](const void* src, size_t) {
        pack::FromWire(src, len, w, reinterpret_cast<float*>(dst));
      };
    }
    return [dst](const void* src, size_t bytes) { std::memcpy(dst, src, bytes); };
  }

  std::string Missing() {
    std::vector<uint32_t> missing;
    MutexLock lock(&mu);
    for (size_t q = 0; q < world(); ++q) {
      if (q != pos && !have[q]) missing.push_back(ranks[q]);
    }
    return missing.empty() ? std::string()
                           : "; no word from rank(s) " + RankList(missing) +
                                 " (not called yet, or another collective)";
  }
};

}  // namespace collective
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_OP_H_
