// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core.PinnedStage and copy_host_to_device (ps/pinned_stage.h): CUDA tensors
// staged in the core's pinned pool for the calls without a device variant of their own
// (the collectives, pushpull, assign, send/receive). layerps/_arrays.py drives them; the
// pointers and streams are torch's (data_ptr(), current_stream().cuda_stream).
#include <pybind11/pybind11.h>

#include "ps/pinned_stage.h"

#include "bind.h"
#include "errors.h"

namespace py = pybind11;

namespace layerps_python {

namespace {
void* Ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
}  // namespace

void BindDevice(py::module_& m) {
  py::class_<ps::PinnedStage>(m, "PinnedStage", py::buffer_protocol(),
                              "A block of the core's pinned host memory (ps/pinned_stage.h)")
      .def_static(
          "allocate",
          [](size_t bytes) {
            ps::StatusOr<ps::PinnedStage> s = ps::PinnedStage::Allocate(bytes);
            ThrowIfError(s.status());
            return std::move(*s);
          },
          py::arg("bytes"))
      .def_static(
          "from_device",
          [](uintptr_t src, size_t bytes, uintptr_t stream) {
            ps::StatusOr<ps::PinnedStage> s = [&] {
              py::gil_scoped_release release;
              return ps::PinnedStage::FromDevice(Ptr(src), bytes, Ptr(stream));
            }();
            ThrowIfError(s.status());
            return std::move(*s);
          },
          py::arg("src"), py::arg("bytes"), py::arg("stream"))
      .def(
          "to_device",
          [](const ps::PinnedStage& s, uintptr_t dst, size_t bytes, uintptr_t stream) {
            ThrowIfError(s.ToDevice(Ptr(dst), bytes, Ptr(stream)));
          },
          py::arg("dst"), py::arg("bytes"), py::arg("stream"))
      .def_property_readonly("size", &ps::PinnedStage::size)
      .def_buffer([](ps::PinnedStage& s) {
        return py::buffer_info(s.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(s.size())}, {1});
      });
  m.def(
      "copy_host_to_device",
      [](const py::buffer& src, uintptr_t dst, uintptr_t stream) {
        py::buffer_info info = src.request();
        const size_t bytes = static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
        ps::Status st;
        {
          py::gil_scoped_release release;
          st = ps::CopyHostToDevice(info.ptr, bytes, Ptr(dst), Ptr(stream));
        }
        ThrowIfError(st);
      },
      py::arg("src"), py::arg("dst"), py::arg("stream"),
      "Copies a host buffer (C-contiguous) to device memory on `stream` and waits for it");
}

}  // namespace layerps_python
