// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-device-bench: the Worker's GPU path end to end (keys and rows in GPU memory)
// against the route a user would otherwise take: cudaMemcpy to the host, then the host
// call (and for pulls the host call, then cudaMemcpy back). One in-process cluster
// (scheduler, servers, one worker) over tcp://127.0.0.1; each route runs --repeats
// timed rounds of --requests requests, one in flight, alternating the two routes round
// by round so that both see the same machine. Reported: median keys/s (sparse) or GB/s
// (dense) per route and their ratio.
//
// Values are checked: after the timed pushes, every touched row (dense: every element)
// is pulled and compared with the sum of everything pushed (small integers: exact in
// float32), and every timed pull is compared with the host's expectation.
//
// Without a usable GPU (Worker::DeviceSupport() false) it says so and exits 77.
#include <cuda_runtime_api.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

DEFINE_uint64(keys, 1000000, "Sparse: keys per request");
DEFINE_int32(dim, 16, "Sparse: floats per row");
DEFINE_double(duplicates, 0.3, "Sparse: fraction of a request's keys that repeat an earlier one");
DEFINE_uint64(key_space, 100000000, "Sparse: distinct keys are drawn from [0, key_space)");
DEFINE_uint64(dense_elems, 16u << 20, "Dense: floats per request (0: no dense cases)");
DEFINE_int32(servers, 2, "Servers in the local cluster");
DEFINE_int32(requests, 5, "Requests per timed round");
DEFINE_int32(repeats, 5, "Timed rounds per route");

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(300);

#define CUDA_OR_DIE(call)                                                              \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                   cudaGetErrorString(e_));                                            \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

void OkOrDie(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* p = nullptr;
  CUDA_OR_DIE(cudaMalloc(&p, std::max<size_t>(1, host.size() * sizeof(T))));
  CUDA_OR_DIE(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times `round` (which issues FLAGS_requests requests and waits for them) per route,
// alternating the routes; returns the median seconds per round of each.
std::pair<double, double> TimeRoutes(const std::function<void()>& device,
                                     const std::function<void()>& host) {
  device();  // warm-up: allocations, connections, first-touch of the rows
  host();
  std::vector<double> td, th;
  for (int r = 0; r < FLAGS_repeats; ++r) {
    auto t0 = Clock::now();
    device();
    td.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    host();
    th.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {Median(td), Median(th)};
}

void Report(const char* what, double units_per_round, const char* unit,
            std::pair<double, double> t) {
  const double dev = units_per_round / t.first, host = units_per_round / t.second;
  std::printf("%-44s device %10.3f %s  host route %10.3f %s  device/host %.2f\n", what, dev, unit,
              host, unit, dev / host);
}

int Main() {
  if (!Worker::DeviceSupport()) {
    std::printf("layerps-device-bench: no usable GPU here (Worker::DeviceSupport() is false); "
                "nothing measured\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  std::printf("layerps-device-bench on %s, %u CPUs; %d server(s), 1 worker, tcp; %d requests "
              "per round, %d rounds per route (medians)\n",
              prop.name, std::thread::hardware_concurrency(), FLAGS_servers, FLAGS_requests,
              FLAGS_repeats);
  Options o;
  o.num_servers = FLAGS_servers;
  o.num_workers = 1;
  o.scheduler_address = "tcp://127.0.0.1:0";
  o.request_timeout_ms = 300000;
  Scheduler scheduler(o);
  OkOrDie(scheduler.Start(), "scheduler");
  o.scheduler_address = scheduler.address();
  std::vector<std::unique_ptr<Server>> servers;
  for (int i = 0; i < FLAGS_servers; ++i) servers.push_back(std::make_unique<Server>(o));
  Worker worker(o);
  std::vector<std::thread> starts;
  for (auto& s : servers) starts.emplace_back([&s] { OkOrDie(s->Start(), "server"); });
  OkOrDie(worker.Start(), "worker");
  for (auto& t : starts) t.join();

  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreate(&stream));

  // --- sparse: keys with the asked fraction of repeats, rows of small integers ---------
  const uint64_t n = FLAGS_keys;
  const uint32_t dim = static_cast<uint32_t>(FLAGS_dim);
  std::mt19937_64 rng(42);
  std::vector<Key> keys(n);
  const uint64_t distinct = std::max<uint64_t>(1, static_cast<uint64_t>(n * (1 - FLAGS_duplicates)));
  for (uint64_t i = 0; i < n; ++i) keys[i] = i < distinct ? rng() % FLAGS_key_space : keys[rng() % distinct];
  std::shuffle(keys.begin(), keys.end(), rng);
  std::vector<float> rows(n * dim);
  for (uint64_t i = 0; i < n; ++i)
    for (uint32_t d = 0; d < dim; ++d) rows[i * dim + d] = static_cast<float>((i + d) % 5 + 1);
  auto table = worker.DeclareTable(TableSpec::Sparse("device-bench-sparse", dim));
  OkOrDie(table.status(), "declare sparse");
  Key* d_keys = ToDevice(keys);
  float* d_rows = ToDevice(rows);
  void* out_mem = nullptr;
  CUDA_OR_DIE(cudaMalloc(&out_mem, n * dim * sizeof(float)));
  float* d_out = static_cast<float*>(out_mem);
  std::vector<Key> h_keys(n);
  std::vector<float> h_rows(n * dim), h_out(n * dim);
  int pushes = 0;
  auto push_device = [&] {
    for (int i = 0; i < FLAGS_requests; ++i) {
      OkOrDie(worker.Wait(worker.PushSparseDevice(*table, d_keys, n, d_rows, n * dim, stream),
                          kWait),
              "PushSparseDevice");
      ++pushes;
    }
  };
  auto push_host = [&] {  // what a user does without the device path
    for (int i = 0; i < FLAGS_requests; ++i) {
      CUDA_OR_DIE(cudaMemcpyAsync(h_keys.data(), d_keys, n * sizeof(Key), cudaMemcpyDeviceToHost,
                                  stream));
      CUDA_OR_DIE(cudaMemcpyAsync(h_rows.data(), d_rows, n * dim * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
      CUDA_OR_DIE(cudaStreamSynchronize(stream));
      OkOrDie(worker.Wait(worker.PushSparse(*table, h_keys.data(), n, h_rows.data(), n * dim),
                          kWait),
              "PushSparse");
      ++pushes;
    }
  };
  const double keys_per_round = static_cast<double>(n) * FLAGS_requests;
  Report("sparse push (keys, 30% duplicates by default)", keys_per_round / 1e6, "M keys/s",
         TimeRoutes(push_device, push_host));

  // Every row is the sum of its key's rows in one request, times the pushes made.
  std::unordered_map<Key, std::vector<float>> expect;
  for (uint64_t i = 0; i < n; ++i) {
    auto& e = expect[keys[i]];
    e.resize(dim, 0.0f);
    for (uint32_t d = 0; d < dim; ++d) e[d] += rows[i * dim + d];
  }
  uint64_t bad = 0;
  auto check_pull = [&](const std::vector<float>& got, int times) {
    for (uint64_t i = 0; i < n; ++i) {
      const auto& e = expect[keys[i]];
      for (uint32_t d = 0; d < dim; ++d) bad += got[i * dim + d] != e[d] * times;
    }
  };
  auto pull_device = [&] {
    for (int i = 0; i < FLAGS_requests; ++i) {
      OkOrDie(worker.Wait(worker.PullSparseDevice(*table, d_keys, n, d_out, n * dim, stream),
                          kWait),
              "PullSparseDevice");
      CUDA_OR_DIE(cudaStreamSynchronize(stream));
    }
  };
  auto pull_host = [&] {
    for (int i = 0; i < FLAGS_requests; ++i) {
      CUDA_OR_DIE(cudaMemcpyAsync(h_keys.data(), d_keys, n * sizeof(Key), cudaMemcpyDeviceToHost,
                                  stream));
      CUDA_OR_DIE(cudaStreamSynchronize(stream));
      OkOrDie(worker.Wait(worker.PullSparse(*table, h_keys.data(), n, h_out.data(), n * dim),
                          kWait),
              "PullSparse");
      CUDA_OR_DIE(cudaMemcpyAsync(d_out, h_out.data(), n * dim * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
      CUDA_OR_DIE(cudaStreamSynchronize(stream));
    }
  };
  Report("sparse pull", keys_per_round / 1e6, "M keys/s", TimeRoutes(pull_device, pull_host));
  check_pull(h_out, pushes);  // the host route's last pull
  std::vector<float> dev_out(n * dim);
  CUDA_OR_DIE(cudaMemcpy(dev_out.data(), d_out, n * dim * sizeof(float), cudaMemcpyDeviceToHost));
  check_pull(dev_out, pushes);  // and the device route's, after it (the same values)

  // --- dense ------------------------------------------------------------------------------
  if (FLAGS_dense_elems > 0) {
    const uint64_t m = FLAGS_dense_elems;
    auto dense = worker.DeclareTable(TableSpec::Dense("device-bench-dense", m, UpdateRule::kSum));
    OkOrDie(dense.status(), "declare dense");
    std::vector<float> g(m), h_g(m), got(m);
    for (uint64_t i = 0; i < m; ++i) g[i] = static_cast<float>(i % 3 + 1);
    float* d_g = ToDevice(g);
    int dense_pushes = 0;
    auto dpush_device = [&] {
      for (int i = 0; i < FLAGS_requests; ++i) {
        OkOrDie(worker.Wait(worker.PushDevice(*dense, d_g, m, stream), kWait), "PushDevice");
        ++dense_pushes;
      }
    };
    auto dpush_host = [&] {
      for (int i = 0; i < FLAGS_requests; ++i) {
        CUDA_OR_DIE(cudaMemcpy(h_g.data(), d_g, m * sizeof(float), cudaMemcpyDeviceToHost));
        OkOrDie(worker.Wait(worker.Push(*dense, h_g.data(), m), kWait), "Push");
        ++dense_pushes;
      }
    };
    const double gb_per_round = static_cast<double>(m) * 4 * FLAGS_requests / 1e9;
    Report("dense push", gb_per_round, "GB/s", TimeRoutes(dpush_device, dpush_host));
    OkOrDie(worker.Wait(worker.Pull(*dense, got.data(), m), kWait), "Pull");
    for (uint64_t i = 0; i < m; ++i) bad += got[i] != g[i] * dense_pushes;
    CUDA_OR_DIE(cudaFree(d_g));
  }
  CUDA_OR_DIE(cudaFree(d_keys));
  CUDA_OR_DIE(cudaFree(d_rows));
  CUDA_OR_DIE(cudaFree(d_out));
  CUDA_OR_DIE(cudaStreamDestroy(stream));
  worker.Stop();
  scheduler.Join(std::chrono::seconds(30));
  for (auto& s : servers) s->Stop();
  scheduler.Stop();
  std::printf("values %s (%llu wrong)\n", bad == 0 ? "verified" : "WRONG",
              static_cast<unsigned long long>(bad));
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "the Worker's GPU path (PushSparseDevice/PullSparseDevice/PushDevice) against "
      "cudaMemcpy + the host call; exits 77 without a usable GPU");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_keys == 0 || FLAGS_dim < 1 || FLAGS_dim > 4096 || FLAGS_requests < 1 ||
      FLAGS_repeats < 1 || FLAGS_servers < 1 || !(FLAGS_duplicates >= 0 && FLAGS_duplicates < 1) ||
      FLAGS_key_space == 0) {
    std::fprintf(stderr, "layerps-device-bench: bad flags (see --help)\n");
    return 2;
  }
  return ps::Main();
}
