// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core.Handle and layerps._core.Worker (PyWorker, worker.h): tables, dense and
// sparse requests, worker-to-worker messages, all-reduce and placement.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind.h"
#include "handles.h"
#include "worker.h"

namespace py = pybind11;

namespace layerps_python {

void BindHandle(py::module_& m) {
  py::class_<Handle>(m, "Handle")
      .def("wait", &Handle::Wait, py::arg("timeout") = py::none())
      .def("done", &Handle::Done)
      .def_property_readonly("ticket", &Handle::ticket)
      .def_property_readonly("what", &Handle::what);
}

void BindWorker(py::module_& m) {
  py::class_<PyWorker>(m, "Worker")
      .def(py::init<ps::Options>())
      .def("start", &PyWorker::Start)
      .def("stop", &PyWorker::Stop)
      .def("declare_table", &PyWorker::DeclareTable)
      .def("drop_table", &PyWorker::DropTable, py::arg("name"))
      .def("checkpoint", &PyWorker::Checkpoint, py::arg("dir"), py::arg("timeout_s"))
      .def("set_learning_rate", &PyWorker::SetLearningRate, py::arg("table"), py::arg("learning_rate"))
      .def("table_spec", &PyWorker::GetTableSpec)
      .def("barrier", &PyWorker::Barrier, py::arg("group"), py::arg("timeout") = py::none())
      .def("join", &PyWorker::Join, py::arg("timeout") = py::none())
      .def("flush", &PyWorker::Flush, py::arg("timeout") = py::none())
      .def("push", &PyWorker::Push, py::return_value_policy::take_ownership)
      .def("pull", &PyWorker::Pull, py::arg("table"), py::arg("out") = py::none(),
           py::return_value_policy::take_ownership)
      .def("pushpull", &PyWorker::PushPull, py::arg("table"), py::arg("grad"),
           py::arg("out") = py::none(), py::return_value_policy::take_ownership)
      .def("assign", &PyWorker::Assign, py::return_value_policy::take_ownership)
      .def("push_sparse", &PyWorker::PushSparse, py::return_value_policy::take_ownership)
      .def("pull_sparse", &PyWorker::PullSparse, py::arg("table"), py::arg("keys"),
           py::arg("out") = py::none(), py::return_value_policy::take_ownership)
      .def("assign_sparse", &PyWorker::AssignSparse, py::return_value_policy::take_ownership)
      .def("push_device", &PyWorker::PushDevice, py::arg("table"), py::arg("grad"), py::arg("n"),
           py::arg("stream"), py::arg("keep"), py::return_value_policy::take_ownership)
      .def("pull_device", &PyWorker::PullDevice, py::arg("table"), py::arg("out"), py::arg("n"),
           py::arg("stream"), py::arg("keep"), py::return_value_policy::take_ownership)
      .def("push_sparse_device", &PyWorker::PushSparseDevice, py::arg("table"), py::arg("keys"),
           py::arg("num_keys"), py::arg("rows"), py::arg("rows_len"), py::arg("stream"),
           py::arg("keep"), py::return_value_policy::take_ownership)
      .def("pull_sparse_device", &PyWorker::PullSparseDevice, py::arg("table"), py::arg("keys"),
           py::arg("num_keys"), py::arg("out"), py::arg("rows_len"), py::arg("stream"),
           py::arg("keep"), py::return_value_policy::take_ownership)
      .def("push_sparse_many_device", &PyWorker::PushSparseManyDevice, py::arg("entries"),
           py::arg("stream"), py::arg("keep"), py::return_value_policy::take_ownership)
      .def("pull_sparse_many_device", &PyWorker::PullSparseManyDevice, py::arg("entries"),
           py::arg("stream"), py::arg("keep"), py::return_value_policy::take_ownership)
      .def_static("device_support", &ps::Worker::DeviceSupport,
                  "True when this build has the CUDA path and a GPU is usable here")
      .def("push_sparse_many", &PyWorker::PushSparseMany, py::arg("entries"),
           py::return_value_policy::take_ownership)
      .def("pull_sparse_many", &PyWorker::PullSparseMany, py::arg("entries"),
           py::return_value_policy::take_ownership)
      .def_property_readonly("id", &PyWorker::id)
      .def_property_readonly("rank", &PyWorker::rank)
      .def_property_readonly("num_workers", &PyWorker::num_workers)
      .def_property_readonly("num_servers", &PyWorker::num_servers)
      .def_property_readonly("parked_requests", &PyWorker::parked)
      .def("nodes", &PyWorker::Nodes)
      .def("stats", &PyWorker::Stats)
      .def("send_to", &PyWorker::SendTo, py::return_value_policy::take_ownership)
      .def("recv_from", &PyWorker::RecvFrom, py::return_value_policy::take_ownership)
      .def("allreduce", &PyWorker::AllReduce, py::arg("data"), py::arg("timeout") = py::none(),
           py::arg("ranks") = py::none(), py::arg("segment_bytes") = py::none(),
           py::arg("algorithm") = "auto")
      .def("traffic", &PyWorker::Traffic)
      .def("install_placement", &PyWorker::InstallPlacement, py::arg("layers"),
           py::arg("timeout") = py::none())
      .def("placement", &PyWorker::Placement)
      .def("table_servers", &PyWorker::TableServers);
}

}  // namespace layerps_python
