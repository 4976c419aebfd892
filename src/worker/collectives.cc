// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/collectives.h"

#include <algorithm>
#include <condition_variable>
#include <string>
#include <utility>

namespace ps {

namespace {

// The collective's own deadline decides its outcome (kTimeout for the caller's timeout); its
// requests expire a little later, so the tracker's expiry (kUnavailable) never wins the race.
constexpr int64_t kRequestGraceMs = 1000;


int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Tag layout: [63] kCollectiveTagBit | [47..62] group hash | [24..46] sequence | [0..23] index.
constexpr int kIndexBits = 24;
constexpr int kSeqBits = 23;
constexpr uint64_t kMaxMessages = uint64_t{1} << kIndexBits;

uint64_t GroupHash(const std::vector<NodeId>& members) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (NodeId id : members) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint64_t>(id) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff;
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

size_t Mod(int64_t a, size_t w) {
  const int64_t m = static_cast<int64_t>(w);
  return static_cast<size_t>(((a % m) + m) % m);
}

}  // namespace

RingPlan RingPlan::Make(size_t n, size_t world, size_t segment_bytes) {
  RingPlan p;
  p.n = n;
  p.world = std::max<size_t>(world, 1);
  p.segment = std::max<size_t>(segment_bytes / sizeof(float), 1);
  const size_t largest = (n + p.world - 1) / p.world;
  const size_t steps = std::max<size_t>(p.steps(), 1);
  // Every message of one collective needs its own index below kMaxMessages: past that,
  // segments grow.
  const size_t max_segs = (kMaxMessages - 1) / steps;
  if ((largest + p.segment - 1) / p.segment > max_segs)
    p.segment = (largest + max_segs - 1) / max_segs;
  p.segs = (largest + p.segment - 1) / p.segment;
  return p;
}

void RingPlan::Segment(size_t c, size_t k, size_t* begin, size_t* len) const {
  const size_t size = ChunkSize(c);
  const size_t from = k * segment;
  *begin = ChunkOffset(c) + std::min(from, size);
  *len = from >= size ? 0 : std::min(segment, size - from);
}

size_t RingPlan::SendChunk(size_t p, size_t step) const {
  const int64_t q = static_cast<int64_t>(p), t = static_cast<int64_t>(step);
  const int64_t w1 = static_cast<int64_t>(world) - 1;
  return step < world - 1 ? Mod(q - t, world) : Mod(q + 1 - (t - w1), world);
}

size_t RingPlan::RecvChunk(size_t p, size_t step) const {
  const int64_t q = static_cast<int64_t>(p), t = static_cast<int64_t>(step);
  const int64_t w1 = static_cast<int64_t>(world) - 1;
  return step < world - 1 ? Mod(q - t - 1, world) : Mod(q - (t - w1), world);
}

// One running all-reduce. Shared by the caller and the callbacks of its messages.
struct Collectives::Op {
  std::vector<NodeId> members;  // the ring, in rank order
  RingPlan plan;
  bool direct = false;  // AllReduceAlgorithm::kDirect (else the ring)
  // Direct: per segment of this position's chunk, how many of the W-1 contributions
  // arrived (guarded by mu); the last one sends the summed segment to everyone. Each
  // contribution lands in its sender's slot of `staging` and is added in under mu: two
  // can arrive at once (a tensor that came before its receive was posted is delivered
  // on the posting thread, beside the receive thread), and adding in place would race.
  std::vector<size_t> arrived;
  std::vector<float> staging;
  size_t pos = 0;  // this worker's position in the ring
  NodeId left = kUnassignedId, right = kUnassignedId;
  float* data = nullptr;
  uint64_t epoch = 0;
  uint64_t tag_base = 0;
  int64_t deadline_ms = 0;

  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 1;  // guarded by mu: messages not completed + the caller's posting hold
  bool failed = false;  // guarded by mu
  Status status;        // guarded by mu: the first error

  uint64_t Tag(size_t step, size_t k) const { return tag_base | (step * plan.segs + k); }

  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed) status = s;
    failed = true;
    cv.notify_all();
  }
  // One message (or the posting hold) completed with `s`.
  void Done(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok() && !failed) {
      status = s;
      failed = true;
    }
    if (--outstanding == 0 || failed) cv.notify_all();
  }
  // Counts a message about to be issued; false once the op failed (issue nothing more).
  bool Begin() {
    std::lock_guard<std::mutex> lock(mu);
    if (failed) return false;
    ++outstanding;
    return true;
  }
};

namespace {

// Sends segment k of the chunk this position sends at `step` to the right neighbour.
void SendSegment(PeerMessages* peers, const std::shared_ptr<Collectives::Op>& op, size_t step,
                 size_t k);
// Direct: sends segment k of chunk `chunk` to the member at position `to`, at `phase`
// (0: a contribution to that member's chunk, 1: this member's summed chunk).
void SendDirect(PeerMessages* peers, const std::shared_ptr<Collectives::Op>& op, size_t phase,
                size_t chunk, size_t k, size_t to);

}  // namespace

Status Collectives::AllReduce(const std::function<std::shared_ptr<const ClusterMap>()>& map_fn,
                              NodeId self, const AllReduceOptions& options, float* data, size_t n,
                              std::chrono::milliseconds timeout) {
  auto map = map_fn();
  if (!map) return FailedPrecondition("AllReduce: the worker is not started");
  if (data == nullptr && n > 0) return InvalidArgument("AllReduce: null buffer");
  if (timeout.count() < 0) return InvalidArgument("AllReduce: negative timeout");
  if (options.segment_bytes < sizeof(float)) {
    return InvalidArgument("AllReduce: segment_bytes must be at least 4 (one float), not " +
                           std::to_string(options.segment_bytes));
  }
  // The group: its ranks in ascending order form the ring.
  std::vector<uint32_t> ranks = options.ranks;
  std::map<uint32_t, const NodeInfo*> workers;
  for (const auto& node : map->nodes) {
    if (node.role == Role::kWorker) workers[node.rank] = &node;
  }
  if (ranks.empty()) {
    for (const auto& kv : workers) ranks.push_back(kv.first);
  }
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return InvalidArgument("AllReduce: rank list " + RankList(options.ranks) +
                           " names a worker twice");
  }
  auto op = std::make_shared<Op>();
  std::vector<uint32_t> dead;
  bool self_in = false;
  for (uint32_t r : ranks) {
    auto it = workers.find(r);
    if (it == workers.end()) {
      return InvalidArgument("AllReduce: no worker of rank " + std::to_string(r) + " (there are " +
                             std::to_string(workers.size()) + ")");
    }
    if (it->second->id == self) {
      self_in = true;
      op->pos = op->members.size();
    }
    if (!it->second->alive) dead.push_back(r);
    op->members.push_back(it->second->id);
  }
  if (!self_in) {
    return InvalidArgument("AllReduce: rank list " + RankList(options.ranks) +
                           " does not include this worker");
  }
  if (!dead.empty()) {
    return Unavailable("AllReduce: worker(s) " + RankList(dead) + " of the group are dead");
  }
  const size_t world = op->members.size();
  if (world == 1) return Status::OK();
  if (options.segment_bytes + sizeof(Header) > static_cast<uint64_t>(options_.max_message_bytes)) {
    return InvalidArgument("AllReduce: segment_bytes=" + std::to_string(options.segment_bytes) +
                           " exceeds max_message_bytes");
  }

  op->plan = RingPlan::Make(n, world, options.segment_bytes);
  op->left = op->members[(op->pos + world - 1) % world];
  op->right = op->members[(op->pos + 1) % world];
  op->data = data;
  op->epoch = map->epoch;
  const int64_t limit_ms = std::min<int64_t>(timeout.count(), options_.request_timeout_ms);
  op->deadline_ms = NowMillis() + limit_ms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = next_seq_[op->members]++ & ((uint64_t{1} << kSeqBits) - 1);
    op->tag_base = kCollectiveTagBit | (GroupHash(op->members) << (kIndexBits + kSeqBits)) |
                   (seq << kIndexBits);
    running_.insert(op);
  }
  // A member that died before the op was registered: OnNodeDead did not see it.
  if (auto now = map_fn()) {
    for (NodeId id : op->members) {
      const NodeInfo* node = now->FindNode(id);
      if (node == nullptr || !node->alive) {
        op->Fail(Unavailable("AllReduce: node " + std::to_string(id) + " of the group is dead"));
      }
    }
  }

  // Every receive first, straight into its place (reduce-scatter steps add, all-gather
  // steps copy); each one, when it arrived, sends that segment on at the next step.
  const RingPlan& plan = op->plan;
  std::vector<Ticket> receives;
  op->direct = options.algorithm == AllReduceAlgorithm::kDirect ||
               (options.algorithm == AllReduceAlgorithm::kAuto &&
                n * sizeof(float) <= options.direct_max_bytes);
  if (op->direct) {
    op->arrived.assign(plan.segs, 0);
    PostDirect(op, &receives);
  }
  for (size_t step = 0; !op->direct && step < plan.steps(); ++step) {
    const size_t chunk = plan.RecvChunk(op->pos, step);
    for (size_t k = 0; k < plan.segs; ++k) {
      size_t begin = 0, len = 0;
      plan.Segment(chunk, k, &begin, &len);
      if (len == 0) continue;
      if (!op->Begin()) break;
      PeerMessages* peers = peers_;
      auto on_arrival = [peers, op, step, k](const Status& s) {
        if (s.ok() && step + 1 < op->plan.steps()) SendSegment(peers, op, step + 1, k);
        op->Done(s);
      };
      receives.push_back(peers_->Recv(op->left, op->Tag(step, k), data + begin, len, on_arrival,
                                      op->deadline_ms + kRequestGraceMs,
                                      /*accumulate=*/step + 1 < world));
    }
  }
  for (size_t k = 0; !op->direct && k < plan.segs; ++k) SendSegment(peers_, op, 0, k);
  for (size_t q = 0; op->direct && q < world; ++q) {
    if (q == op->pos) continue;
    for (size_t k = 0; k < plan.segs; ++k) SendDirect(peers_, op, 0, q, k, q);
  }
  op->Done(Status::OK());  // the posting hold

  {
    std::unique_lock<std::mutex> lock(op->mu);
    const auto deadline =
        std::chrono::steady_clock::time_point(std::chrono::milliseconds(op->deadline_ms));
    if (!op->cv.wait_until(lock, deadline, [&] { return op->outstanding == 0 || op->failed; })) {
      op->failed = true;
      op->status =
          timeout.count() <= options_.request_timeout_ms
              ? Timeout("AllReduce of " + std::to_string(n) + " floats did not complete within " +
                        std::to_string(timeout.count()) + " ms")
              : Unavailable("AllReduce of " + std::to_string(n) +
                            " floats did not complete within request_timeout_ms=" +
                            std::to_string(options_.request_timeout_ms));
    }
  }
  Status status;
  {
    std::unique_lock<std::mutex> lock(op->mu);
    status = op->status;
  }
  if (!status.ok()) {
    // Receives still posted would write into the buffer after we return: withdraw them.
    // Sends complete when their peer acknowledges, dies, or at the deadline (the tracker
    // then drops the connection, which releases the frames lending the buffer).
    for (Ticket t : receives) tracker_->Cancel(t, status);
    std::unique_lock<std::mutex> lock(op->mu);
    op->cv.wait(lock, [&] { return op->outstanding == 0; });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(op);
  }
  return status;
}

void Collectives::PostDirect(const std::shared_ptr<Op>& op, std::vector<Ticket>* receives) {
  const RingPlan& plan = op->plan;
  const size_t world = op->members.size();
  const size_t mine = plan.ChunkSize(op->pos), first = plan.ChunkOffset(op->pos);
  op->staging.assign((world - 1) * mine, 0.0f);
  PeerMessages* peers = peers_;
  for (size_t q = 0; q < world; ++q) {
    if (q == op->pos) continue;
    float* slot = op->staging.data() + (q < op->pos ? q : q - 1) * mine;
    for (size_t k = 0; k < plan.segs; ++k) {
      // Phase 0: q's contribution to this position's chunk, into q's slot, then added in
      // under mu; the last of the W-1 sends the summed segment to everyone.
      size_t begin = 0, len = 0;
      plan.Segment(op->pos, k, &begin, &len);
      if (len > 0 && op->Begin()) {
        float* staged = slot + (begin - first);
        auto on_arrival = [peers, op, k, staged, begin, len](const Status& s) {
          bool last = false;
          if (s.ok()) {
            std::lock_guard<std::mutex> lock(op->mu);
            float* dst = op->data + begin;
            for (size_t i = 0; i < len; ++i) dst[i] += staged[i];
            last = ++op->arrived[k] == op->members.size() - 1;
          }
          if (last) {
            for (size_t to = 0; to < op->members.size(); ++to) {
              if (to != op->pos) SendDirect(peers, op, 1, op->pos, k, to);
            }
          }
          op->Done(s);
        };
        receives->push_back(peers_->Recv(op->members[q], op->Tag(0, k), staged, len, on_arrival,
                                         op->deadline_ms + kRequestGraceMs,
                                         /*accumulate=*/false));
      }
      // Phase 1: q's summed chunk, copied into place.
      plan.Segment(q, k, &begin, &len);
      if (len > 0 && op->Begin()) {
        receives->push_back(peers_->Recv(op->members[q], op->Tag(1, k), op->data + begin, len,
                                         [op](const Status& s) { op->Done(s); },
                                         op->deadline_ms + kRequestGraceMs,
                                         /*accumulate=*/false));
      }
    }
  }
}

void Collectives::OnNodeDead(NodeId id, const Status& why) {
  std::vector<std::shared_ptr<Op>> hit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& op : running_) {
      if (id == kSchedulerId ||
          std::find(op->members.begin(), op->members.end(), id) != op->members.end()) {
        hit.push_back(op);
      }
    }
  }
  for (const auto& op : hit) op->Fail(why.WithContext("AllReduce"));
}

namespace {

void SendSegment(PeerMessages* peers, const std::shared_ptr<Collectives::Op>& op, size_t step,
                 size_t k) {
  size_t begin = 0, len = 0;
  op->plan.Segment(op->plan.SendChunk(op->pos, step), k, &begin, &len);
  if (len == 0 || !op->Begin()) return;
  peers->Send(
      op->right, op->Tag(step, k), op->data + begin, len, op->epoch,
      [op](const Status& s) { op->Done(s); }, op->deadline_ms + kRequestGraceMs);
}

void SendDirect(PeerMessages* peers, const std::shared_ptr<Collectives::Op>& op, size_t phase,
                size_t chunk, size_t k, size_t to) {
  size_t begin = 0, len = 0;
  op->plan.Segment(chunk, k, &begin, &len);
  if (len == 0 || !op->Begin()) return;
  peers->Send(
      op->members[to], op->Tag(phase, k), op->data + begin, len, op->epoch,
      [op](const Status& s) { op->Done(s); }, op->deadline_ms + kRequestGraceMs);
}

}  // namespace

}  // namespace ps
