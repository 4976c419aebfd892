// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core's nodes: NodeInfo, Scheduler and Server (start, join and stop with the
// GIL released; their stats).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bind.h"
#include "errors.h"
#include "ps/ps.h"
#include "timeouts.h"

namespace py = pybind11;

namespace layerps_python {
namespace {

template <typename Node>
void StartNode(Node& n) {
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = n.Start();
  }
  ThrowIfError(s);
}

template <typename Node>
void JoinNode(Node& n, std::optional<double> timeout_s) {
  const Millis t = ToMillis(timeout_s, kNoLimit);
  ps::Status s;
  {
    py::gil_scoped_release release;
    s = n.Join(t);
  }
  ThrowIfError(s);
}

template <typename Node>
void StopNode(Node& n) {
  py::gil_scoped_release release;
  n.Stop();
}

}  // namespace

void BindNodes(py::module_& m) {
  py::class_<ps::NodeInfo>(m, "NodeInfo")
      .def_readonly("id", &ps::NodeInfo::id)
      .def_readonly("role", &ps::NodeInfo::role)
      .def_readonly("rank", &ps::NodeInfo::rank)
      .def_readonly("endpoint", &ps::NodeInfo::endpoint)
      .def_readonly("hostname", &ps::NodeInfo::hostname)
      .def_readonly("alive", &ps::NodeInfo::alive)
      .def("__repr__", [](const ps::NodeInfo& n) {
        return std::string("NodeInfo(") + ps::RoleName(n.role) + " rank " + std::to_string(n.rank) +
               " id " + std::to_string(n.id) + " at " + n.endpoint + (n.alive ? "" : ", dead") +
               ")";
      });

  py::class_<ps::Scheduler>(m, "Scheduler")
      .def(py::init<ps::Options>())
      .def("start", &StartNode<ps::Scheduler>)
      .def("join", &JoinNode<ps::Scheduler>, py::arg("timeout") = py::none())
      .def("stop", &StopNode<ps::Scheduler>)
      .def_property_readonly("address", &ps::Scheduler::address)
      .def("nodes", &ps::Scheduler::Nodes)
      .def("stats", [](const ps::Scheduler& s) {
        const ps::SchedulerStats st = s.stats();
        py::dict d;
        d["messages_received"] = st.messages_received;
        d["bad_messages"] = st.bad_messages;
        d["rejected_registrations"] = st.rejected_registrations;
        d["rejected_rejoins"] = st.rejected_rejoins;
        d["dead_nodes"] = st.dead_nodes;
        d["stall_warnings"] = st.stall_warnings;
        d["map_epoch"] = st.map_epoch;
        d["recoveries"] = st.recoveries;
        return d;
      });

  py::class_<ps::Server>(m, "Server")
      .def(py::init<ps::Options>())
      .def("start", &StartNode<ps::Server>)
      .def("join", &JoinNode<ps::Server>, py::arg("timeout") = py::none())
      .def("stop", &StopNode<ps::Server>)
      .def_property_readonly("id", &ps::Server::id)
      .def_property_readonly("rank", &ps::Server::rank)
      .def_property_readonly("endpoint", &ps::Server::endpoint)
      .def("stats",
           [](const ps::Server& s) {
             const ps::ServerStats st = s.stats();
             py::dict d;
             d["messages_received"] = st.messages_received;
             d["bad_messages"] = st.bad_messages;
             d["push_requests"] = st.push_requests;
             d["pull_requests"] = st.pull_requests;
             d["bytes_received"] = st.bytes_received;
             d["bytes_sent"] = st.bytes_sent;
             d["sparse_rows"] = st.sparse_rows;
             d["stall_warnings"] = st.stall_warnings;
             d["backed_up"] = st.backed_up;
             d["copies_sent"] = st.copies_sent;
             d["copies_received"] = st.copies_received;
             d["copy_bytes_sent"] = st.copy_bytes_sent;
             d["lane_requests"] = st.lane_requests;
             d["lane_tasks"] = st.lane_tasks;
             d["checkpoint_bytes_written"] = st.checkpoint_bytes_written;
             return d;
           })
      .def("table_stats", [](const ps::Server& s) {
        // {table name: {rows_live, evicted, expired, admitted, refused}} (docs/sparse.md)
        py::dict out;
        for (const auto& kv : s.table_stats()) {
          const ps::SparseTableStats& t = kv.second;
          py::dict d;
          d["id"] = kv.first;
          d["rows_live"] = t.rows_live;
          d["evicted"] = t.evicted;
          d["expired"] = t.expired;
          d["admitted"] = t.admitted;
          d["refused"] = t.refused;
          d["spilled"] = t.spilled;
          d["reloaded"] = t.reloaded;
          d["capacity"] = t.capacity;
          out[py::str(t.name)] = d;
        }
        return out;
      });
}

}  // namespace layerps_python
