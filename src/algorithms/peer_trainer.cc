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
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Arrival> arrivals;  // guarded by mu
  int sends = 0;                 // guarded by mu: in flight
  Status error;                  // guarded by mu: the first
  bool stop = false;             // guarded by mu: the thread must end
};

PeerTrainer::PeerTrainer(const TrainerArgs& args)
    : Trainer(args.options),
      worker_(args.worker),
      params_(args.params),
      n_(args.n),
      rank_(args.worker->rank()),
      world_(static_cast<uint32_t>(args.worker->num_workers())),
      sgd_(args.options.optimizer, args.n),
      link_(std::make_shared<Link>()) {}

PeerTrainer::~PeerTrainer() { StopThread(); }

void PeerTrainer::CopyParams(float* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::copy(params_, params_ + n_, out);
}

TrainerStats PeerTrainer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PeerTrainer::StartThread() {
  thread_ = std::thread([this] { Loop(); });
}

void PeerTrainer::StopThread() {
  {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->stop = true;
  }
  link_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerTrainer::Loop() {
  auto next_check = Clock::now();
  for (;;) {
    std::deque<Arrival> batch;
    {
      std::unique_lock<std::mutex> lock(link_->mu);
      link_->cv.wait_for(lock, kTick, [&] { return link_->stop || !link_->arrivals.empty(); });
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
  worker_->RecvFromAny(tag, data->data(), data->size(), from.get(),
                       [link, from, data, tag](const Status& s) {
                         std::lock_guard<std::mutex> lock(link->mu);
                         link->arrivals.push_back(Arrival{s, tag, *from, data});
                         link->cv.notify_all();
                       });
}

void PeerTrainer::ReceiveFrom(uint32_t from, uint64_t tag, Buffer data) {
  std::shared_ptr<Link> link = link_;
  worker_->RecvFrom(from, tag, data->data(), data->size(),
                    [link, from, data, tag](const Status& s) {
                      std::lock_guard<std::mutex> lock(link->mu);
                      link->arrivals.push_back(Arrival{s, tag, from, data});
                      link->cv.notify_all();
                    });
}

void PeerTrainer::Send(uint32_t to, uint64_t tag, Buffer data) {
  std::shared_ptr<Link> link = link_;
  {
    std::lock_guard<std::mutex> lock(link->mu);
    ++link->sends;
  }
  // The callback may run before SendTo returns (a send refused at once).
  worker_->SendTo(to, tag, data->data(), data->size(), [link, to, data](const Status& s) {
    std::lock_guard<std::mutex> lock(link->mu);
    --link->sends;
    if (!s.ok() && link->error.ok())
      link->error = s.WithContext("send to worker " + std::to_string(to));
    link->cv.notify_all();
  });
}

void PeerTrainer::Fail(const Status& why) {
  if (why.ok()) return;
  std::lock_guard<std::mutex> lock(link_->mu);
  if (link_->error.ok()) link_->error = why;
  link_->cv.notify_all();
}

Status PeerTrainer::error() const {
  std::lock_guard<std::mutex> lock(link_->mu);
  return link_->error;
}

Status PeerTrainer::WaitFor(const std::function<bool()>& done, Clock::time_point deadline,
                            const std::string& what) {
  std::unique_lock<std::mutex> lock(link_->mu);
  if (!link_->cv.wait_until(lock, deadline, [&] { return !link_->error.ok() || done(); })) {
    return Timeout("Trainer: " + what + " did not happen within " +
                   std::to_string(options().timeout.count()) + " ms");
  }
  return link_->error;
}

void PeerTrainer::Notify() { link_->cv.notify_all(); }

std::mutex& PeerTrainer::link_mu() { return link_->mu; }

int PeerTrainer::sends_in_flight() const { return link_->sends; }

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
