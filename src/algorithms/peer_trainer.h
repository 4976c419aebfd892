// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PeerTrainer: what the decentralized trainers (gosgd, adpsgd) share, over the public
// Worker's peer tensors (SendTo, RecvFrom, RecvFromAny):
//
// - Buffers owned by the requests that use them. A send or a receive holds its buffer
//   (a shared_ptr captured by its callback) until it completes, so a Trainer that gives
//   up (an error, a destructor) never leaves the worker writing into freed memory.
// - One communication thread. Receive completions are queued (the worker's callback only
//   queues) and handed to OnArrival on that thread, which merges them into the model
//   under the Trainer's lock. The thread also checks the cluster map every kTick: a worker
//   seen dead or gone fails the Trainer with kUnavailable (within heartbeat_timeout_ms
//   of the death), so no wait of Step or Finish outlives a dead peer.
// - The first error is kept (error()) and returned by every later Step and by Finish.
// - The end of Finish: after the algorithm's drain (every message of every peer merged,
//   every send acknowledged), the thread stops and the workers meet at a barrier
//   (Group::kWorkers). A worker leaves only after that barrier, so a survivor's dead-worker
//   check never mistakes a peer that finished for a peer that died. The barrier runs even
//   after an error, so that the survivors of a death do not wait for each other's timeout.
//
// Locks: mu_ guards the model (params_, the local optimizer, stats_); link mu guards the
// queue, the sends in flight, the error and the derived classes' drain counters. No code
// holds both.
#ifndef PS_ALGORITHMS_PEER_TRAINER_H_
#define PS_ALGORITHMS_PEER_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/local_sgd.h"
#include "algorithms/model_trainer.h"
#include "common/mutex.h"

namespace ps {
namespace algorithms {

// A tag for one Trainer's peer tensors: a hash of its algorithm and name with `purpose`
// (0..15) in the low four bits, and the top bit clear (tags >= 2^63 are the collectives').
uint64_t PeerTag(Algorithm algorithm, const std::string& name, uint32_t purpose);

class PeerTrainer : public ModelTrainer {
 public:
  using Buffer = std::shared_ptr<std::vector<float>>;
  using Clock = std::chrono::steady_clock;
  // How often the communication thread checks the cluster map.
  static constexpr std::chrono::milliseconds kTick{20};

  ~PeerTrainer() override;
  // Once: the derived class' Drain (unless an error came first), then the end every
  // decentralized trainer shares (EndFinish). Later calls return the first one's result.
  Status Finish() final;

 protected:
  // A completed receive.
  struct Arrival {
    Status status;
    uint64_t tag = 0;
    uint32_t from = 0;  // the sender's rank
    Buffer data;
  };

  explicit PeerTrainer(const TrainerArgs& args);

  // Starts the communication thread. Derived classes call StopThread() in their
  // destructor (the thread calls their OnArrival).
  void StartThread();
  void StopThread();
  // A completed receive, on the communication thread, with no lock held.
  virtual void OnArrival(Arrival&& arrival) = 0;

  // Posts a receive of data->size() floats (RecvFromAny / RecvFrom) whose completion
  // becomes an Arrival.
  void ReceiveAny(uint64_t tag, Buffer data);
  void ReceiveFrom(uint32_t from, uint64_t tag, Buffer data);
  // Sends `data` (held until acknowledged); a failure becomes the Trainer's error.
  void Send(uint32_t to, uint64_t tag, Buffer data);

  // Records the first error and wakes every wait.
  void Fail(const Status& why);
  Status error() const;
  // Waits until done() (called under link_mu(): a lambda passed here says
  // REQUIRES(link_mu())), an error, or the deadline (kTimeout naming `what`). Derived
  // classes change what done() reads under link_mu() and Notify().
  Status WaitFor(const std::function<bool()>& done, Clock::time_point deadline,
                 const std::string& what);
  void Notify();
  // The lock of the communication state (arrivals, sends in flight, the first error);
  // derived classes guard their own exchange state with it.
  Mutex& link_mu() const;
  int sends_in_flight() const REQUIRES(link_mu());

  // The algorithm's part of Finish (several workers, no error yet): every message of
  // every peer merged and every send acknowledged, before `deadline`.
  virtual Status Drain(Clock::time_point deadline) = 0;
  Clock::time_point Deadline() const { return Clock::now() + options().timeout; }

  const uint32_t rank_;
  const uint32_t world_;
  LocalSgd sgd_ GUARDED_BY(mu_);  // (mu_: ModelTrainer's, the model's lock)

 private:
  // Finish's common end: stops the thread, meets the others at the barrier (before
  // `deadline`), keeps the first error.
  Status EndFinish(Status drained, Clock::time_point deadline);

  struct Link;
  void Loop();
  void CheckWorkersAlive();

  const std::shared_ptr<Link> link_;
  std::thread thread_;
  Status finish_status_;  // Step/Finish's thread only
};

}  // namespace algorithms
}  // namespace ps

#endif  // PS_ALGORITHMS_PEER_TRAINER_H_
