// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The device path: Worker calls whose data lives in GPU memory.
//
// Pushes: pack on the caller's stream into pinned host buffers (which ZeroMQ then sends
// as they are), wait for that stream, send. Pulls: receive on the host into pinned
// buffers, then enqueue the copy (and, sparse, the scatter kernel) on the caller's
// stream; the pinned/device temporaries are released in stream order.
//
// Pinned buffers come from one process-wide pool (worker/pinned_pool.h): allocating and
// freeing page-locked memory costs milliseconds per call and synchronizes the device (a
// fresh 64 MiB buffer per dense push made the device route 0.37x the host route on an
// H200).
#include "ps/worker.h"
#include "worker/ps_requests.h"

#if LAYERPS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "common/wire_type.h"
#include "cuda/packing_cuda.h"
#include "worker/pinned_pool.h"
#endif

namespace ps {

#if LAYERPS_HAVE_CUDA

namespace {

using device::CudaError;
using device::NewPinned;
using device::NoUsableDevice;

// Freed stream-ordered device memory the default pool keeps (RetainPoolMemory).
constexpr size_t kRetainedDeviceBytes = size_t{1} << 30;

void ReleaseAfter(cudaStream_t stream, std::shared_ptr<const void> owner) {
  device::ReleaseAfter(stream, std::move(owner));
}

// Device memory allocated and freed in the order of `stream`.
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    error_ = cudaMallocAsync(&ptr_, bytes == 0 ? 1 : bytes, stream);
  }
  ~StreamBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  bool ok() const { return error_ == cudaSuccess; }
  cudaError_t error() const { return error_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  cudaError_t error_;
};

}  // namespace

Ticket PsRequests::PushDevice(TableId table, const float* grad, size_t n, void* stream,
                              Callback cb) {
  if (!Worker::DeviceSupport())
    return tracker_->Failed(NoUsableDevice(), std::move(cb));
  auto s = static_cast<cudaStream_t>(stream);
  // A table whose values travel narrowed (TableSpec::wire_dtype): the GPU kernel writes
  // the wire values straight into mapped pinned memory, which goes out as it is.
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kDense, &map, &err);
  if (!t) return tracker_->Failed(err, std::move(cb));
  const auto wire = static_cast<pack::WireType>(t->spec.wire_dtype);
  if (wire != pack::WireType::kFloat32 && grad != nullptr && n == t->spec.size) {
    auto pinned = NewPinned(n * pack::WireBytes(wire));
    if (!pinned.ok()) return tracker_->Failed(pinned.status(), std::move(cb));
    pack::gpu::Error e = pack::gpu::ToWire(grad, n, wire, pinned->get(), s);
    if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
    if (e != pack::gpu::kOk)
      return tracker_->Failed(Internal(CudaError("narrowing to the wire type", e)), std::move(cb));
    return Dense(MsgType::kPush, table, reinterpret_cast<const float*>(pinned->get()), nullptr, n,
                 std::move(cb), *pinned, nullptr, /*in_is_wire=*/true);
  }
  auto pinned = NewPinned(n * sizeof(float));
  if (!pinned.ok()) return tracker_->Failed(pinned.status(), std::move(cb));
  float* host = reinterpret_cast<float*>(pinned->get());
  pack::gpu::Error e =
      grad ? pack::gpu::CopyAsync(host, grad, n * sizeof(float), s) : pack::gpu::kOk;
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
  if (e != pack::gpu::kOk)
    return tracker_->Failed(Internal(CudaError("device-to-host copy", e)), std::move(cb));
  return Dense(MsgType::kPush, table, grad ? host : nullptr, nullptr, n, std::move(cb), *pinned);
}

Ticket PsRequests::PullDevice(TableId table, float* out, size_t n, void* stream, Callback cb) {
  if (!Worker::DeviceSupport())
    return tracker_->Failed(NoUsableDevice(), std::move(cb));
  auto s = static_cast<cudaStream_t>(stream);
  auto pinned = NewPinned(n * sizeof(float));
  if (!pinned.ok()) return tracker_->Failed(pinned.status(), std::move(cb));
  std::shared_ptr<const void> owner = *pinned;
  float* host = reinterpret_cast<float*>(pinned->get());
  return Dense(MsgType::kPull, table, nullptr, out ? host : nullptr, n, std::move(cb), owner,
               [out, host, n, s, owner](Request&) -> Status {
                 const pack::gpu::Error e = pack::gpu::CopyAsync(out, host, n * sizeof(float), s);
                 if (e != pack::gpu::kOk) return Internal(CudaError("host-to-device copy", e));
                 ReleaseAfter(s, owner);
                 return Status::OK();
               });
}

Ticket PsRequests::SparseDevice(MsgType type, TableId table, const Key* keys, size_t num_keys,
                                const float* rows, float* out, size_t rows_len, void* stream,
                                Callback cb) {
  if (!Worker::DeviceSupport())
    return tracker_->Failed(NoUsableDevice(), std::move(cb));
  std::shared_ptr<const ClusterMap> map;
  Status err;
  const TableInfo* t = Lookup(table, TableKind::kSparse, &map, &err);
  if (!t) return tracker_->Failed(err, std::move(cb));
  const bool pushes = type == MsgType::kPush;
  err = CheckSparseArgs(*t, keys, num_keys, pushes ? rows : out, rows_len);
  if (!err.ok()) return tracker_->Failed(err, std::move(cb));
  auto s = static_cast<cudaStream_t>(stream);
  // The temporaries below are stream-ordered allocations: keep freed ones for the next
  // request (by default the pool unmaps them at every synchronization). A failure here
  // only costs speed.
  pack::gpu::RetainPoolMemory(kRetainedDeviceBytes);
  const uint32_t dim = t->spec.dim;
  const size_t buckets = t->ranges.size();

  if (!pushes) {
    // Pull: unique keys grouped by server and the inverse on the GPU; the unique keys come
    // to pinned memory and go out; the rows come back into pinned staging, go up in one
    // copy, and a kernel scatters them to every position, on the caller's stream.
    std::vector<uint64_t> begins;
    for (const KeyRange& r : t->ranges) begins.push_back(r.begin);
    auto d_inverse = std::make_shared<StreamBuffer>(num_keys * sizeof(uint32_t), s);
    StreamBuffer d_begin(buckets * sizeof(uint64_t), s), d_keys(num_keys * sizeof(Key), s),
        d_offsets((buckets + 1) * sizeof(size_t), s);
    if (!d_inverse->ok() || !d_begin.ok() || !d_keys.ok() || !d_offsets.ok())
      return tracker_->Failed(ResourceExhausted("CUDA device allocation failed"), std::move(cb));
    auto pinned_keys = NewPinned(num_keys * sizeof(Key));
    auto pinned_offsets = NewPinned((buckets + 1) * sizeof(size_t));
    if (!pinned_keys.ok() || !pinned_offsets.ok()) {
      return tracker_->Failed(ResourceExhausted("pinned allocation failed"), std::move(cb));
    }
    pack::gpu::Workspace ws;
    pack::gpu::Error e =
        pack::gpu::CopyAsync(d_begin.as<uint64_t>(), begins.data(), buckets * sizeof(uint64_t), s);
    if (e == pack::gpu::kOk) {
      e = pack::gpu::CoalesceAndBucket(keys, nullptr, num_keys, 0, d_begin.as<uint64_t>(),
                                       buckets, d_keys.as<Key>(), nullptr,
                                       d_inverse->as<uint32_t>(), d_offsets.as<size_t>(), &ws, s);
    }
    if (e == pack::gpu::kOk) {
      e = pack::gpu::CopyCountedAsync(pinned_keys->get(), d_keys.as<Key>(),
                                      d_offsets.as<size_t>() + buckets, sizeof(Key), num_keys, s);
    }
    if (e == pack::gpu::kOk) {
      e = pack::gpu::CopyAsync(pinned_offsets->get(), d_offsets.as<size_t>(),
                               (buckets + 1) * sizeof(size_t), s);
    }
    if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
    if (e != pack::gpu::kOk)
      return tracker_->Failed(Internal(CudaError("packing", e)), std::move(cb));
    SparseBatch batch;
    const size_t* offsets = reinterpret_cast<const size_t*>(pinned_offsets->get());
    batch.offsets.assign(offsets, offsets + buckets + 1);
    const size_t m = batch.offsets.back();
    if (m > num_keys || !std::is_sorted(batch.offsets.begin(), batch.offsets.end()))
      return tracker_->Failed(Internal("GPU packing returned bad offsets"), std::move(cb));
    auto staging = NewPinned(m * dim * sizeof(float));
    if (!staging.ok()) return tracker_->Failed(staging.status(), std::move(cb));
    batch.keys = reinterpret_cast<const Key*>(pinned_keys->get());
    batch.owner = *pinned_keys;
    batch.staging = *staging;
    return SendSparse(
        MsgType::kPull, map, *t, std::move(batch), out,
        [s, dim, num_keys, d_inverse](Request& r) -> Status {
          const size_t uniq_floats = r.staging.size();
          StreamBuffer uniq(uniq_floats * sizeof(float), s);
          if (!uniq.ok()) return ResourceExhausted("CUDA device allocation failed");
          pack::gpu::Error e = pack::gpu::CopyAsync(uniq.as<float>(), r.staging.data(),
                                                    uniq_floats * sizeof(float), s);
          if (e == pack::gpu::kOk) {
            e = pack::gpu::ScatterRows(d_inverse->as<uint32_t>(), num_keys, uniq.as<float>(), dim,
                                       r.out, s);
          }
          if (e != pack::gpu::kOk) return Internal(CudaError("scatter", e));
          // The pinned rows stay until the copy has read them.
          ReleaseAfter(s, r.staging.buffer());
          return Status::OK();
        },
        std::move(cb));
  }

  // Push: coalesce and bucket on the GPU, copy exactly the packed bytes to pinned memory.
  std::vector<uint64_t> begins;
  for (const KeyRange& r : t->ranges) begins.push_back(r.begin);
  StreamBuffer d_begin(buckets * sizeof(uint64_t), s), d_keys(num_keys * sizeof(Key), s),
      d_rows(num_keys * dim * sizeof(float), s), d_offsets((buckets + 1) * sizeof(size_t), s);
  if (!d_begin.ok() || !d_keys.ok() || !d_rows.ok() || !d_offsets.ok()) {
    return tracker_->Failed(ResourceExhausted("CUDA device allocation failed"), std::move(cb));
  }
  // Rows of a table whose values travel narrowed are narrowed on the GPU (in place of the
  // float32 copy) and sent as they are.
  const auto wire = static_cast<pack::WireType>(t->spec.wire_dtype);
  const size_t wire_bytes = pack::WireBytes(wire);
  StreamBuffer d_wire(wire == pack::WireType::kFloat32 ? 0 : num_keys * dim * wire_bytes, s);
  if (!d_wire.ok()) {
    return tracker_->Failed(ResourceExhausted("CUDA device allocation failed"), std::move(cb));
  }
  auto pinned_keys = NewPinned(num_keys * sizeof(Key));
  auto pinned_rows = NewPinned(num_keys * dim * wire_bytes);
  auto pinned_offsets = NewPinned((buckets + 1) * sizeof(size_t));
  if (!pinned_keys.ok() || !pinned_rows.ok() || !pinned_offsets.ok()) {
    return tracker_->Failed(ResourceExhausted("pinned allocation failed"), std::move(cb));
  }
  pack::gpu::Workspace ws;
  pack::gpu::Error e =
      pack::gpu::CopyAsync(d_begin.as<uint64_t>(), begins.data(), buckets * sizeof(uint64_t), s);
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CoalesceAndBucket(keys, rows, num_keys, dim, d_begin.as<uint64_t>(), buckets,
                                     d_keys.as<Key>(), d_rows.as<float>(), nullptr,
                                     d_offsets.as<size_t>(), &ws, s);
  }
  const size_t* d_count = d_offsets.as<size_t>() + buckets;
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CopyCountedAsync(pinned_keys->get(), d_keys.as<Key>(), d_count, sizeof(Key),
                                    num_keys, s);
  }
  if (e == pack::gpu::kOk && wire != pack::WireType::kFloat32) {
    // All num_keys rows (an upper bound of the unique ones): the count stays on the GPU.
    e = pack::gpu::ToWire(d_rows.as<float>(), num_keys * size_t{dim}, wire, d_wire.as<void>(), s);
    if (e == pack::gpu::kOk) {
      e = pack::gpu::CopyCountedAsync(pinned_rows->get(), d_wire.as<void>(), d_count,
                                      dim * wire_bytes, num_keys, s);
    }
  } else if (e == pack::gpu::kOk) {
    e = pack::gpu::CopyCountedAsync(pinned_rows->get(), d_rows.as<float>(), d_count,
                                    dim * sizeof(float), num_keys, s);
  }
  if (e == pack::gpu::kOk) {
    e = pack::gpu::CopyAsync(pinned_offsets->get(), d_offsets.as<size_t>(),
                             (buckets + 1) * sizeof(size_t), s);
  }
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
  if (e != pack::gpu::kOk)
    return tracker_->Failed(Internal(CudaError("packing", e)), std::move(cb));
  SparseBatch batch;
  const size_t* offsets = reinterpret_cast<const size_t*>(pinned_offsets->get());
  batch.offsets.assign(offsets, offsets + buckets + 1);
  if (batch.offsets.back() > num_keys)
    return tracker_->Failed(Internal("GPU packing returned a bad count"), std::move(cb));
  batch.keys = reinterpret_cast<const Key*>(pinned_keys->get());
  batch.rows = reinterpret_cast<const float*>(pinned_rows->get());
  batch.rows_in_wire = wire != pack::WireType::kFloat32;
  batch.owner = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(
      *pinned_keys, *pinned_rows);
  ++tracker_->stats().copies;
  return SendSparse(MsgType::kPush, map, *t, std::move(batch), nullptr, nullptr, std::move(cb));
}

// Several tables: every entry's keys (and a push's rows) come down to one pinned block in
// stream order, then the host's fused path (SparseMany) coalesces, buckets and fuses them;
// a pull's rows land in the same block and go up to every entry's output on the stream.
// Unlike the single-table calls, the coalescing runs on the CPU: the fused messages are
// built there from every table at once.
Ticket PsRequests::SparseManyDevice(MsgType type, const std::vector<SparseEntry>& entries,
                                    void* stream, Callback cb) {
  if (!Worker::DeviceSupport())
    return tracker_->Failed(NoUsableDevice(), std::move(cb));
  const bool pushes = type == MsgType::kPush;
  std::shared_ptr<const ClusterMap> map = map_();
  if (!map) {
    return tracker_->Failed(FailedPrecondition("the worker is not started (call Start first)"),
                            std::move(cb));
  }
  size_t key_total = 0, row_total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const TableInfo* t = nullptr;
    const Status err = CheckSparseEntry(*map, entries[i], i, pushes, &t);
    if (!err.ok()) return tracker_->Failed(err, std::move(cb));
    key_total += entries[i].num_keys;
    row_total += entries[i].rows_len;
  }
  auto s = static_cast<cudaStream_t>(stream);
  auto pinned = NewPinned(key_total * sizeof(Key) + row_total * sizeof(float));
  if (!pinned.ok()) return tracker_->Failed(pinned.status(), std::move(cb));
  std::shared_ptr<const void> owner = *pinned;
  Key* key_at = reinterpret_cast<Key*>(pinned->get());
  float* row_at = reinterpret_cast<float*>(key_at + key_total);
  std::vector<SparseEntry> host = entries;
  pack::gpu::Error e = pack::gpu::kOk;
  for (SparseEntry& h : host) {
    if (h.num_keys > 0 && e == pack::gpu::kOk) {
      e = pack::gpu::CopyAsync(key_at, h.keys, h.num_keys * sizeof(Key), s);
      h.keys = key_at;
      key_at += h.num_keys;
    }
    if (h.rows_len > 0 && e == pack::gpu::kOk) {
      if (pushes) {
        e = pack::gpu::CopyAsync(row_at, h.rows, h.rows_len * sizeof(float), s);
        h.rows = row_at;
      } else {
        h.out = row_at;
      }
      row_at += h.rows_len;
    }
  }
  if (e == pack::gpu::kOk) e = cudaStreamSynchronize(s);
  if (e != pack::gpu::kOk)
    return tracker_->Failed(Internal(CudaError("device-to-host copy", e)), std::move(cb));
  // The block outlives the request (a push's frames are copies, but nothing relies on it).
  Callback done = [owner, cb = std::move(cb)](const Status& st) {
    if (cb) cb(st);
  };
  if (pushes) return SparseMany(MsgType::kPush, host, std::move(done));
  auto outs = std::make_shared<std::vector<std::pair<float*, SparseEntry>>>();
  for (size_t i = 0; i < host.size(); ++i) {
    if (host[i].rows_len > 0) outs->emplace_back(entries[i].out, host[i]);
  }
  return SparseMany(
      MsgType::kPull, host, std::move(done), [outs, owner, s](Request&) -> Status {
        for (const auto& o : *outs) {
          const pack::gpu::Error err =
              pack::gpu::CopyAsync(o.first, o.second.out, o.second.rows_len * sizeof(float), s);
          if (err != pack::gpu::kOk) return Internal(CudaError("host-to-device copy", err));
        }
        ReleaseAfter(s, owner);  // the pinned rows stay until the copies have read them
        return Status::OK();
      });
}

bool Worker::DeviceSupport() {
  static const bool available = pack::gpu::DeviceAvailable();
  return available;
}

#else  // !LAYERPS_HAVE_CUDA

Ticket PsRequests::PushDevice(TableId, const float*, size_t, void*, Callback cb) {
  return tracker_->Failed(FailedPrecondition("LayerPS was built without CUDA (LAYERPS_BUILD_CUDA=OFF): no device calls"), std::move(cb));
}
Ticket PsRequests::PullDevice(TableId, float*, size_t, void*, Callback cb) {
  return tracker_->Failed(FailedPrecondition("LayerPS was built without CUDA (LAYERPS_BUILD_CUDA=OFF): no device calls"), std::move(cb));
}
Ticket PsRequests::SparseDevice(MsgType, TableId, const Key*, size_t, const float*, float*, size_t,
                                void*, Callback cb) {
  return tracker_->Failed(FailedPrecondition("LayerPS was built without CUDA (LAYERPS_BUILD_CUDA=OFF): no device calls"), std::move(cb));
}
Ticket PsRequests::SparseManyDevice(MsgType, const std::vector<SparseEntry>&, void*, Callback cb) {
  return tracker_->Failed(FailedPrecondition("LayerPS was built without CUDA (LAYERPS_BUILD_CUDA=OFF): no device calls"), std::move(cb));
}
bool Worker::DeviceSupport() { return false; }

#endif  // LAYERPS_HAVE_CUDA

}  // namespace ps
