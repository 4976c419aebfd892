// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "algorithms/peer_trainer.h"

#include <algorithm>
#include <string>
#include <utility>

namespace ps {
namespace algorithms {

uint64_t PeerTag(Algorithm algorithm, const std::string& name, uint32_t purpose) {
  // FNV-1a, 64 bits.
  uint64_t h = 1469598103934665603ull;
  const std::string text = std::string("layerps.trainer/") + AlgorithmName(algorithm) + "/" + name;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return (h & ~(uint64_t{1} << 63) & ~uint64_t{0xF}) | (purpose & 0xF);
}

// What the worker's callbacks share with the Trainer: they may run after it is gone.
struct PeerTrainer::Link {
  Mutex mu;
  CondVar cv;
  std::deque<Arrival> arrivals GUARDED_BY(mu);
  int sends GUARDED_BY(mu) = 0;  // in flight
  Status error GUARDED_BY(mu);  // the first
  bool stop GUARDED_BY(mu) = false;  // the thread must end
};

PeerTrainer::PeerTrainer(const TrainerArgs& args)
    : ModelTrainer(args),
      rank_(args.worker->rank()),
      world_(static_cast<uint32_t>(args.worker->num_workers())),
      sgd_(args.options.optimizer, args.n),
      link_(std::make_shared<Link>()) {}

PeerTrainer::~PeerTrainer() { StopThread(); }

Status PeerTrainer::Finish() {
  if (finished_) return finish_status_;
  if (world_ == 1) {
    finished_ = true;
    return Status::OK();
  }
  const auto deadline = Deadline();
  Status st = error();
  if (st.ok()) st = Drain(deadline);
  return EndFinish(st, deadline);
}

void PeerTrainer::StartThread() {
  thread_ = std::thread([this] { Loop(); });
}

void PeerTrainer::StopThread() {
  {
    MutexLock lock(&link_->mu);
    link_->stop = true;
  }
  link_->cv.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void PeerTrainer::Loop() {
  auto next_check = Clock::now();
  for (;;) {
    std::deque<Arrival> batch;
    {
      MutexLock lock(&link_->mu);
      link_->cv.WaitFor(&link_->mu, kTick, [&]() REQUIRES(link_->mu) { return link_->stop || !link_->arrivals.empty(); });
      if (link_->stop) return;
      batch.swap(link_->arrivals);
    }
    for (Arrival& a : batch) OnArrival(std::move(a));
    if (Clock::now() >= next_check) {
      CheckWorkersAlive();
      next_check = Clock::now() + kTick;
    }
  }
}

void PeerTrainer::CheckWorkersAlive() {
  for (const NodeInfo& node : worker_->Nodes()) {
    if (node.role == Role::kWorker && !node.alive) {
      Fail(Unavailable("worker " + std::to_string(node.rank) +
                       " died or left before the end of training"));
      return;
    }
  }
}

void PeerTrainer::ReceiveAny(uint64_t tag, Buffer data) {
  auto from = std::make_shared<uint32_t>(0);
  std::shared_ptr<Link> link = link_;
  worker_->communicator().RecvFromAny(tag, data->data(), data->size(), from.get(),
                       [link, from, data, tag](const Status& s) {
                         MutexLock lock(&link->mu);
                         link->arrivals.push_back(Arrival{s, tag, *from, data});
                         link->cv.SignalAll();
                       });
}

void PeerTrainer::ReceiveFrom(uint32_t from, uint64_t tag, Buffer data) {
  std::shared_ptr<Link> link = link_;
  worker_->communicator().RecvFrom(from, tag, data->data(), data->size(),
                    [link, from, data, tag](const Status& s) {
                      MutexLock lock(&link->mu);
                      link->arrivals.push_back(Arrival{s, tag, from, data});
                      link->cv.SignalAll();
                    });
}

void PeerTrainer::Send(uint32_t to, uint64_t tag, Buffer data) {
  std::shared_ptr<Link> link = link_;
  {
    MutexLock lock(&link->mu);
    ++link->sends;
  }
  // The callback may run before SendTo returns (a send refused at once).
  worker_->communicator().SendTo(to, tag, data->data(), data->size(), [link, to, data](const Status& s) {
    MutexLock lock(&link->mu);
    --link->sends;
    if (!s.ok() && link->error.ok())
      link->error = s.WithContext("send to worker " + std::to_string(to));
    link->cv.SignalAll();
  });
}

void PeerTrainer::Fail(const Status& why) {
  if (why.ok()) return;
  MutexLock lock(&link_->mu);
  if (link_->error.ok()) link_->error = why;
  link_->cv.SignalAll();
}

Status PeerTrainer::error() const {
  MutexLock lock(&link_->mu);
  return link_->error;
}

Status PeerTrainer::WaitFor(const std::function<bool()>& done, Clock::time_point deadline,
                            const std::string& what) {
  MutexLock lock(&link_->mu);
  if (!link_->cv.WaitUntil(&link_->mu, deadline, [&]() REQUIRES(link_->mu) { return !link_->error.ok() || done(); })) {
    return Timeout("Trainer: " + what + " did not happen within " +
                   std::to_string(options().timeout.count()) + " ms");
  }
  return link_->error;
}

void PeerTrainer::Notify() { link_->cv.SignalAll(); }

Mutex& PeerTrainer::link_mu() const { return link_->mu; }

int PeerTrainer::sends_in_flight() const {
  link_->mu.AssertHeld();  // as link_mu(), which the caller holds
  return link_->sends;
}

Status PeerTrainer::EndFinish(Status drained, Clock::time_point deadline) {
  StopThread();
  if (drained.ok()) drained = error();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  Status met = worker_->Barrier(Group::kWorkers, std::max(left, std::chrono::milliseconds(1)));
  if (drained.ok() && !met.ok()) drained = met.WithContext("Trainer: the barrier ending Finish");
  finished_ = true;
  finish_status_ = drained;
  return drained;
}

}  // namespace algorithms
}  // namespace ps
