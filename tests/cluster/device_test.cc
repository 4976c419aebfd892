// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The Worker's GPU-memory calls. Without a usable GPU they must fail cleanly with
// FailedPrecondition and change nothing; with one (CUDA builds on a GPU machine) the
// values that go through device memory must equal those of the host path exactly.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include "local_cluster.h"

#if LAYERPS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

TEST(DeviceTest, WithoutAGpuTheCallsFailCleanly) {
  if (Worker::DeviceSupport()) GTEST_SKIP() << "a GPU is usable here; the GPU tests cover it";
  LocalCluster c(2, 1, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto d = w.DeclareTable(TableSpec::Dense("d", 8));
  auto s = w.DeclareTable(TableSpec::Sparse("s", 2));
  ASSERT_TRUE(d.ok() && s.ok());
  std::vector<float> v(8, 1.0f);
  Key k[2] = {1, 2};
  EXPECT_EQ(w.Wait(w.PushDevice(*d, v.data(), 8, nullptr), 5s).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Wait(w.PullDevice(*d, v.data(), 8, nullptr), 5s).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Wait(w.PushSparseDevice(*s, k, 2, v.data(), 4, nullptr), 5s).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Wait(w.PullSparseDevice(*s, k, 2, v.data(), 4, nullptr), 5s).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Wait(w.PushSparseManyDevice({{*s, k, 2, v.data(), 4}}, nullptr), 5s).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Wait(w.PullSparseManyDevice({{*s, k, 2, v.data(), 4}}, nullptr), 5s).code(),
            StatusCode::kFailedPrecondition);
  std::vector<float> out(8, -1.0f);
  ASSERT_TRUE(w.Wait(w.Pull(*d, out.data(), 8), 5s).ok());
  for (float x : out) EXPECT_EQ(x, 0.0f);  // nothing was pushed
  EXPECT_TRUE(c.Finish().ok());
}

TEST(DeviceTest, WithoutAGpuPinnedStagesFailCleanly) {
  if (Worker::DeviceSupport()) GTEST_SKIP() << "a GPU is usable here; the GPU tests cover it";
  float v[4] = {1, 2, 3, 4};
  const StatusOr<PinnedStage> a = PinnedStage::Allocate(16);
  EXPECT_EQ(a.status().code(), StatusCode::kFailedPrecondition) << a.status();
  const StatusOr<PinnedStage> d = PinnedStage::FromDevice(v, sizeof(v), nullptr);
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition) << d.status();
  // The message says why: no CUDA in the build, or no device the runtime can use.
  EXPECT_TRUE(d.status().message().find("CUDA") != std::string::npos) << d.status();
  const Status c = CopyHostToDevice(v, sizeof(v), v, nullptr);
  EXPECT_EQ(c.code(), StatusCode::kFailedPrecondition) << c;
}

#if LAYERPS_HAVE_CUDA

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T) + 1), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> ToHost(const T* device, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

TEST(DeviceTest, DensePushPullThroughGpuMemory) {
  if (!Worker::DeviceSupport()) GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped";
  Options o = testing::FastOptions();
  o.dense_chunk_elems = 1000;
  LocalCluster c(3, 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const size_t n = 100003;
  auto d = w.DeclareTable(TableSpec::Dense("dev", n));
  ASSERT_TRUE(d.ok());
  std::mt19937 rng(5);
  std::vector<float> g(n);
  for (auto& x : g) x = static_cast<float>(static_cast<int>(rng() % 21) - 10);
  float* dg = ToDevice(g);
  float* dout = ToDevice(std::vector<float>(n, std::nanf("")));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE(w.Wait(w.PushDevice(*d, dg, n, stream), 30s).ok());
  ASSERT_TRUE(w.Wait(w.PushDevice(*d, dg, n, stream), 30s).ok());
  ASSERT_TRUE(w.Wait(w.PullDevice(*d, dout, n, stream), 30s).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> out = ToHost(dout, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * g[i]) << i;
  EXPECT_EQ(w.Wait(w.PushDevice(*d, dg, n - 1, stream), 30s).code(), StatusCode::kInvalidArgument);
  cudaFree(dg);
  cudaFree(dout);
  cudaStreamDestroy(stream);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(DeviceTest, SparsePushPullThroughGpuMemory) {
  if (!Worker::DeviceSupport()) GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped";
  LocalCluster c(2, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  for (uint32_t dim : {1u, 16u, 129u}) {
    auto s = w.DeclareTable(TableSpec::Sparse("dev_s" + std::to_string(dim), dim));
    ASSERT_TRUE(s.ok());
    std::mt19937_64 rng(dim);
    const size_t n = 20001;
    std::vector<Key> keys(n);
    std::vector<float> rows(n * dim);
    std::map<Key, std::vector<float>> want;
    for (size_t i = 0; i < n; ++i) {
      keys[i] = rng() % 3000;  // duplicates
      auto& acc = want[keys[i]];
      acc.resize(dim);
      for (uint32_t j = 0; j < dim; ++j) {
        rows[i * dim + j] = static_cast<float>(static_cast<int>(rng() % 9) - 4);
        acc[j] += rows[i * dim + j];
      }
    }
    Key* dkeys = ToDevice(keys);
    float* drows = ToDevice(rows);
    float* dout = ToDevice(std::vector<float>(n * dim, std::nanf("")));
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ASSERT_TRUE(w.Wait(w.PushSparseDevice(*s, dkeys, n, drows, n * dim, stream), 30s).ok());
    ASSERT_TRUE(w.Wait(w.PullSparseDevice(*s, dkeys, n, dout, n * dim, stream), 30s).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> out = ToHost(dout, n * dim);
    for (size_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < dim; ++j)
        ASSERT_EQ(out[i * dim + j], want[keys[i]][j]) << "key " << keys[i];
    }
    cudaFree(dkeys);
    cudaFree(drows);
    cudaFree(dout);
    cudaStreamDestroy(stream);
  }
  EXPECT_TRUE(c.Finish().ok());
}

// Several tables in one request from GPU memory: the same rows as the host calls, one
// fused message per server, and a bad entry refused before anything is copied.
TEST(DeviceTest, SparseManyThroughGpuMemory) {
  if (!Worker::DeviceSupport()) GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped";
  LocalCluster c(2, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const std::vector<uint32_t> dims = {4, 16, 1};
  std::vector<TableId> tables;
  for (uint32_t dim : dims) {
    auto s = w.DeclareTable(TableSpec::Sparse("many_s" + std::to_string(dim), dim));
    ASSERT_TRUE(s.ok());
    tables.push_back(*s);
  }
  std::mt19937_64 rng(7);
  const size_t n = 3001;
  std::vector<std::vector<Key>> keys(dims.size());
  std::vector<std::vector<float>> rows(dims.size());
  std::vector<std::map<Key, std::vector<float>>> want(dims.size());
  std::vector<Key*> dkeys;
  std::vector<float*> drows, douts;
  std::vector<SparseRef> push;
  std::vector<SparseOut> pull;
  for (size_t t = 0; t < dims.size(); ++t) {
    const uint32_t dim = dims[t];
    keys[t].resize(n);
    rows[t].resize(n * dim);
    for (size_t i = 0; i < n; ++i) {
      keys[t][i] = rng() % 500;  // duplicates
      auto& acc = want[t][keys[t][i]];
      acc.resize(dim);
      for (uint32_t j = 0; j < dim; ++j) {
        rows[t][i * dim + j] = static_cast<float>(static_cast<int>(rng() % 9) - 4);
        acc[j] += rows[t][i * dim + j];
      }
    }
    dkeys.push_back(ToDevice(keys[t]));
    drows.push_back(ToDevice(rows[t]));
    douts.push_back(ToDevice(std::vector<float>(n * dim, std::nanf(""))));
    push.push_back({tables[t], dkeys[t], n, drows[t], n * dim});
    pull.push_back({tables[t], dkeys[t], n, douts[t], n * dim});
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const auto sent_to = [&w](NodeId peer) {
    const TrafficStats t = w.traffic();
    auto it = t.peers.find(peer);
    return it == t.peers.end() ? uint64_t{0} : it->second.messages_sent;
  };
  std::map<NodeId, uint64_t> before;
  for (int i = 0; i < c.num_servers(); ++i) before[c.server(i).id()] = sent_to(c.server(i).id());
  ASSERT_TRUE(w.Wait(w.PushSparseManyDevice(push, stream), 30s).ok());
  for (const auto& kv : before)
    EXPECT_EQ(sent_to(kv.first) - kv.second, 1u) << "one fused message to server " << kv.first;
  ASSERT_TRUE(w.Wait(w.PullSparseManyDevice(pull, stream), 30s).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t t = 0; t < dims.size(); ++t) {
    std::vector<float> out = ToHost(douts[t], n * dims[t]);
    for (size_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < dims[t]; ++j)
        ASSERT_EQ(out[i * dims[t] + j], want[t][keys[t][i]][j]) << "table " << t << " key " << keys[t][i];
    }
  }
  push[1].rows_len -= 1;
  const Status bad = w.Wait(w.PushSparseManyDevice(push, stream), 30s);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("entry 1"), std::string::npos) << bad;
  for (size_t t = 0; t < dims.size(); ++t) {
    cudaFree(dkeys[t]);
    cudaFree(drows[t]);
    cudaFree(douts[t]);
  }
  cudaStreamDestroy(stream);
  EXPECT_TRUE(c.Finish().ok());
}

// A table with wire_dtype fp16/bf16: the device path narrows pushes on the GPU (bit-identical
// to the host path's conversion) and the values are those of the host path exactly; the
// table's payload bytes are half of float32's.
TEST(DeviceTest, NarrowedTablesThroughGpuMemory) {
  if (!Worker::DeviceSupport()) GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped";
  Options o = testing::FastOptions();
  o.dense_chunk_elems = 1000;
  LocalCluster c(2, 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (WireDType wire : {WireDType::kFloat16, WireDType::kBFloat16}) {
    const std::string suffix = WireDTypeName(wire);
    const size_t n = 100003;
    TableSpec spec = TableSpec::Dense("dev_" + suffix, n);
    spec.wire_dtype = wire;
    auto dev = w.DeclareTable(spec);
    spec.name = "host_" + suffix;
    auto host = w.DeclareTable(spec);
    ASSERT_TRUE(dev.ok() && host.ok());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    std::vector<float> g(n);
    for (auto& x : g) x = u(rng);
    float* dg = ToDevice(g);
    float* dout = ToDevice(std::vector<float>(n, std::nanf("")));
    ASSERT_TRUE(w.Wait(w.PushDevice(*dev, dg, n, stream), 30s).ok());
    ASSERT_TRUE(w.Wait(w.PushDevice(*dev, dg, n, stream), 30s).ok());
    ASSERT_TRUE(w.Wait(w.Push(*host, g.data(), n), 30s).ok());
    ASSERT_TRUE(w.Wait(w.Push(*host, g.data(), n), 30s).ok());
    ASSERT_TRUE(w.Wait(w.PullDevice(*dev, dout, n, stream), 30s).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> out = ToHost(dout, n), want(n);
    ASSERT_TRUE(w.Wait(w.Pull(*host, want.data(), n), 30s).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], want[i]) << suffix << " " << i;
    TrafficStats tr = w.traffic();
    EXPECT_EQ(tr.tables[*dev].bytes_sent, 2 * n * 2);
    EXPECT_EQ(tr.tables[*dev].bytes_received, n * 2);
    cudaFree(dg);
    cudaFree(dout);

    // Sparse, small integer rows with duplicates (exact in both wire types).
    TableSpec sspec = TableSpec::Sparse("dev_s_" + suffix, 16);
    sspec.wire_dtype = wire;
    auto sp = w.DeclareTable(sspec);
    ASSERT_TRUE(sp.ok());
    const size_t nk = 20001;
    std::vector<Key> keys(nk);
    std::vector<float> rows(nk * 16);
    std::map<Key, std::vector<float>> sums;
    std::mt19937_64 r64(3);
    for (size_t i = 0; i < nk; ++i) {
      keys[i] = r64() % 3000;
      auto& acc = sums[keys[i]];
      acc.resize(16);
      for (uint32_t j = 0; j < 16; ++j) {
        rows[i * 16 + j] = static_cast<float>(static_cast<int>(r64() % 9) - 4);
        acc[j] += rows[i * 16 + j];
      }
    }
    Key* dkeys = ToDevice(keys);
    float* drows = ToDevice(rows);
    float* dsout = ToDevice(std::vector<float>(nk * 16, std::nanf("")));
    ASSERT_TRUE(w.Wait(w.PushSparseDevice(*sp, dkeys, nk, drows, nk * 16, stream), 30s).ok());
    ASSERT_TRUE(w.Wait(w.PullSparseDevice(*sp, dkeys, nk, dsout, nk * 16, stream), 30s).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> sout = ToHost(dsout, nk * 16);
    for (size_t i = 0; i < nk; ++i) {
      for (uint32_t j = 0; j < 16; ++j)
        ASSERT_EQ(sout[i * 16 + j], sums[keys[i]][j]) << suffix << " key " << keys[i];
    }
    cudaFree(dkeys);
    cudaFree(drows);
    cudaFree(dsout);
  }
  cudaStreamDestroy(stream);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(DeviceTest, AllReduceOfGpuMemoryThroughAPinnedStage) {
  if (!Worker::DeviceSupport()) GTEST_SKIP() << "no CUDA device on this machine: GPU test skipped";
  LocalCluster c(1, 2, "tcp");
  ASSERT_TRUE(c.Start().ok());
  const size_t n = 300007;
  std::vector<std::thread> members;
  std::vector<Status> results(2);
  std::vector<std::vector<float>> got(2);
  for (int r = 0; r < 2; ++r) {
    members.emplace_back([&, r] {
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i % 7) + r);
      float* dev = ToDevice(host);
      cudaStream_t stream;
      cudaStreamCreate(&stream);
      StatusOr<PinnedStage> st = PinnedStage::FromDevice(dev, n * sizeof(float), stream);
      results[r] = st.status();
      if (st.ok()) {
        AllReduceOptions o;
        o.timeout = 30s;
        float* p = static_cast<float*>(st->data());
        results[r] = c.worker(r).communicator().AllReduce(p, p, n, DataType::kFloat32, o);
        if (results[r].ok()) results[r] = st->ToDevice(dev, n * sizeof(float), stream);
      }
      cudaStreamSynchronize(stream);
      got[r] = ToHost(dev, n);
      cudaFree(dev);
      cudaStreamDestroy(stream);
    });
  }
  for (auto& t : members) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r];
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[r][i], static_cast<float>(2 * (i % 7) + 1)) << i;
  }
  EXPECT_TRUE(c.Finish().ok());
}

#endif  // LAYERPS_HAVE_CUDA

}  // namespace
}  // namespace ps
