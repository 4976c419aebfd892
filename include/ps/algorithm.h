// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Training algorithms: the seven ways of keeping W workers' models in step (BSP, ASP,
// SSP, EASGD, AR-SGD, GoSGD, AD-PSGD) behind one API. docs/algorithms.md has each one's
// rule, what travels, and the guarantees the tests check.
//
// A Trainer owns nothing of the model: the caller keeps its parameters in one flat float
// buffer (`params`, n elements) and its gradient in another; each Step(grad) applies one
// training step of the chosen algorithm, updating `params` in place. The local update is
// SGD with optional momentum / Nesterov, learning-rate warm-up and decay (LocalOptimizer),
// the same switches for every algorithm. For the PS algorithms (bsp, asp, ssp) the update
// runs on the servers (the table's rule is derived from LocalOptimizer, at the fixed rate
// learning_rate; each pushed gradient is scaled by lr(t)/learning_rate to carry warm-up
// and decay: exact for SGD, see docs/algorithms.md for momentum); for the others on the
// worker.
//
// Collective: every worker of the cluster creates its Trainer with the same options and
// the same n, and calls Finish() at the end. Rank 0's initial parameters become everybody's
// (PS algorithms: they seed the table; the others: they are broadcast).
//
// Thread-safety: Step and Finish are called from one thread. Algorithms with a
// communication thread (gosgd, adpsgd) change `params` from it too, under the Trainer's
// lock: readers that need a consistent copy call CopyParams.
#ifndef PS_ALGORITHM_H_
#define PS_ALGORITHM_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ps/export.h"
#include "ps/status.h"
#include "ps/worker.h"

namespace ps {

enum class Algorithm : int {
  kBsp = 0,     // bulk-synchronous through the PS: step t's pushes applied once, together
  kAsp = 1,     // asynchronous through the PS: every push applied on arrival
  kSsp = 2,     // stale-synchronous through the PS: no worker more than `staleness` ahead
  kEasgd = 3,   // elastic averaging: local steps, every tau an exchange with a centre table
  kArsgd = 4,   // all-reduce SGD: gradients summed by ring all-reduce, applied locally
  kGosgd = 5,   // gossip (push-sum) with probability p after each step
  kAdpsgd = 6,  // asynchronous decentralized: average with one random neighbour per step
};
// "bsp", "asp", ...; ParseAlgorithm reads these names with their parameters.
LAYERPS_EXPORT const char* AlgorithmName(Algorithm algorithm);

// An algorithm and its parameters.
struct LAYERPS_EXPORT AlgorithmSpec {
  Algorithm kind = Algorithm::kBsp;
  int32_t staleness = 0;  // ssp: s >= 0 (s = 0 behaves as bsp)
  int32_t tau = 1;        // easgd: local steps between exchanges, >= 1
  float alpha = 0.5f;     // easgd: elastic coefficient, in (0, 1)
  float p = 0.5f;         // gosgd: probability of a gossip after a step, in [0, 1]

  static AlgorithmSpec Bsp();
  static AlgorithmSpec Asp();
  static AlgorithmSpec Ssp(int32_t staleness);
  static AlgorithmSpec Easgd(int32_t tau, float alpha);
  static AlgorithmSpec Arsgd();
  static AlgorithmSpec Gosgd(float p);
  static AlgorithmSpec Adpsgd();

  // True for bsp, asp and ssp (the model lives on the servers).
  bool through_servers() const;
  // kInvalidArgument naming the bad parameter (s < 0, tau < 1, alpha outside (0, 1),
  // p outside [0, 1]).
  Status Validate() const;
  // "bsp", "ssp(s=3)", "easgd(tau=4,alpha=0.5)", "gosgd(p=0.1)": ParseAlgorithm's input.
  std::string ToString() const;
};

// Reads "bsp", "asp", "ssp(3)", "ssp(s=3)", "easgd(tau=4,alpha=0.5)", "easgd(4,0.5)",
// "arsgd", "gosgd(0.1)", "gosgd(p=0.1)", "adpsgd" (case-insensitive, spaces ignored;
// parameters left out take AlgorithmSpec's defaults). The result is validated.
LAYERPS_EXPORT StatusOr<AlgorithmSpec> ParseAlgorithm(const std::string& text);

// The local update and its schedule: the same switches for every algorithm.
//   lr(t) = learning_rate * warm-up(t) * decay(t), t = the step index from 0;
//   warm-up(t) = (t + 1) / warmup_steps while t < warmup_steps, else 1;
//   decay: kNone 1; kStep gamma^floor(t / decay_every); kExponential gamma^t;
//          kCosine 0.5 * (1 + cos(pi * min(t, decay_every) / decay_every)).
//   SGD: x -= lr(t) * g; momentum m > 0: b = m * b + g, x -= lr(t) * b (Nesterov:
//   x -= lr(t) * (g + m * b)), as torch.optim.SGD with dampening 0.
struct LAYERPS_EXPORT LocalOptimizer {
  enum class Decay : int { kNone = 0, kStep = 1, kExponential = 2, kCosine = 3 };
  float learning_rate = 0.01f;  // finite, > 0
  float momentum = 0.0f;        // [0, 1)
  bool nesterov = false;        // needs momentum > 0
  int32_t warmup_steps = 0;     // >= 0
  Decay decay = Decay::kNone;
  float gamma = 0.1f;           // kStep, kExponential: (0, 1]
  int32_t decay_every = 0;      // kStep: steps per decay; kCosine: steps to reach 0; >= 1 when used

  Status Validate() const;
  float LearningRateAt(uint64_t step) const;
};

struct LAYERPS_EXPORT TrainerOptions {
  AlgorithmSpec algorithm;
  LocalOptimizer optimizer;
  // Names the Trainer's tables (PS algorithms, easgd's centre): every worker passes the
  // same; two Trainers of one cluster need different names.
  std::string name = "model";
  // Seeds the random choices (gossip targets, neighbours); each worker adds its rank.
  uint64_t seed = 0;
  // Bound on each wait of a step (a pull held by a sync policy, a peer exchange).
  std::chrono::milliseconds timeout{60000};
};

// What a Trainer did, for tests and benchmarks.
struct LAYERPS_EXPORT TrainerStats {
  uint64_t steps = 0;
  uint64_t exchanges = 0;       // easgd exchanges, gossips sent, averagings done
  uint64_t merges = 0;          // gossips received and merged (gosgd), passive averagings (adpsgd)
  double gossip_weight = 0.0;   // gosgd: this worker's push-sum weight a_i
};

class LAYERPS_EXPORT Trainer {
 public:
  // Builds the algorithm's Trainer over a started worker. Collective (see above).
  // kInvalidArgument for bad options, a null buffer or n == 0; kFailedPrecondition when
  // the worker is not started; errors of the initial exchange as they come.
  static StatusOr<std::unique_ptr<Trainer>> Create(Worker* worker, float* params, size_t n,
                                                   const TrainerOptions& options);
  virtual ~Trainer() = default;

  // One training step with this worker's gradient (n floats) of the current parameters:
  // synchronizes as the algorithm says and updates params in place. A PS algorithm's
  // gradient should be the mean over this worker's batch: the Trainer divides it by W
  // (each worker holds 1/W of the global batch).
  virtual Status Step(const float* grad) = 0;
  // Collective end of training: drains what is in flight (gossips, averagings), leaves
  // params in their final state and stops the communication threads. Idempotent.
  virtual Status Finish() = 0;
  // A consistent copy of the parameters (taken under the Trainer's lock).
  virtual void CopyParams(float* out) const = 0;
  virtual TrainerStats stats() const = 0;
  const TrainerOptions& options() const { return options_; }

 protected:
  explicit Trainer(TrainerOptions options) : options_(std::move(options)) {}

 private:
  TrainerOptions options_;
};

}  // namespace ps

#endif  // PS_ALGORITHM_H_
