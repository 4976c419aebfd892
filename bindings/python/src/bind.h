// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The registration functions of layerps._core, one per subject, that module.cc calls in
// this order (a binding's types must be registered before the signatures that use them).
// Each bind file includes the helpers it needs (errors.h, timeouts.h, handles.h,
// worker.h); none of those includes this header or a bind file.
#ifndef LAYERPS_PYTHON_BIND_H_
#define LAYERPS_PYTHON_BIND_H_

#include <pybind11/pybind11.h>

namespace layerps_python {

// StatusCode and the other enums, Options, TableSpec, set_log_level, detect_launcher,
// option_table (bind_options.cc).
void BindOptions(pybind11::module_& m);
// NodeInfo, Scheduler, Server (bind_nodes.cc).
void BindNodes(pybind11::module_& m);
// Handle (bind_worker.cc).
void BindHandle(pybind11::module_& m);
// The typed collectives (collectives.cc).
void BindCollectives(pybind11::module_& m);
// Worker (bind_worker.cc).
void BindWorker(pybind11::module_& m);
// PinnedStage and copy_host_to_device (bind_device.cc).
void BindDevice(pybind11::module_& m);
// parse_algorithm and Trainer (trainer.cc).
void BindTrainer(pybind11::module_& m);

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_BIND_H_
