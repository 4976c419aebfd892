// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/apply_lanes.h"

#include <glog/logging.h>

#include <algorithm>
#include <new>

#include "common/hash.h"

namespace ps {

// One request on the lanes: what its span tasks share.
struct ApplyLanes::Job {
  Header header;
  std::vector<Frame> frames;  // the pushed values stay alive until the last span ran
  ApplyOp op = ApplyOp::kRule;
  bool pushes = false, pulls = false, read_first = false;
  std::chrono::steady_clock::time_point arrived;
  std::shared_ptr<uint8_t> out;  // pulls: the reply's values
  std::atomic<size_t> left{0};   // spans not yet run
  Mutex mu;
  Status status GUARDED_BY(mu);  // the first span's error
};

ApplyLanes::ApplyLanes(size_t lanes, SharedMutex* store_mu, ReplyFn reply, ObserveFn observe)
    : store_mu_(store_mu), reply_(std::move(reply)), observe_(std::move(observe)) {
  for (size_t i = 0; i < lanes; ++i) lanes_.push_back(std::make_unique<Lane>());
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->thread = std::thread([this, l] { Loop(l); });
  }
}

ApplyLanes::~ApplyLanes() {
  for (auto& lane : lanes_) {
    MutexLock lock(&lane->mu);
    lane->stop = true;
    lane->cv.SignalAll();
  }
  for (auto& lane : lanes_) lane->thread.join();
}

void ApplyLanes::Loop(Lane* lane) {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&lane->mu);
      lane->cv.Wait(&lane->mu, [lane]() REQUIRES(lane->mu) {
        return lane->stop || !lane->tasks.empty();
      });
      if (lane->tasks.empty()) return;  // stopping, and nothing left to run
      task = std::move(lane->tasks.front());
      lane->tasks.pop_front();
    }
    task();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      MutexLock lock(&idle_mu_);
      idle_cv_.SignalAll();
    }
  }
}

size_t ApplyLanes::LaneOf(TableId table, uint64_t span) const {
  // Consecutive spans of a table go to consecutive lanes (a large request spreads over
  // all of them); tables start at different lanes.
  return static_cast<size_t>((MixKey(table) + span) % lanes_.size());
}

bool ApplyLanes::Takes(const DataRequest& req, const Store& store, bool replicated) const {
  const Header& h = req.header;
  if (lanes_.empty() || replicated || h.fused() || h.sparse() || h.count == 0) return false;
  if (!(req.pushes && h.count >= kSpanElems) && Idle()) return false;
  // An update of a range lent to a reply in flight copies the whole range: on the
  // receive thread, after Drain. A read never changes the range: always fine.
  return !req.pushes || !store.DenseLent(h.table, h.offset, h.count);
}

void ApplyLanes::Post(DataRequest&& req, Store* store,
                      std::chrono::steady_clock::time_point arrived) {
  auto job = std::make_shared<Job>();
  const Header& h = req.header;
  job->header = h;
  job->arrived = arrived;
  job->op = req.op;
  job->pushes = req.pushes;
  job->pulls = req.pulls;
  const TableSpec* spec = store->Spec(h.table);
  // An elastic table's pushpull reads before it applies (the EASGD exchange): per span
  // that is the same, element by element, as for the whole range at once.
  job->read_first = req.pushes && req.pulls && spec != nullptr && spec->rule == UpdateRule::kElastic;
  job->frames = std::move(req.frames);
  const uint64_t first = h.offset, end = h.offset + h.count;
  if (job->pulls) {
    try {
      job->out = pool_.Get(h.count * sizeof(float));
    } catch (const std::bad_alloc&) {
      reply_(h, ResourceExhausted("the server ran out of memory for this request"), {});
      return;
    }
  }
  const uint64_t first_span = first / kSpanElems, last_span = (end - 1) / kSpanElems;
  job->left = last_span - first_span + 1;
  ++requests_;
  tasks_ += last_span - first_span + 1;
  pending_.fetch_add(static_cast<int64_t>(last_span - first_span + 1), std::memory_order_acq_rel);
  for (uint64_t span = first_span; span <= last_span; ++span) {
    const uint64_t b = std::max(first, span * kSpanElems);
    const uint64_t e = std::min(end, (span + 1) * kSpanElems);
    Lane* lane = lanes_[LaneOf(h.table, span)].get();
    MutexLock lock(&lane->mu);
    lane->tasks.emplace_back([this, job, store, b, e] { RunSpan(job, store, b, e); });
    lane->cv.Signal();
  }
}

void ApplyLanes::RunSpan(const std::shared_ptr<Job>& job, Store* store, uint64_t begin,
                         uint64_t end) {
  const Header& h = job->header;
  const uint64_t at = begin - h.offset, n = end - begin;
  float* out = job->pulls ? reinterpret_cast<float*>(job->out.get()) + at : nullptr;
  Status s;
  try {
    ReaderLock lock(store_mu_);
    if (job->read_first) s = store->ReadDense(h.table, begin, n, out);
    if (s.ok() && job->pushes) {
      const float* values = reinterpret_cast<const float*>(job->frames[0].data()) + at;
      s = store->ApplyDense(h.table, begin, n, values, job->op);
    }
    if (s.ok() && job->pulls && !job->read_first) s = store->ReadDense(h.table, begin, n, out);
  } catch (const std::bad_alloc&) {
    s = ResourceExhausted("the server ran out of memory for this request");
  }
  if (!s.ok()) {
    MutexLock lock(&job->mu);
    if (job->status.ok()) job->status = s;
  }
  if (job->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last span: answer. The other spans' writes (and status) are seen through `left`
  // and the job's lock.
  Status status;
  {
    MutexLock lock(&job->mu);
    status = job->status;
  }
  std::vector<Frame> frames;
  if (status.ok() && job->pulls) {
    const void* data = job->out.get();
    frames.push_back(Frame::Borrow(data, h.count * sizeof(float),
                                   std::shared_ptr<const void>(job->out, data)));
  }
  job->frames.clear();
  if (observe_) {
    observe_(std::chrono::duration<double>(std::chrono::steady_clock::now() - job->arrived).count());
  }
  reply_(h, status, std::move(frames));
}

void ApplyLanes::Drain() {
  if (Idle()) return;
  MutexLock lock(&idle_mu_);
  idle_cv_.Wait(&idle_mu_, [this]() REQUIRES(idle_mu_) { return Idle(); });
}

}  // namespace ps
