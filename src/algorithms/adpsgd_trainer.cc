// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// AD-PSGD (Lian et al.; PAPERS.md §4): asynchronous decentralized SGD on a bipartite graph.
// Even ranks are active, odd ranks passive (W odd: one active more than passives; W = 1:
// plain local SGD). Every Step of an active worker averages its model with one passive
// worker drawn uniformly (generator seeded seed + rank), then applies its local gradient,
// which the caller computed on the model before that averaging; a passive worker's Step
// applies its gradient only, and its communication thread serves the averagings.
//
// The averaging keeps every update made while it is in flight (a delta form):
//   active i, in Step, under its lock: x_sent = x_i; then x_i -= lr * update(g);
//     sends x_sent to passive j and waits for the reply in its communication thread;
//   passive j, on its communication thread, under its lock: replies x_old = x_j and sets
//     x_j = (x_old + x_sent) / 2;
//   active i, on its communication thread, under its lock: x_i += (x_old - x_sent) / 2.
// Result: x_j = (x_old + x_sent)/2, x_i = (x_old + x_sent)/2 plus every step i applied
// since x_sent was taken; j's own steps taken while the request travelled are kept too.
// Σ_i x_i changes only by the gradient steps (up to float rounding). An active worker has
// at most one averaging in flight: Step waits (at most options.timeout) for the previous
// one, which ran while the caller computed the next gradient.
//
// Messages: request (PeerTag(adpsgd, name, 1)), active to passive: n + 1 floats, x_sent
// then a kind (0 average, 1 the sender's end marker); reply (tag 2), passive to active:
// n floats, x_old. The passive receives requests from any active (RecvFromAny); the
// active receives the reply from its partner (RecvFrom).
//
// Finish (collective): an active waits for its last averaging, sends the end marker to
// every passive and waits for their acknowledgements; a passive serves requests until it
// has every active's end marker (one sender's tensors arrive in order: every request came
// before) and its replies are acknowledged. No averaging is left half done.
#include <random>
#include <string>
#include <vector>

#include "algorithms/peer_trainer.h"
#include "common/mutex.h"

namespace ps {
namespace algorithms {
namespace {

constexpr float kAverage = 0.0f;
constexpr float kEnd = 1.0f;

class AdpsgdTrainer : public PeerTrainer {
 public:
  explicit AdpsgdTrainer(const TrainerArgs& args)
      : PeerTrainer(args),
        request_tag_(PeerTag(Algorithm::kAdpsgd, args.options.name, 1)),
        reply_tag_(PeerTag(Algorithm::kAdpsgd, args.options.name, 2)),
        active_(rank_ % 2 == 0),
        passives_(world_ / 2),
        rng_(args.options.seed + rank_),
        ended_(world_, false),
        actives_left_((world_ + 1) / 2) {
    if (world_ == 1) return;
    if (!active_) ReceiveAny(request_tag_, NewRequest());
    StartThread();
  }

  ~AdpsgdTrainer() override { StopThread(); }

  Status Step(const float* grad) override {
    if (finished_) return FailedPrecondition("Trainer: Step after Finish");
    Status st = error();
    if (!st.ok()) return st;
    if (!active_ || world_ == 1) {
      MutexLock lock(&mu_);
      sgd_.Apply(params_, grad);
      ++stats_.steps;
      return Status::OK();
    }
    st = WaitFor([&]() REQUIRES(link_mu()) { return !busy_; }, Deadline(), "the previous averaging");
    if (!st.ok()) return st;
    const uint32_t partner = 2 * static_cast<uint32_t>(rng_() % passives_) + 1;
    Buffer sent = NewRequest();
    {
      MutexLock lock(&mu_);
      std::copy(params_, params_ + n_, sent->data());
      (*sent)[n_] = kAverage;
      sgd_.Apply(params_, grad);
      ++stats_.steps;
    }
    {
      MutexLock lock(&link_mu());
      busy_ = true;
      sent_ = sent;
    }
    ReceiveFrom(partner, reply_tag_, std::make_shared<std::vector<float>>(n_));
    Send(partner, request_tag_, std::move(sent));
    return Status::OK();
  }

  Status Drain(Clock::time_point deadline) override {
    if (!active_) {
      return WaitFor(
          [&]() REQUIRES(link_mu()) { return actives_left_ == 0 && sends_in_flight() == 0; },
          deadline, "the averaging drain (every active worker's end marker)");
    }
    Status st =
        WaitFor([&]() REQUIRES(link_mu()) { return !busy_; }, deadline, "the last averaging");
    if (!st.ok()) return st;
    Buffer end = NewRequest();  // one buffer for every marker: the sends only read it
    (*end)[n_] = kEnd;
    for (uint32_t r = 1; r < world_; r += 2) Send(r, request_tag_, end);
    return WaitFor([&]() REQUIRES(link_mu()) { return sends_in_flight() == 0; }, deadline,
                   "the acknowledgement of the end markers");
  }

 private:
  Buffer NewRequest() const { return std::make_shared<std::vector<float>>(n_ + 1, 0.0f); }

  void OnArrival(Arrival&& a) override {
    if (a.tag == reply_tag_) {
      OnReply(std::move(a));
    } else {
      OnRequest(std::move(a));
    }
  }

  // Active: the partner's x_old.
  void OnReply(Arrival&& a) {
    if (!a.status.ok()) {
      Fail(a.status.WithContext("Trainer: averaging with worker " + std::to_string(a.from)));
      return;
    }
    Buffer sent;
    {
      MutexLock lock(&link_mu());
      sent = std::move(sent_);
    }
    if (sent == nullptr) {
      Fail(ProtocolError("Trainer: a reply from worker " + std::to_string(a.from) +
                         " without an averaging in flight"));
      return;
    }
    const float* old = a.data->data();
    const float* s = sent->data();
    {
      MutexLock lock(&mu_);
      for (size_t i = 0; i < n_; ++i) params_[i] += 0.5f * (old[i] - s[i]);
      ++stats_.exchanges;
    }
    MutexLock lock(&link_mu());
    busy_ = false;
    Notify();
  }

  // Passive: an averaging request or an end marker from an active worker.
  void OnRequest(Arrival&& a) {
    if (a.status.code() == StatusCode::kUnavailable) {
      // Nothing came within request_timeout_ms (or the scheduler is lost: the dead-worker
      // check or the drain's deadline ends the Trainer): wait again.
      ReceiveAny(request_tag_, std::move(a.data));
      return;
    }
    if (!a.status.ok()) {
      Fail(a.status.WithContext("Trainer: receiving an averaging request"));
      return;
    }
    const float kind = (*a.data)[n_];
    bool more;
    {
      MutexLock lock(&link_mu());
      if (a.from >= world_ || a.from % 2 != 0 || ended_[a.from] ||
          (kind != kAverage && kind != kEnd)) {
        Fail(ProtocolError("Trainer: an unexpected averaging request from rank " +
                           std::to_string(a.from)));
        return;
      }
      if (kind == kEnd) {
        ended_[a.from] = true;
        --actives_left_;
        Notify();
      }
      more = actives_left_ > 0;
    }
    if (kind == kEnd) {
      if (more) ReceiveAny(request_tag_, std::move(a.data));
      return;
    }
    // The next request's receive first, so that it lands in place.
    ReceiveAny(request_tag_, NewRequest());
    Buffer reply = std::make_shared<std::vector<float>>(n_);
    const float* s = a.data->data();
    {
      MutexLock lock(&mu_);
      std::copy(params_, params_ + n_, reply->data());
      for (size_t i = 0; i < n_; ++i) params_[i] = 0.5f * (params_[i] + s[i]);
      ++stats_.merges;
    }
    Send(a.from, reply_tag_, std::move(reply));
  }

  const uint64_t request_tag_;
  const uint64_t reply_tag_;
  const bool active_;
  const uint32_t passives_;
  std::mt19937_64 rng_;       // Step's thread only
  bool busy_ GUARDED_BY(link_mu()) = false;  // an averaging in flight (active)
  Buffer sent_ GUARDED_BY(link_mu());  // its x_sent
  std::vector<bool> ended_ GUARDED_BY(link_mu());  // end markers received (passive)
  uint32_t actives_left_ GUARDED_BY(link_mu());
};

}  // namespace

StatusOr<std::unique_ptr<Trainer>> NewAdpsgdTrainer(const TrainerArgs& args) {
  return NewAfterBroadcast<AdpsgdTrainer>(args);
}

}  // namespace algorithms
}  // namespace ps
