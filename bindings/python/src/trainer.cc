// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core.Trainer: ps::Trainer (include/ps/algorithm.h) over a float32 buffer the
// caller owns (a numpy array or a CPU torch tensor's memory, used in place). The Trainer
// keeps references to the worker and the buffer for its whole life. Step and Finish
// release the GIL: communication threads (gosgd, adpsgd) never touch Python.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "bind.h"
#include "errors.h"
#include "ps/ps.h"
#include "worker.h"

namespace py = pybind11;

namespace layerps_python {
namespace {

bool IsFloatBuffer(const py::array& a) {
  return a.dtype().kind() == 'f' && a.itemsize() == 4 && (a.flags() & py::array::c_style) != 0;
}

ps::LocalOptimizer::Decay ParseDecay(const std::string& name) {
  if (name == "none" || name.empty()) return ps::LocalOptimizer::Decay::kNone;
  if (name == "step") return ps::LocalOptimizer::Decay::kStep;
  if (name == "exponential") return ps::LocalOptimizer::Decay::kExponential;
  if (name == "cosine") return ps::LocalOptimizer::Decay::kCosine;
  ThrowInvalid("decay must be 'none', 'step', 'exponential' or 'cosine', not '" + name + "'");
}

class PyTrainer {
 public:
  PyTrainer(py::object worker, py::array params, const std::string& algorithm, float lr,
            float momentum, bool nesterov, int warmup_steps, const std::string& decay,
            float gamma, int decay_every, const std::string& name, uint64_t seed,
            std::optional<double> timeout_s)
      : worker_(std::move(worker)), params_(std::move(params)) {
    if (!IsFloatBuffer(params_) || !params_.writeable()) {
      ThrowInvalid("Trainer: params must be a writable C-contiguous float32 array");
    }
    ps::StatusOr<ps::AlgorithmSpec> spec = ps::ParseAlgorithm(algorithm);
    ThrowIfError(spec.status());
    ps::TrainerOptions o;
    o.algorithm = *spec;
    o.optimizer.learning_rate = lr;
    o.optimizer.momentum = momentum;
    o.optimizer.nesterov = nesterov;
    o.optimizer.warmup_steps = warmup_steps;
    o.optimizer.decay = ParseDecay(decay);
    o.optimizer.gamma = gamma;
    o.optimizer.decay_every = decay_every;
    o.name = name;
    o.seed = seed;
    if (timeout_s) {
      if (!(*timeout_s > 0)) ThrowInvalid("Trainer: timeout must be > 0 seconds");
      o.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0 + 0.5));
    }
    ps::Worker& w = WorkerOf(worker_);
    float* data = static_cast<float*>(params_.mutable_data());
    n_ = static_cast<size_t>(params_.size());
    ps::StatusOr<std::unique_ptr<ps::Trainer>> t = ps::Status();
    {
      py::gil_scoped_release release;
      t = ps::Trainer::Create(&w, data, n_, o);
    }
    ThrowIfError(t.status());
    trainer_ = std::move(*t);
  }

  void Step(const py::array& grad) {
    if (!IsFloatBuffer(grad)) ThrowInvalid("Trainer.step: grad must be a C-contiguous float32 array");
    if (static_cast<size_t>(grad.size()) != n_) {
      ThrowInvalid("Trainer.step: grad has " + std::to_string(grad.size()) + " elements, the model " +
                   std::to_string(n_));
    }
    const float* g = static_cast<const float*>(grad.data());
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = trainer_->Step(g);
    }
    ThrowIfError(s);
  }

  void Finish() {
    ps::Status s;
    {
      py::gil_scoped_release release;
      s = trainer_->Finish();
    }
    ThrowIfError(s);
  }

  py::array_t<float> CopyParams() const {
    py::array_t<float> out(static_cast<py::ssize_t>(n_));
    trainer_->CopyParams(out.mutable_data());
    return out;
  }

  py::dict Stats() const {
    const ps::TrainerStats s = trainer_->stats();
    py::dict d;
    d["steps"] = s.steps;
    d["exchanges"] = s.exchanges;
    d["merges"] = s.merges;
    d["gossip_weight"] = s.gossip_weight;
    return d;
  }

  std::string Algorithm() const { return trainer_->options().algorithm.ToString(); }

 private:
  py::object worker_;  // keeps the worker alive as long as the Trainer
  py::array params_;   // keeps the buffer alive
  size_t n_ = 0;
  std::unique_ptr<ps::Trainer> trainer_;
};

}  // namespace

void BindTrainer(py::module_& m) {
  m.def("parse_algorithm", [](const std::string& text) {
    ps::StatusOr<ps::AlgorithmSpec> s = ps::ParseAlgorithm(text);
    ThrowIfError(s.status());
    return s->ToString();
  });
  py::class_<PyTrainer>(m, "Trainer")
      .def(py::init<py::object, py::array, const std::string&, float, float, bool, int,
                    const std::string&, float, int, const std::string&, uint64_t,
                    std::optional<double>>(),
           py::arg("worker"), py::arg("params"), py::arg("algorithm"), py::arg("lr"),
           py::arg("momentum") = 0.0f, py::arg("nesterov") = false, py::arg("warmup_steps") = 0,
           py::arg("decay") = "none", py::arg("gamma") = 0.1f, py::arg("decay_every") = 0,
           py::arg("name") = "model", py::arg("seed") = 0, py::arg("timeout") = py::none())
      .def("step", &PyTrainer::Step)
      .def("finish", &PyTrainer::Finish)
      .def("copy_params", &PyTrainer::CopyParams)
      .def("stats", &PyTrainer::Stats)
      .def_property_readonly("algorithm", &PyTrainer::Algorithm);
}

}  // namespace layerps_python
