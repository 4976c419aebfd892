// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Benchmark of the GPU packing kernels against the CPU reference, in one run:
// coalesce+bucket of sparse gradients (uniform and Zipf keys), bucketing, pull-side
// scatter, dense fusion of many tensors, fp16/bf16 conversion. GPU times are CUDA-event
// medians after warm-up; CPU times are medians of the reference (worker/packing.h).
// Every GPU result is checked against the CPU reference before it is reported.
// Run with --help for the options.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/packing_cuda.h"
#include "test_inputs.h"
#include "worker/packing.h"

namespace {

using ps::Key;
using ps::pack::WireType;
namespace gpu = ps::pack::gpu;
namespace ti = ps::pack::testing_inputs;

struct Flags {
  size_t keys = 10000000;
  uint32_t dim = 16;
  uint64_t space = 100000000;
  double zipf_s = 1.05;
  size_t servers = 8;
  size_t tensors = 200;
  size_t tensor_elems = 65536;  // mean; lengths drawn in [1, 2*mean)
  size_t convert_elems = 100000000;
  int runs = 20;
  int warmup = 3;
  int cpu_runs = 3;
  bool cpu = true;
  uint64_t seed = 0;
  bool seed_set = false;
  std::string csv;
};

void Usage(const char* argv0) {
  std::printf(
      "Usage: %s [options]\n"
      "Benchmarks the LayerPS GPU packing kernels and the CPU reference in the same run.\n\n"
      "  --keys=N           sparse keys per push (default 10000000)\n"
      "  --dim=D            floats per sparse row (default 16)\n"
      "  --space=S          keys are drawn from [0, S) (default 100000000)\n"
      "  --zipf=E           Zipf exponent of the skewed key set (default 1.05)\n"
      "  --servers=B        buckets (servers) for bucketing (default 8)\n"
      "  --tensors=T        dense tensors fused per step (default 200)\n"
      "  --tensor-elems=E   mean tensor length in floats (default 65536)\n"
      "  --convert-elems=N  floats converted to fp16/bf16 (default 100000000)\n"
      "  --runs=R           timed GPU runs, median reported (default 20)\n"
      "  --warmup=W         untimed GPU runs first (default 3)\n"
      "  --cpu-runs=C       timed CPU reference runs (default 3)\n"
      "  --no-cpu           skip the CPU reference timing (results are still checked)\n"
      "  --seed=X           input seed (default: random, printed)\n"
      "  --csv=FILE         also write the table as CSV\n"
      "  --help             this text\n\n"
      "Columns: GPU ms (median), rate, bytes = the minimum bytes read + written by the\n"
      "operation, GB/s = bytes / GPU time, %%peak = GB/s over the device's theoretical\n"
      "memory bandwidth (from its memory clock and bus width), CPU ms, speedup.\n",
      argv0);
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name, std::string* out) {
      const std::string prefix = std::string("--") + name + "=";
      if (a.compare(0, prefix.size(), prefix) != 0) return false;
      *out = a.substr(prefix.size());
      return true;
    };
    std::string v;
    char* end = nullptr;
    auto num = [&](auto* dst) {
      *dst = static_cast<std::remove_pointer_t<decltype(dst)>>(std::strtod(v.c_str(), &end));
      return end != v.c_str() && *end == '\0';
    };
    bool ok = true;
    if (a == "--help" || a == "-h") {
      Usage(argv[0]);
      std::exit(0);
    } else if (a == "--no-cpu") {
      f->cpu = false;
    } else if (value("keys", &v)) {
      ok = num(&f->keys);
    } else if (value("dim", &v)) {
      ok = num(&f->dim) && f->dim > 0;
    } else if (value("space", &v)) {
      ok = num(&f->space) && f->space > 0;
    } else if (value("zipf", &v)) {
      ok = num(&f->zipf_s) && f->zipf_s > 0;
    } else if (value("servers", &v)) {
      ok = num(&f->servers) && f->servers > 0;
    } else if (value("tensors", &v)) {
      ok = num(&f->tensors) && f->tensors > 0;
    } else if (value("tensor-elems", &v)) {
      ok = num(&f->tensor_elems) && f->tensor_elems > 0;
    } else if (value("convert-elems", &v)) {
      ok = num(&f->convert_elems) && f->convert_elems > 0;
    } else if (value("runs", &v)) {
      ok = num(&f->runs) && f->runs > 0;
    } else if (value("warmup", &v)) {
      ok = num(&f->warmup) && f->warmup >= 0;
    } else if (value("cpu-runs", &v)) {
      ok = num(&f->cpu_runs) && f->cpu_runs > 0;
    } else if (value("seed", &v)) {
      f->seed = std::strtoull(v.c_str(), &end, 0);
      ok = end != v.c_str() && *end == '\0';
      f->seed_set = true;
    } else if (value("csv", &v)) {
      f->csv = v;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad argument: %s (see --help)\n", a.c_str());
      return false;
    }
  }
  if (f->keys >= (size_t{1} << 32)) {
    std::fprintf(stderr, "--keys must be < 2^32\n");
    return false;
  }
  return true;
}

#define CHECK_CUDA(expr)                                                 \
  do {                                                                   \
    const int check_cuda_err_ = static_cast<int>(expr);                  \
    if (check_cuda_err_ != 0) {                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   gpu::ErrorString(check_cuda_err_));                   \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) {
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)));
  }
  DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) {
    CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> Download(size_t n) const {
    std::vector<T> v(n);
    if (n) CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

// Median GPU milliseconds of `op` (enqueued on stream), by CUDA events.
double TimeGpu(const Flags& f, cudaStream_t stream, const std::function<void()>& op) {
  for (int i = 0; i < f.warmup; ++i) op();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < f.runs; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    op();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(ms);
}

double TimeCpu(const Flags& f, const std::function<void()>& op) {
  if (!f.cpu) return NAN;
  std::vector<double> ms;
  for (int i = 0; i < f.cpu_runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    op();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(ms);
}

struct Row {
  std::string name;
  double gpu_ms;
  double items;  // per second rate of these
  const char* unit;
  double bytes;
  double cpu_ms;
  bool checked;
};

struct Report {
  double peak_gbs = 0;
  double copy_gbs = 0;
  std::vector<Row> rows;
  bool all_ok = true;

  void Add(Row r) {
    all_ok = all_ok && r.checked;
    const double gbs = r.bytes / (r.gpu_ms * 1e-3) / 1e9;
    std::printf("%-34s %9.3f %9.2f %-7s %8.1f %8.0f %6.1f%% %10.1f %8.1fx  %s\n", r.name.c_str(),
                r.gpu_ms, r.items / (r.gpu_ms * 1e-3) / 1e9, r.unit, r.bytes / 1e6, gbs,
                100.0 * gbs / peak_gbs, r.cpu_ms, r.cpu_ms / r.gpu_ms,
                r.checked ? "ok" : "MISMATCH");
    std::fflush(stdout);
    rows.push_back(std::move(r));
  }

  void WriteCsv(const std::string& path) const {
    FILE* out = std::fopen(path.c_str(), "w");
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return;
    }
    std::fprintf(
        out, "name,gpu_ms,rate_g_per_s,unit,bytes,gb_per_s,peak_gb_per_s,cpu_ms,speedup,check\n");
    for (const Row& r : rows) {
      const double gbs = r.bytes / (r.gpu_ms * 1e-3) / 1e9;
      std::fprintf(out, "\"%s\",%.4f,%.4f,%s,%.0f,%.2f,%.2f,%.3f,%.2f,%s\n", r.name.c_str(),
                   r.gpu_ms, r.items / (r.gpu_ms * 1e-3) / 1e9, r.unit, r.bytes, gbs, peak_gbs,
                   r.cpu_ms, r.cpu_ms / r.gpu_ms, r.checked ? "ok" : "mismatch");
    }
    std::fclose(out);
  }
};

// Coalesce + bucket of one key set: the sparse push path.
void BenchCoalesceBucket(const Flags& f, cudaStream_t stream, Report* rep, const char* label,
                         const std::vector<Key>& keys, const std::vector<float>& rows,
                         int key_bits) {
  const size_t n = keys.size(), nb = f.servers;
  const uint32_t dim = f.dim;
  const auto begin = ti::EvenBuckets(nb);
  DeviceBuffer<Key> d_keys(keys), d_out_keys(n);
  DeviceBuffer<float> d_rows(rows), d_out_rows(n * dim);
  DeviceBuffer<uint32_t> d_inv(n);
  DeviceBuffer<uint64_t> d_begin(begin);
  DeviceBuffer<size_t> d_off(nb + 1);
  gpu::Workspace ws;
  const double ms = TimeGpu(f, stream, [&] {
    CHECK_CUDA(gpu::CoalesceAndBucket(d_keys.p, d_rows.p, n, dim, d_begin.p, nb, d_out_keys.p,
                                      d_out_rows.p, d_inv.p, d_off.p, &ws, stream, key_bits));
  });
  std::vector<Key> c_keys(n);
  std::vector<float> c_rows(n * dim);
  std::vector<uint32_t> c_inv(n);
  std::vector<size_t> c_off(nb + 1);
  size_t m = 0;
  const double cpu_ms = TimeCpu(f, [&] {
    m = ps::pack::CoalesceAndBucket(keys.data(), rows.data(), n, dim, begin.data(), nb,
                                    c_keys.data(), c_rows.data(), c_inv.data(), c_off.data());
  });
  if (!f.cpu) {
    m = ps::pack::CoalesceAndBucket(keys.data(), rows.data(), n, dim, begin.data(), nb,
                                    c_keys.data(), c_rows.data(), c_inv.data(), c_off.data());
  }
  const auto g_off = d_off.Download(nb + 1);
  const auto g_keys = d_out_keys.Download(n);
  const auto g_inv = d_inv.Download(n);
  const auto g_rows = d_out_rows.Download(n * dim);
  bool ok = g_off == c_off && std::equal(c_keys.begin(), c_keys.begin() + m, g_keys.begin()) &&
            g_inv == c_inv;
  if (ok) {
    // Sums agree within the rounding bound of the two orders: 2 gamma(k-1) sum|x|.
    std::vector<float> abs_rows(rows.size()), abs_sum(n * dim);
    for (size_t i = 0; i < rows.size(); ++i) abs_rows[i] = std::fabs(rows[i]);
    std::vector<Key> scratch_keys(n);
    std::vector<size_t> scratch_off(nb + 1);
    ps::pack::CoalesceAndBucket(keys.data(), abs_rows.data(), n, dim, begin.data(), nb,
                                scratch_keys.data(), abs_sum.data(), nullptr, scratch_off.data());
    std::vector<uint32_t> count(m, 0);
    for (uint32_t u : c_inv) ++count[u];
    for (size_t i = 0; ok && i < m * dim; ++i) {
      const double ku = (count[i / dim] - 1.0) * std::ldexp(1.0, -24);
      ok = std::fabs(double{g_rows[i]} - c_rows[i]) <= 2.0 * ku / (1.0 - ku) * abs_sum[i] * 1.01;
    }
  }
  const double bytes = 8.0 * n + 4.0 * n * dim + 8.0 * m + 4.0 * m * dim + 4.0 * n;
  char name[96];
  std::snprintf(name, sizeof(name), "coalesce+bucket %s b=%d (m=%zu)", label, key_bits, m);
  rep->Add({name, ms, static_cast<double>(n), "Gkey/s", bytes, cpu_ms, ok});
  const double rate = n / (ms * 1e-3);
  std::printf("  -> target (H100): >= 1 Gkey/s [%s], >= 20x CPU [%s]\n",
              rate >= 1e9 ? "met" : "MISSED",
              !f.cpu ? "not measured" : (cpu_ms / ms >= 20 ? "met" : "MISSED"));
}

void BenchBucketAndScatter(const Flags& f, cudaStream_t stream, Report* rep,
                           const std::vector<Key>& keys, const std::vector<float>& rows) {
  const size_t n = keys.size(), nb = f.servers;
  const uint32_t dim = f.dim;
  const auto begin = ti::EvenBuckets(nb);
  {
    DeviceBuffer<Key> d_keys(keys), d_out_keys(n);
    DeviceBuffer<float> d_rows(rows), d_out_rows(n * dim);
    DeviceBuffer<uint64_t> d_begin(begin);
    DeviceBuffer<size_t> d_off(nb + 1);
    gpu::Workspace ws;
    const double ms = TimeGpu(f, stream, [&] {
      CHECK_CUDA(gpu::Bucket(d_keys.p, d_rows.p, n, dim, d_begin.p, nb, d_out_keys.p, d_out_rows.p,
                             d_off.p, &ws, stream));
    });
    std::vector<Key> c_keys(n);
    std::vector<float> c_rows(n * dim);
    std::vector<size_t> c_off(nb + 1);
    auto cpu = [&] {
      ps::pack::Bucket(keys.data(), rows.data(), n, dim, begin.data(), nb, c_keys.data(),
                       c_rows.data(), c_off.data());
    };
    const double cpu_ms = TimeCpu(f, cpu);
    if (!f.cpu) cpu();
    const bool ok = d_off.Download(nb + 1) == c_off && d_out_keys.Download(n) == c_keys &&
                    d_out_rows.Download(n * dim) == c_rows;
    rep->Add({"bucket only (uniform)", ms, static_cast<double>(n), "Gkey/s",
              2.0 * (8.0 * n + 4.0 * n * dim), cpu_ms, ok});
  }
  {
    std::vector<Key> uniq(n);
    std::vector<uint32_t> inv(n);
    const size_t m = ps::pack::UniqueKeys(keys.data(), n, uniq.data(), inv.data());
    const std::vector<float> pulled(rows.begin(), rows.begin() + m * dim);
    DeviceBuffer<uint32_t> d_inv(inv);
    DeviceBuffer<float> d_pulled(pulled), d_out(n * dim);
    const double ms = TimeGpu(f, stream, [&] {
      CHECK_CUDA(gpu::ScatterRows(d_inv.p, n, d_pulled.p, dim, d_out.p, stream));
    });
    std::vector<float> c_out(n * dim);
    auto cpu = [&] { ps::pack::ScatterRows(inv.data(), n, pulled.data(), dim, c_out.data()); };
    const double cpu_ms = TimeCpu(f, cpu);
    if (!f.cpu) cpu();
    rep->Add({"scatter rows (pull)", ms, static_cast<double>(n), "Gkey/s", 4.0 * n + 8.0 * n * dim,
              cpu_ms, d_out.Download(n * dim) == c_out});
  }
}

void BenchFusion(const Flags& f, cudaStream_t stream, Report* rep, ti::Rng& rng) {
  std::vector<size_t> lens(f.tensors);
  for (auto& l : lens) l = 1 + rng.Below(2 * f.tensor_elems);
  std::vector<size_t> offsets(f.tensors + 1);
  const size_t total = ps::pack::FuseOffsets(lens.data(), f.tensors, offsets.data());
  const auto all = ti::MakeRows(rng, total);
  DeviceBuffer<float> d_all(all), d_back(total);
  DeviceBuffer<uint8_t> d_fused(total * 4);
  std::vector<const float*> d_srcs(f.tensors), h_srcs(f.tensors);
  std::vector<float*> d_dsts(f.tensors);
  for (size_t i = 0; i < f.tensors; ++i) {
    d_srcs[i] = d_all.p + offsets[i];
    d_dsts[i] = d_back.p + offsets[i];
    h_srcs[i] = all.data() + offsets[i];
  }
  for (WireType t : {WireType::kFloat32, WireType::kFloat16}) {
    const size_t wb = ps::pack::WireBytes(t);
    const char* tn = t == WireType::kFloat32 ? "fp32" : "fp16";
    std::vector<uint8_t> c_fused(total * wb);
    const double ms = TimeGpu(f, stream, [&] {
      CHECK_CUDA(gpu::Fuse(d_srcs.data(), lens.data(), f.tensors, t, d_fused.p, stream));
    });
    auto cpu = [&] { ps::pack::Fuse(h_srcs.data(), lens.data(), f.tensors, t, c_fused.data()); };
    const double cpu_ms = TimeCpu(f, cpu);
    if (!f.cpu) cpu();
    char name[96];
    std::snprintf(name, sizeof(name), "fuse %zu tensors -> %s", f.tensors, tn);
    rep->Add({name, ms, static_cast<double>(total), "Gelem/s", (4.0 + wb) * total, cpu_ms,
              d_fused.Download(total * wb) == c_fused});
    // And back (the pull side), from the buffer just checked.
    std::vector<float> c_back(total);
    std::vector<float*> h_dsts(f.tensors);
    for (size_t i = 0; i < f.tensors; ++i) h_dsts[i] = c_back.data() + offsets[i];
    const double ms2 = TimeGpu(f, stream, [&] {
      CHECK_CUDA(gpu::Unfuse(d_fused.p, t, d_dsts.data(), lens.data(), f.tensors, stream));
    });
    auto cpu2 = [&] { ps::pack::Unfuse(c_fused.data(), t, h_dsts.data(), lens.data(), f.tensors); };
    const double cpu_ms2 = TimeCpu(f, cpu2);
    if (!f.cpu) cpu2();
    std::snprintf(name, sizeof(name), "unfuse %s -> %zu tensors", tn, f.tensors);
    rep->Add({name, ms2, static_cast<double>(total), "Gelem/s", (4.0 + wb) * total, cpu_ms2,
              d_back.Download(total) == c_back});
  }
}

void BenchConversion(const Flags& f, cudaStream_t stream, Report* rep, ti::Rng& rng) {
  const size_t n = f.convert_elems;
  const auto in = ti::MakeRows(rng, n);
  DeviceBuffer<float> d_in(in), d_back(n);
  DeviceBuffer<uint16_t> d_wire(n);
  for (WireType t : {WireType::kFloat16, WireType::kBFloat16}) {
    const char* tn = t == WireType::kFloat16 ? "fp16" : "bf16";
    std::vector<uint16_t> c_wire(n);
    const double ms =
        TimeGpu(f, stream, [&] { CHECK_CUDA(gpu::ToWire(d_in.p, n, t, d_wire.p, stream)); });
    auto cpu = [&] { ps::pack::ToWire(in.data(), n, t, c_wire.data()); };
    const double cpu_ms = TimeCpu(f, cpu);
    if (!f.cpu) cpu();
    char name[96];
    std::snprintf(name, sizeof(name), "fp32 -> %s", tn);
    rep->Add({name, ms, static_cast<double>(n), "Gelem/s", 6.0 * n, cpu_ms,
              d_wire.Download(n) == c_wire});
    std::vector<float> c_back(n);
    const double ms2 =
        TimeGpu(f, stream, [&] { CHECK_CUDA(gpu::FromWire(d_wire.p, n, t, d_back.p, stream)); });
    auto cpu2 = [&] { ps::pack::FromWire(c_wire.data(), n, t, c_back.data()); };
    const double cpu_ms2 = TimeCpu(f, cpu2);
    if (!f.cpu) cpu2();
    std::snprintf(name, sizeof(name), "%s -> fp32", tn);
    rep->Add({name, ms2, static_cast<double>(n), "Gelem/s", 6.0 * n, cpu_ms2,
              d_back.Download(n) == c_back});
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  if (!gpu::DeviceAvailable()) {
    std::fprintf(stderr, "packing_cuda_bench: no CUDA device on this machine; nothing to run\n");
    return 1;
  }
  if (!f.seed_set) f.seed = ti::SeedFromEnvOrRandom();
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  int mem_clock_khz = 0, bus_bits = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
  CHECK_CUDA(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  Report rep;
  rep.peak_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // double data rate

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {  // Measured device-to-device copy, for comparison with the theoretical peak.
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer<uint8_t> a(bytes), b(bytes);
    const double ms = TimeGpu(f, stream, [&] {
      CHECK_CUDA(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    rep.copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  }
  std::printf(
      "device: %s (sm_%d%d, %d SMs), memory bandwidth: %.0f GB/s theoretical, %.0f GB/s "
      "measured by cudaMemcpy D2D\n",
      prop.name, prop.major, prop.minor, prop.multiProcessorCount, rep.peak_gbs, rep.copy_gbs);
  std::printf(
      "seed=%llu keys=%zu dim=%u space=%llu zipf=%.2f servers=%zu runs=%d warmup=%d "
      "cpu-runs=%d\n\n",
      static_cast<unsigned long long>(f.seed), f.keys, f.dim,
      static_cast<unsigned long long>(f.space), f.zipf_s, f.servers, f.runs, f.warmup, f.cpu_runs);
  std::printf("%-34s %9s %9s %-7s %8s %8s %7s %10s %9s  %s\n", "operation", "GPU ms", "rate",
              "unit", "MB", "GB/s", "%peak", "CPU ms", "speedup", "check");

  ti::Rng rng(f.seed);
  int space_bits = 1;
  while (space_bits < 64 && (f.space - 1) >> space_bits) ++space_bits;
  {
    const auto keys = ti::MakeKeys(rng, f.keys, ti::KeyDist::kUniform, f.space);
    const auto rows = ti::MakeRows(rng, f.keys * f.dim);
    BenchCoalesceBucket(f, stream, &rep, "uniform", keys, rows, 64);
    BenchCoalesceBucket(f, stream, &rep, "uniform", keys, rows, space_bits);
    BenchBucketAndScatter(f, stream, &rep, keys, rows);
  }
  {
    const auto keys = ti::MakeKeys(rng, f.keys, ti::KeyDist::kZipf, f.space, f.zipf_s);
    const auto rows = ti::MakeRows(rng, f.keys * f.dim);
    BenchCoalesceBucket(f, stream, &rep, "zipf", keys, rows, 64);
    BenchCoalesceBucket(f, stream, &rep, "zipf", keys, rows, space_bits);
  }
  BenchFusion(f, stream, &rep, rng);
  BenchConversion(f, stream, &rep, rng);
  CHECK_CUDA(cudaStreamDestroy(stream));
  if (!f.csv.empty()) rep.WriteCsv(f.csv);
  if (!rep.all_ok) {
    std::fprintf(stderr, "some GPU results differ from the CPU reference\n");
    return 1;
  }
  return 0;
}
