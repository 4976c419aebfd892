// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// GoSGD(p): push-sum gossip (Blot et al.; PAPERS.md §4). Every worker keeps its model x_i
// and a weight a_i, 1/W at the start (the models equal: rank 0's, broadcast). A step is a
// local SGD step on x_i; then, with probability p (a generator seeded seed + rank), the
// worker halves a_i and sends (x_i, a_i) to a uniformly drawn other worker, whose
// communication thread merges it under its lock:
//   x_j = (a_j x_j + a_i x_i) / (a_j + a_i);  a_j += a_i.
// A gossip and its merge leave Σ a_i (= 1) and Σ a_i x_i unchanged (counting what is in
// flight): only the local steps move Σ a_i x_i. Weight moves, it is never made or lost.
//
// Weights are integers: units of 2^-62, 2^62 in all (a_i = 2^62 / W, the remainder spread
// over the first ranks). Halving an odd weight keeps the extra unit at the sender, so the
// sum is exactly 2^62 units (exactly 1) at any time, however many gossips went: a double
// would need more than its 53 bits after a few dozen gossips. A weight below 2 units is
// not split (that gossip is skipped; it never happens in practice).
//
// Message (tag PeerTag(gosgd, name, 0)): n + 2 floats, x_i then the weight's 8 bytes (a
// uint64, bit-exact). Weight 2^64 - 1 marks the sender's end (Finish), see below.
//
// Finish (collective): every worker sends the end marker to every other on the gossip tag;
// one sender's tensors under one tag arrive in order, so a worker that has every other's
// marker has merged every gossip ever sent to it. Once it also has the acknowledgement of
// all its own sends, its drain is over; afterwards the weights of all workers sum to 1.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/peer_trainer.h"
#include "common/mutex.h"

namespace ps {
namespace algorithms {
namespace {

constexpr uint64_t kTotalWeight = uint64_t{1} << 62;  // 1
constexpr uint64_t kEndMarker = ~uint64_t{0};
// Gossips of one worker in flight at most: a step whose gossip would exceed it waits for
// an acknowledgement (at most options.timeout).
constexpr int kMaxGossipsInFlight = 4;

class GosgdTrainer : public PeerTrainer {
 public:
  explicit GosgdTrainer(const TrainerArgs& args)
      : PeerTrainer(args),
        tag_(PeerTag(Algorithm::kGosgd, args.options.name, 0)),
        p_(args.options.algorithm.p),
        rng_(args.options.seed + rank_),
        weight_(kTotalWeight / world_ + (rank_ < kTotalWeight % world_ ? 1 : 0)),
        marked_(world_, false),
        markers_left_(world_ - 1) {
    stats_.gossip_weight = AsFraction(weight_);
    if (world_ > 1) {
      ReceiveAny(tag_, NewMessage());
      StartThread();
    }
  }

  ~GosgdTrainer() override { StopThread(); }

  Status Step(const float* grad) override {
    if (finished_) return FailedPrecondition("Trainer: Step after Finish");
    Status st = error();
    if (!st.ok()) return st;
    {
      MutexLock lock(&mu_);
      sgd_.Apply(params_, grad);
      ++stats_.steps;
    }
    if (world_ == 1 || !(coin_(rng_) < p_)) return Status::OK();
    uint32_t to = static_cast<uint32_t>(rng_() % (world_ - 1));
    if (to >= rank_) ++to;
    st = WaitFor([&]() REQUIRES(link_mu()) { return sends_in_flight() < kMaxGossipsInFlight; }, Deadline(),
                 "an acknowledgement of a gossip");
    if (!st.ok()) return st;
    Buffer msg = NewMessage();
    {
      MutexLock lock(&mu_);
      if (weight_ < 2) return Status::OK();
      const uint64_t sent = weight_ / 2;  // the sender keeps an odd unit
      weight_ -= sent;
      std::copy(params_, params_ + n_, msg->data());
      PutWeight(msg.get(), sent);
      stats_.gossip_weight = AsFraction(weight_);
      ++stats_.exchanges;
    }
    Send(to, tag_, std::move(msg));
    return Status::OK();
  }

  Status Drain(Clock::time_point deadline) override {
    // One buffer for every marker: the sends only read it.
    Buffer marker = NewMessage();
    PutWeight(marker.get(), kEndMarker);
    for (uint32_t r = 0; r < world_; ++r) {
      if (r != rank_) Send(r, tag_, marker);
    }
    return WaitFor(
        [&]() REQUIRES(link_mu()) { return markers_left_ == 0 && sends_in_flight() == 0; },
        deadline, "the gossip drain (every worker's end marker and every acknowledgement)");
  }

 private:
  Buffer NewMessage() const { return std::make_shared<std::vector<float>>(n_ + 2, 0.0f); }
  static double AsFraction(uint64_t w) { return std::ldexp(static_cast<double>(w), -62); }
  void PutWeight(std::vector<float>* msg, uint64_t w) const {
    std::memcpy(msg->data() + n_, &w, sizeof(w));
  }
  uint64_t GetWeight(const std::vector<float>& msg) const {
    uint64_t w;
    std::memcpy(&w, msg.data() + n_, sizeof(w));
    return w;
  }

  void OnArrival(Arrival&& a) override {
    if (a.status.code() == StatusCode::kUnavailable) {
      // A receive from any worker fails so only at its deadline (nothing came within
      // request_timeout_ms: quiet, not wrong) or when the scheduler is lost (then the
      // dead-worker check or the drain's deadline ends the Trainer). Wait again.
      ReceiveAny(tag_, std::move(a.data));
      return;
    }
    if (!a.status.ok()) {
      Fail(a.status.WithContext("Trainer: receiving a gossip"));
      return;
    }
    if (a.from >= world_ || a.from == rank_) {
      Fail(ProtocolError("Trainer: a gossip from rank " + std::to_string(a.from)));
      return;
    }
    const uint64_t w = GetWeight(*a.data);
    const bool end = w == kEndMarker;
    uint64_t mine;
    {
      MutexLock lock(&mu_);
      mine = weight_;
    }
    // Only this thread adds to weight_ (Step only takes from it): the check holds at the merge.
    if (!end && (w == 0 || w > kTotalWeight - mine)) {
      Fail(ProtocolError("Trainer: a gossip from worker " + std::to_string(a.from) +
                         " carries the weight " + std::to_string(w)));
      return;
    }
    bool more;
    {
      MutexLock lock(&link_mu());
      if (end) {
        if (marked_[a.from]) {
          Fail(ProtocolError("Trainer: two end markers from worker " + std::to_string(a.from)));
          return;
        }
        marked_[a.from] = true;
        --markers_left_;
        Notify();
      }
      more = markers_left_ > 0;
    }
    // The next receive is posted before the merge, so that a gossip arriving meanwhile
    // lands in its buffer instead of a copy kept by the worker.
    if (more) ReceiveAny(tag_, NewMessage());
    if (end) return;
    const float* x = a.data->data();
    MutexLock lock(&mu_);
    const uint64_t total = weight_ + w;
    const float c = static_cast<float>(static_cast<double>(w) / static_cast<double>(total));
    for (size_t i = 0; i < n_; ++i) params_[i] += c * (x[i] - params_[i]);
    weight_ = total;
    stats_.gossip_weight = AsFraction(weight_);
    ++stats_.merges;
  }

  const uint64_t tag_;
  const double p_;
  std::mt19937_64 rng_;                                 // Step's thread only
  std::uniform_real_distribution<double> coin_{0.0, 1.0};  // Step's thread only
  uint64_t weight_ GUARDED_BY(mu_);  // units of 2^-62
  std::vector<bool> marked_ GUARDED_BY(link_mu());
  uint32_t markers_left_ GUARDED_BY(link_mu());
};

}  // namespace

StatusOr<std::unique_ptr<Trainer>> NewGosgdTrainer(const TrainerArgs& args) {
  return NewAfterBroadcast<GosgdTrainer>(args);
}

}  // namespace algorithms
}  // namespace ps
