// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// In-process cluster tests: scheduler, servers and workers as objects of this process.
// Every result is compared exactly with a reference computed here (pushed values are
// small integers, so float sums are exact in any order).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "common/hash.h"
#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::FastOptions;
using testing::LocalCluster;

constexpr auto kWait = 60s;

// The value worker `w` pushes at element i: a small integer, distinct per worker.
float DenseGrad(int w, uint64_t i) {
  return static_cast<float>(static_cast<int>((i * 31 + w * 7) % 17) - 8);
}

struct Shape {
  int servers;
  int workers;
  std::string transport;
};

// How gtest names a Shape in its output (instead of its raw bytes).
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.servers << " server(s) x " << s.workers << " worker(s) over " << s.transport;
}

class ClusterTest : public ::testing::TestWithParam<Shape> {};

// Every worker pushes its gradient into sum tables of several sizes (odd ones included,
// and ones spanning several chunks and servers); everyone then pulls the exact sum.
TEST_P(ClusterTest, DenseSumOfAllWorkers) {
  const Shape p = GetParam();
  Options o = FastOptions();
  o.dense_chunk_elems = 1000;  // small chunks: tables spread over every server
  LocalCluster c(p.servers, p.workers, p.transport, o);
  ASSERT_TRUE(c.Start().ok());
  const std::vector<uint64_t> sizes = {1, 7, 999, 1000, 1001, 65537, 1000003};
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    std::vector<TableId> ids;
    for (uint64_t n : sizes) {
      auto id = w.DeclareTable(TableSpec::Dense("dense" + std::to_string(n), n));
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    std::vector<std::vector<float>> grads;
    std::vector<Ticket> tickets;
    for (size_t t = 0; t < sizes.size(); ++t) {
      grads.emplace_back(sizes[t]);
      for (uint64_t i = 0; i < sizes[t]; ++i) grads.back()[i] = DenseGrad(r, i);
      tickets.push_back(w.Push(ids[t], grads.back().data(), sizes[t]));
    }
    for (Ticket tk : tickets) ASSERT_TRUE(w.Wait(tk, kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> out(sizes[t], -12345.0f);
      ASSERT_TRUE(w.Wait(w.Pull(ids[t], out.data(), out.size()), kWait).ok());
      for (uint64_t i = 0; i < sizes[t]; ++i) {
        float want = 0;
        for (int k = 0; k < p.workers; ++k) want += DenseGrad(k, i);
        ASSERT_EQ(out[i], want) << "table " << sizes[t] << " element " << i;
      }
    }
  });
  EXPECT_TRUE(c.Finish().ok());
}

// Sparse pushes with many duplicate keys (coalesced by the worker) from every worker;
// pulls (with duplicates and never-pushed keys) return the exact per-key sums.
TEST_P(ClusterTest, SparseSumWithDuplicates) {
  const Shape p = GetParam();
  LocalCluster c(p.servers, p.workers, p.transport);
  ASSERT_TRUE(c.Start().ok());
  const uint32_t dim = 3;
  // Reference: what every worker pushes, computed up front.
  std::vector<std::vector<Key>> keys(p.workers);
  std::vector<std::vector<float>> rows(p.workers);
  std::map<Key, std::vector<float>> want;
  for (int r = 0; r < p.workers; ++r) {
    std::mt19937_64 rng(100 + r);
    for (int i = 0; i < 5000; ++i) {
      const Key k = (rng() % 700) * 0x9E3779B97F4A7C15ull;  // 700 distinct ids, many repeats
      keys[r].push_back(k);
      auto& acc = want[k];
      acc.resize(dim);
      for (uint32_t j = 0; j < dim; ++j) {
        const float v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
        rows[r].push_back(v);
        acc[j] += v;
      }
    }
  }
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    auto id = w.DeclareTable(TableSpec::Sparse("emb", dim));
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE(
        w.Wait(w.PushSparse(*id, keys[r].data(), keys[r].size(), rows[r].data(), rows[r].size()),
               kWait)
            .ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    std::vector<Key> q = keys[(r + 1) % p.workers];
    q.push_back(q.front());  // a duplicate
    q.push_back(123456789);  // never pushed: zeros
    std::vector<float> out(q.size() * dim, -1.0f);
    ASSERT_TRUE(w.Wait(w.PullSparse(*id, q.data(), q.size(), out.data(), out.size()), kWait).ok());
    for (size_t i = 0; i < q.size(); ++i) {
      auto it = want.find(q[i]);
      for (uint32_t j = 0; j < dim; ++j) {
        const float expect = it == want.end() ? 0.0f : it->second[j];
        ASSERT_EQ(out[i * dim + j], expect) << "key " << q[i] << " col " << j;
      }
    }
    // An empty key list is a valid request.
    ASSERT_TRUE(w.Wait(w.PushSparse(*id, nullptr, 0, nullptr, 0), kWait).ok());
    ASSERT_TRUE(w.Wait(w.PullSparse(*id, nullptr, 0, nullptr, 0), kWait).ok());
  });
  EXPECT_TRUE(c.Finish().ok());
}

// SGD, PushPull and Assign: values after each step are exactly what x -= lr * sum(g) gives.
TEST_P(ClusterTest, SgdPushPullAndAssign) {
  const Shape p = GetParam();
  Options o = FastOptions();
  o.dense_chunk_elems = 64;
  LocalCluster c(p.servers, p.workers, p.transport, o);
  ASSERT_TRUE(c.Start().ok());
  const uint64_t n = 1000;
  TableSpec spec = TableSpec::Dense("sgd", n, UpdateRule::kSgd);
  spec.learning_rate = 0.5f;
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    auto id = w.DeclareTable(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    if (r == 0) {
      std::vector<float> init(n);
      for (uint64_t i = 0; i < n; ++i) init[i] = static_cast<float>(i);
      ASSERT_TRUE(w.Wait(w.Assign(*id, init.data(), n), kWait).ok());
    }
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    std::vector<float> g(n, 2.0f), out(n);
    ASSERT_TRUE(w.Wait(w.PushPull(*id, g.data(), out.data(), n), kWait).ok());
    // The reply reflects at least this worker's push.
    for (uint64_t i = 0; i < n; ++i) ASSERT_LE(out[i], static_cast<float>(i) - 1.0f);
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    ASSERT_TRUE(w.Wait(w.Pull(*id, out.data(), n), kWait).ok());
    for (uint64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[i], static_cast<float>(i) - 1.0f * p.workers) << i;
  });
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClusterTest,
                         ::testing::Values(Shape{1, 1, "tcp"}, Shape{1, 2, "tcp"},
                                           Shape{1, 4, "tcp"}, Shape{2, 1, "tcp"},
                                           Shape{2, 2, "inproc"}, Shape{2, 4, "tcp"},
                                           Shape{3, 1, "inproc"}, Shape{3, 2, "tcp"},
                                           Shape{3, 4, "inproc"}, Shape{2, 2, "ipc"}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.servers) + "s" +
                                  std::to_string(i.param.workers) + "w_" + i.param.transport;
                         });

// 16M elements (64 MiB) through push and pull, over 1 and 3 servers.
class LargeDenseTest : public ::testing::TestWithParam<int> {};
TEST_P(LargeDenseTest, SixteenMillionElements) {
  LocalCluster c(GetParam(), 2, "tcp");
  ASSERT_TRUE(c.Start().ok());
  const uint64_t n = 16u << 20;
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    auto id = w.DeclareTable(TableSpec::Dense("big", n));
    ASSERT_TRUE(id.ok());
    std::vector<float> g(n);
    for (uint64_t i = 0; i < n; ++i) g[i] = DenseGrad(r, i);
    ASSERT_TRUE(w.Wait(w.Push(*id, g.data(), n), kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    std::vector<float> out(n);
    ASSERT_TRUE(w.Wait(w.Pull(*id, out.data(), n), kWait).ok());
    for (uint64_t i = 0; i < n; ++i) {
      if (out[i] != DenseGrad(0, i) + DenseGrad(1, i)) FAIL() << "element " << i;
    }
  });
  EXPECT_TRUE(c.Finish().ok());
}
INSTANTIATE_TEST_SUITE_P(Servers, LargeDenseTest, ::testing::Values(1, 3));

// One million random 64-bit keys through a push and a pull.
TEST(SparseScaleTest, OneMillionRandomKeys) {
  LocalCluster c(3, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto id = w.DeclareTable(TableSpec::Sparse("big_emb", 2));
  ASSERT_TRUE(id.ok());
  std::mt19937_64 rng(2024);
  std::vector<Key> keys(1000000);
  for (auto& k : keys) k = rng();
  std::vector<float> rows(keys.size() * 2);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 1000);
  ASSERT_TRUE(
      w.Wait(w.PushSparse(*id, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
  std::vector<float> out(rows.size(), -1.0f);
  ASSERT_TRUE(
      w.Wait(w.PullSparse(*id, keys.data(), keys.size(), out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out, rows);  // 1M random 64-bit keys: duplicates are (almost surely) absent
  uint64_t held = 0;
  for (int s = 0; s < 3; ++s) {
    held += c.server(s).stats().sparse_rows;
    EXPECT_GT(c.server(s).stats().sparse_rows, 250000u) << "server " << s << " got too few rows";
  }
  EXPECT_EQ(held, 1000000u);
  EXPECT_TRUE(c.Finish().ok());
}

// One Worker shared by several threads: every push lands exactly once.
TEST(WorkerThreadsTest, ConcurrentUseOfOneWorker) {
  LocalCluster c(2, 1, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto dense = w.DeclareTable(TableSpec::Dense("shared", 5000));
  auto sparse = w.DeclareTable(TableSpec::Sparse("shared_e", 4));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  const int threads = 4, rounds = 50;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<float> g(5000, 1.0f);
      std::vector<Key> keys = {Key(t), 1000, 2000};
      std::vector<float> rows(12, 1.0f);
      for (int i = 0; i < rounds; ++i) {
        Ticket a = w.Push(*dense, g.data(), g.size());
        Ticket b = w.PushSparse(*sparse, keys.data(), keys.size(), rows.data(), rows.size());
        EXPECT_TRUE(w.Wait(a, kWait).ok());
        Status sb = w.Wait(b, kWait);
        EXPECT_TRUE(sb.ok()) << sb;
      }
    });
  }
  for (auto& t : ts) t.join();
  std::vector<float> out(5000);
  ASSERT_TRUE(w.Wait(w.Pull(*dense, out.data(), out.size()), kWait).ok());
  for (float v : out) ASSERT_EQ(v, threads * rounds);
  std::vector<Key> keys = {0, 1, 1000};
  std::vector<float> rows(12);
  ASSERT_TRUE(
      w.Wait(w.PullSparse(*sparse, keys.data(), keys.size(), rows.data(), rows.size()), kWait)
          .ok());
  EXPECT_EQ(rows[0], rounds);
  EXPECT_EQ(rows[4], rounds);
  EXPECT_EQ(rows[8], threads * rounds);
  EXPECT_TRUE(c.Finish().ok());
}

TEST(CallbackTest, CallbackRunsOnceAndReleasesTheTicket) {
  LocalCluster c(2, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const size_t n = 100000;  // 400 KB: sent in place, so completion waits for the transport
  auto id = w.DeclareTable(TableSpec::Dense("cb", n));
  ASSERT_TRUE(id.ok());
  std::vector<float> g(n, 3.0f), out(n);
  std::promise<Status> done;
  std::atomic<int> calls{0};
  Ticket t = w.PushPull(*id, g.data(), out.data(), n, [&](const Status& s) {
    ++calls;
    done.set_value(s);
  });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
  EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(out[n - 1], 3.0f);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(w.Wait(t, 1s).code(), StatusCode::kNotFound);
  // Errors reach callbacks too.
  std::promise<Status> err;
  w.Push(kInvalidTable - 1, g.data(), n, [&](const Status& s) { err.set_value(s); });
  EXPECT_EQ(err.get_future().get().code(), StatusCode::kNotFound);
  EXPECT_TRUE(c.Finish().ok());
}

// Flush waits for every push, pull and assign started before it, whether its ticket was
// waited for or not, and leaves the tickets valid; peer receives are not waited for.
// A Flush that starts while a request's callback is running waits for the callback to
// return: the request stays tracked until then (it used to leave the tracked set before
// its callback ran, and such a Flush returned at once).
TEST(FlushTest, WaitsForACallbackThatIsRunning) {
  LocalCluster c(1, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto id = w.DeclareTable(TableSpec::Dense("flush-running", 16, UpdateRule::kSum));
  ASSERT_TRUE(id.ok());
  std::vector<float> g(16, 1.0f);
  std::atomic<bool> started{false};
  std::atomic<int> finished{0};
  w.Push(*id, g.data(), g.size(), [&](const Status&) {
    started = true;
    std::this_thread::sleep_for(300ms);
    ++finished;
  });
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (!started && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(started) << "the push's callback never ran";
  ASSERT_TRUE(w.Flush(kWait).ok());
  EXPECT_EQ(finished.load(), 1) << "Flush returned while the callback was still running";
}

TEST(FlushTest, WaitsForEveryRequestStartedBeforeIt) {
  LocalCluster c(2, 2, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w0 = c.worker(0);
  Worker& w1 = c.worker(1);
  const size_t n = 1 << 20;  // 4 MiB per push: many of them are in flight at once
  auto id = w0.DeclareTable(TableSpec::Dense("flush", n, UpdateRule::kSum));
  TableSpec bsp = TableSpec::Dense("flush-bsp", 8, UpdateRule::kSum);
  bsp.sync = SyncMode::kBsp;
  auto held = w0.DeclareTable(bsp);
  ASSERT_TRUE(id.ok() && held.ok());
  ASSERT_TRUE(w1.DeclareTable(bsp).ok());
  std::vector<float> g(n, 1.0f);
  std::vector<Ticket> tickets;
  std::atomic<int> callbacks{0};
  for (int i = 0; i < 24; ++i) tickets.push_back(w0.Push(*id, g.data(), n));
  // A slow callback: Flush returns only once it has returned, not at the reply.
  w0.Push(*id, g.data(), n, [&](const Status& s) {
    std::this_thread::sleep_for(100ms);
    callbacks += s.ok() ? 1 : 100;
  });
  // A receive nobody sends to: Flush does not wait for it.
  std::vector<float> never(4);
  const Ticket recv = w0.communicator().RecvFrom(1, 77, never.data(), never.size());
  ASSERT_TRUE(w0.Flush(kWait).ok());
  for (Ticket t : tickets) {
    EXPECT_TRUE(w0.Wait(t, 0ms).ok()) << "ticket " << t << " not complete after Flush";
  }
  EXPECT_EQ(callbacks.load(), 1);
  std::vector<float> out(n);
  ASSERT_TRUE(w0.Wait(w0.Pull(*id, out.data(), n), kWait).ok());
  EXPECT_EQ(out[0], 25.0f);
  EXPECT_EQ(out[n - 1], 25.0f);
  // A bsp step held by the server until the other worker pushes: Flush times out, saying
  // how many are in flight, then completes once the step does.
  std::vector<float> ones(8, 1.0f), step(8);
  const Ticket waiting = w0.PushPull(*held, ones.data(), step.data(), 8);
  const Status early = w0.Flush(200ms);
  EXPECT_EQ(early.code(), StatusCode::kTimeout) << early;
  EXPECT_NE(early.message().find("1 of 1 requests still in flight"), std::string::npos) << early;
  std::vector<float> step1(8);
  const Ticket other = w1.PushPull(*held, ones.data(), step1.data(), 8);
  ASSERT_TRUE(w0.Flush(kWait).ok());
  EXPECT_TRUE(w0.Wait(waiting, 0ms).ok());
  EXPECT_EQ(step[7], 2.0f);
  EXPECT_TRUE(w1.Wait(other, kWait).ok());
  std::vector<float> hello(4, 5.0f);
  ASSERT_TRUE(w1.Wait(w1.communicator().SendTo(0, 77, hello.data(), hello.size()), kWait).ok());
  ASSERT_TRUE(w0.Wait(recv, kWait).ok());
  EXPECT_EQ(never[3], 5.0f);
  EXPECT_TRUE(c.Finish().ok());
}

// ----- Bad input: a clear Status, and nothing changes -------------------------------------

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>(2, 1, "tcp");
    ASSERT_TRUE(cluster_->Start().ok());
    auto d = w().DeclareTable(TableSpec::Dense("d", 10));
    auto s = w().DeclareTable(TableSpec::Sparse("s", 4));
    ASSERT_TRUE(d.ok() && s.ok());
    dense_ = *d;
    sparse_ = *s;
    std::vector<float> one(10, 1.0f);
    ASSERT_TRUE(w().Wait(w().Push(dense_, one.data(), 10), kWait).ok());
  }
  Worker& w() { return cluster_->worker(0); }
  void ExpectDenseUnchanged() {
    std::vector<float> out(10);
    ASSERT_TRUE(w().Wait(w().Pull(dense_, out.data(), 10), kWait).ok());
    for (float v : out) EXPECT_EQ(v, 1.0f);
  }
  std::unique_ptr<LocalCluster> cluster_;
  TableId dense_ = 0, sparse_ = 0;
};

TEST_F(BadInputTest, UnknownTable) {
  float v[10];
  Status s = w().Wait(w().Push(999, v, 10), kWait);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("unknown table"), std::string::npos) << s;
  EXPECT_EQ(w().GetTableSpec(999).status().code(), StatusCode::kNotFound);
}

TEST_F(BadInputTest, DenseSizeMismatch) {
  std::vector<float> v(11, 5.0f);
  Status s = w().Wait(w().Push(dense_, v.data(), 11), kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("10 elements"), std::string::npos) << s;
  EXPECT_EQ(w().Wait(w().Pull(dense_, v.data(), 9), kWait).code(), StatusCode::kInvalidArgument);
  ExpectDenseUnchanged();
}

TEST_F(BadInputTest, KeysAndRowsMismatch) {
  Key keys[2] = {1, 2};
  float rows[7] = {0};
  Status s = w().Wait(w().PushSparse(sparse_, keys, 2, rows, 7), kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dim 4"), std::string::npos) << s;
  EXPECT_EQ(w().Wait(w().PullSparse(sparse_, keys, 2, rows, 7), kWait).code(),
            StatusCode::kInvalidArgument);
  float out[8];
  ASSERT_TRUE(w().Wait(w().PullSparse(sparse_, keys, 2, out, 8), kWait).ok());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST_F(BadInputTest, WrongKindOfCall) {
  float v[10];
  EXPECT_EQ(w().Wait(w().Push(sparse_, v, 10), kWait).code(), StatusCode::kInvalidArgument);
  Key k = 1;
  EXPECT_EQ(w().Wait(w().PushSparse(dense_, &k, 1, v, 1), kWait).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w().Wait(w().Push(dense_, nullptr, 10), kWait).code(), StatusCode::kInvalidArgument);
  ExpectDenseUnchanged();
}

TEST_F(BadInputTest, DimZeroAndDuplicateNames) {
  auto zero = w().DeclareTable(TableSpec::Sparse("z", 0));
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  auto again = w().DeclareTable(TableSpec::Dense("d", 10));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, dense_);
  auto clash = w().DeclareTable(TableSpec::Dense("d", 11));
  EXPECT_EQ(clash.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(clash.status().message().find("different spec (size: 10 declared, 11 asked)"),
            std::string::npos)
      << clash.status().message();
  TableSpec lr = TableSpec::Dense("d", 10);
  lr.learning_rate = 0.5f;
  auto lr_clash = w().DeclareTable(lr);
  EXPECT_NE(lr_clash.status().message().find("learning_rate: 0.01 declared, 0.5 asked"), std::string::npos)
      << lr_clash.status().message();
  ExpectDenseUnchanged();
}

TEST_F(BadInputTest, UnknownTicket) {
  EXPECT_EQ(w().Wait(987654321, 10ms).code(), StatusCode::kNotFound);
}

TEST(LifecycleTest, PushBeforeStartFails) {
  Worker w(FastOptions());
  float v = 1;
  Status s = w.Wait(w.Push(0, &v, 1), 1s);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.DeclareTable(TableSpec::Dense("x", 1)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Barrier(Group::kWorkers, 1s).code(), StatusCode::kFailedPrecondition);
}

TEST(LifecycleTest, NoSchedulerAddressFailsAtOnceSayingWhatToSet) {
  Options o = FastOptions();  // scheduler_address left at its default, tcp://127.0.0.1:0
  o.connect_timeout_ms = 30000;
  Worker w(o);
  const auto start = std::chrono::steady_clock::now();
  Status s = w.Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("LAYERPS_SCHEDULER"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not the 30 s connect timeout
  Server sv(o);
  EXPECT_EQ(sv.Start().code(), StatusCode::kFailedPrecondition);
}

// A scheduler host that does not resolve is said at once (not after connect_timeout_ms).
TEST(LifecycleTest, ASchedulerHostThatDoesNotResolveIsSaidAtOnce) {
  Options o = FastOptions();
  o.scheduler_address = "tcp://no-such-host.invalid:5000";  // .invalid never resolves
  o.connect_timeout_ms = 60000;
  Worker w(o);
  Status s = w.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("'no-such-host.invalid'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("does not resolve"), std::string::npos) << s;
}

// A port where nothing listens: the wait goes on to connect_timeout_ms (a scheduler may be
// slow to start), and the error then says that the connections were refused.
TEST(LifecycleTest, ARefusedSchedulerPortIsNamed) {
  Options o = FastOptions();
  o.scheduler_address = "tcp://127.0.0.1:1";  // reserved port, nobody listens
  o.connect_timeout_ms = 2500;                // the port is probed every second
  Worker w(o);
  Status s = w.Start();
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_NE(s.message().find("connection refused"), std::string::npos) << s;
}

TEST(LifecycleTest, NobodyListensAtTheSchedulerAddress) {
  Options o = FastOptions();
  o.scheduler_address = "tcp://127.0.0.1:1";  // reserved port, nobody listens
  o.connect_timeout_ms = 500;
  Worker w(o);
  const auto start = std::chrono::steady_clock::now();
  Status s = w.Start();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_NE(s.message().find("no answer from the scheduler"), std::string::npos) << s;
  EXPECT_LT(took, 10s);  // bounded by connect_timeout_ms, not a hang
  Server sv(o);
  EXPECT_EQ(sv.Start().code(), StatusCode::kTimeout);
}

TEST(LifecycleTest, WrongTokenIsRefused) {
  Options o = FastOptions();
  o.token = "right";
  LocalCluster c(1, 1, "tcp", o);
  Scheduler& sched = c.scheduler();
  ASSERT_TRUE(sched.Start().ok());
  Options bad = o;
  bad.scheduler_address = sched.address();
  bad.token = "wrong";
  Worker w(bad);
  Status s = w.Start();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("token"), std::string::npos) << s;
  EXPECT_EQ(sched.stats().rejected_registrations, 1u);
  EXPECT_TRUE(sched.Nodes().empty());  // nobody joined
}

TEST(LifecycleTest, ExtraNodesAreRefused) {
  LocalCluster c(1, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Options o = c.options();
  o.connect_timeout_ms = 5000;
  Worker extra(o);
  Status s = extra.Start();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(c.Finish().ok());
}

TEST(LifecycleTest, LeavingWorkersShutTheClusterDownAndCallsAfterStopFail) {
  LocalCluster c(1, 2, "tcp");
  ASSERT_TRUE(c.Start().ok());
  // Both workers leave; the scheduler then shuts the servers down cleanly.
  EXPECT_TRUE(c.Finish().ok());
  EXPECT_TRUE(c.server(0).Join(5s).ok());
  float v = 0;
  EXPECT_EQ(c.worker(0).Wait(c.worker(0).Pull(0, &v, 1), 1s).code(),
            StatusCode::kFailedPrecondition);
}

// A server goes away mid-run (here it leaves; tests/multiprocess SIGKILLs one, found by
// its silence): waits on it fail promptly with Unavailable, not at the request timeout
// and never by hanging, and the scheduler reports the failure.
TEST(FailureTest, DeadServerFailsWaits) {
  Options o = FastOptions();
  o.dense_chunk_elems = 1000;
  o.request_timeout_ms = 30000;
  LocalCluster c(2, 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const size_t n = 200000;  // 400 KB parts: sent in place (borrowed until released)
  auto id = w.DeclareTable(TableSpec::Dense("t", n));
  ASSERT_TRUE(id.ok());
  std::vector<float> g(n, 1.0f);
  ASSERT_TRUE(w.Wait(w.Push(*id, g.data(), n), kWait).ok());
  c.server(1).Stop();
  const auto start = std::chrono::steady_clock::now();
  Status s;
  // Requests sent before the death is noticed fail when it is; later ones at once.
  for (int i = 0; i < 100 && s.ok(); ++i) {
    s = w.Wait(w.Push(*id, g.data(), n), 20s);
    if (s.ok()) std::this_thread::sleep_for(20ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_LT(took, 15s);
  // The scheduler reports the failure when the worker leaves.
  w.Stop();
  EXPECT_EQ(c.scheduler().Join(10s).code(), StatusCode::kUnavailable);
}

TEST(BarrierTest, AllGroups) {
  LocalCluster c(2, 3, "inproc");
  ASSERT_TRUE(c.Start().ok());
  std::atomic<int> before{0};
  c.OnEveryWorker([&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * r));
    ++before;
    ASSERT_TRUE(c.worker(r).Barrier(Group::kWorkers, kWait).ok());
    EXPECT_EQ(before.load(), 3);  // nobody passes before everyone arrived
  });
  EXPECT_EQ(c.worker(0).Barrier(Group::kWorkers, 200ms).code(), StatusCode::kTimeout);
  Status fin = c.Finish();
  EXPECT_TRUE(fin.ok()) << fin;
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// Many tensors of one step: small slices are fused per server, big ones sent in place;
// every worker's contribution lands exactly once.
class FusionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(FusionTest, ManyTensorsInOneRequest) {
  const Shape p = GetParam();
  Options o = FastOptions();
  o.dense_chunk_elems = 50000;  // 100k+ tensors span servers; 70k-element slices are > 256 KiB
  LocalCluster c(p.servers, p.workers, p.transport, o);
  ASSERT_TRUE(c.Start().ok());
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 120; ++i) sizes.push_back(1 + (i * 37) % 1024);  // small: biases
  sizes.push_back(65536);   // exactly 256 KiB: sent in place
  sizes.push_back(140001);  // spans servers, mixed
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    std::vector<TableId> ids;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto id = w.DeclareTable(TableSpec::Dense("t" + std::to_string(i), sizes[i]));
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    std::vector<std::vector<float>> grads(sizes.size()), outs(sizes.size());
    std::vector<DenseRef> refs;
    std::vector<DenseOut> pulls;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads[i].resize(sizes[i]);
      for (uint64_t k = 0; k < sizes[i]; ++k) grads[i][k] = DenseGrad(r, k + i);
      outs[i].assign(sizes[i], -777.0f);
      refs.push_back({ids[i], grads[i].data(), sizes[i]});
      pulls.push_back({ids[i], outs[i].data(), sizes[i]});
    }
    ASSERT_TRUE(w.Wait(w.PushMany(refs), kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    ASSERT_TRUE(w.Wait(w.PullMany(pulls), kWait).ok());
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (uint64_t k = 0; k < sizes[i]; ++k) {
        float want = 0;
        for (int q = 0; q < p.workers; ++q) want += DenseGrad(q, k + i);
        ASSERT_EQ(outs[i][k], want) << "tensor " << i << " element " << k;
      }
    }
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    // PushPullMany returns values that include at least this worker's second push.
    ASSERT_TRUE(w.Wait(w.PushPullMany(refs, pulls), kWait).ok());
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_NE(outs[i][0], -777.0f);
    }
  });
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusionTest,
                         ::testing::Values(Shape{1, 1, "tcp"}, Shape{2, 2, "inproc"},
                                           Shape{3, 2, "tcp"}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::to_string(i.param.servers) + "s" +
                                  std::to_string(i.param.workers) + "w_" + i.param.transport;
                         });

TEST(FusionErrorsTest, OneBadTensorSendsNothing) {
  LocalCluster c(2, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto a = w.DeclareTable(TableSpec::Dense("a", 10));
  auto b = w.DeclareTable(TableSpec::Dense("b", 20));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> va(10, 1.0f), vb(20, 1.0f);
  Status s = w.Wait(w.PushMany({{*a, va.data(), 10}, {*b, vb.data(), 19}}), kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("tensor 1"), std::string::npos) << s;
  EXPECT_EQ(w.Wait(w.PushMany({{*a, va.data(), 10}, {999, vb.data(), 20}}), kWait).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(w.Wait(w.PushPullMany({{*a, va.data(), 10}}, {}), kWait).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Wait(w.PushPullMany({{*a, va.data(), 10}}, {{*b, vb.data(), 20}}), kWait).code(),
            StatusCode::kInvalidArgument);
  std::vector<float> out(10, -1.0f);
  ASSERT_TRUE(w.Wait(w.Pull(*a, out.data(), 10), kWait).ok());
  for (float x : out) EXPECT_EQ(x, 0.0f);           // nothing was applied
  EXPECT_TRUE(w.Wait(w.PushMany({}), kWait).ok());  // an empty group is a no-op
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(RankTest, NodesGetTheRanksTheyAskFor) {
  Options o = FastOptions();
  o.num_servers = 1;
  o.num_workers = 3;
  Scheduler sched(o);
  ASSERT_TRUE(sched.Start().ok());
  o.scheduler_address = sched.address();
  o.connect_timeout_ms = 5000;
  auto with_rank = [&](int r) {
    Options x = o;
    x.rank = r;
    return x;
  };
  // Refusals first, while every slot is free.
  Worker too_high(with_rank(5));
  Status s = too_high.Start();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("rank 5 asked for"), std::string::npos) << s;
  Worker w2(with_rank(2)), dup(with_rank(2)), any(with_rank(-1)), w0(with_rank(0));
  Server server(o);
  // Waits (10 s at most) until the scheduler counts `workers` registered workers; the
  // order of registration, not a fixed sleep, is what the steps below rely on.
  auto wait_for_workers = [&](int workers) {
    const std::string want = "0 of 1 servers and " + std::to_string(workers) + " of 3 workers";
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (sched.MissingNodes().find(want) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    return sched.MissingNodes();
  };
  std::vector<std::future<Status>> f;
  f.push_back(std::async(std::launch::async, [&] { return w2.Start(); }));
  // w2 registers first and holds rank 2.
  std::string missing = wait_for_workers(1);
  ASSERT_NE(missing.find("1 of 3 workers"), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing server rank 0 and worker ranks 0, 1 "), std::string::npos)
      << missing;
  Status dup_status = dup.Start();
  EXPECT_EQ(dup_status.code(), StatusCode::kPermissionDenied) << dup_status;
  EXPECT_NE(dup_status.message().find("worker rank 2 is taken"), std::string::npos) << dup_status;
  f.push_back(std::async(std::launch::async, [&] { return any.Start(); }));
  // `any` takes the lowest free rank: 0.
  missing = wait_for_workers(2);
  ASSERT_NE(missing.find("2 of 3 workers"), std::string::npos) << missing;
  f.push_back(std::async(std::launch::async, [&] { return server.Start(); }));
  // Rank 0 is taken by `any` now, so w0 is refused; the last free rank goes to a fresh node.
  EXPECT_EQ(w0.Start().code(), StatusCode::kPermissionDenied);
  Worker last(with_rank(-1));
  f.push_back(std::async(std::launch::async, [&] { return last.Start(); }));
  for (auto& x : f) ASSERT_TRUE(x.get().ok());
  EXPECT_EQ(w2.rank(), 2u);
  EXPECT_EQ(any.rank(), 0u);
  EXPECT_EQ(last.rank(), 1u);
  w2.Stop();
  any.Stop();
  last.Stop();
  EXPECT_TRUE(sched.Join(10s).ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A table no server can hold fails its declare with the reason; the servers live on.
TEST(ResourceTest, TableTooBigForTheServersFailsTheDeclare) {
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  overcommit >> mode;
  if (mode == 1) GTEST_SKIP() << "overcommit_memory=1: a huge allocation would succeed, then OOM";
  LocalCluster c(2, 1, "tcp");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto huge = w.DeclareTable(TableSpec::Dense("huge", uint64_t{1} << 40));  // 4 TiB
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("not enough memory"), std::string::npos) << huge.status();
  // Declaring it again gives the same answer; other tables still work.
  EXPECT_EQ(w.DeclareTable(TableSpec::Dense("huge", uint64_t{1} << 40)).status().code(),
            StatusCode::kResourceExhausted);
  auto ok = w.DeclareTable(TableSpec::Dense("fine", 100));
  ASSERT_TRUE(ok.ok()) << ok.status();
  std::vector<float> g(100, 1.0f), out(100);
  ASSERT_TRUE(w.Wait(w.PushPull(*ok, g.data(), out.data(), 100), kWait).ok());
  EXPECT_EQ(out[99], 1.0f);
  // The failed table left the map: its name is free for a spec that fits (it used to
  // stay, so this declare was refused as a different spec, and every server retried the
  // 4 TiB allocation on every later map).
  auto refit = w.DeclareTable(TableSpec::Dense("huge", 100));
  ASSERT_TRUE(refit.ok()) << refit.status();
  ASSERT_TRUE(w.Wait(w.PushPull(*refit, g.data(), out.data(), 100), kWait).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_TRUE(c.Finish().ok());
}

// Worker::SetLearningRate: pushes after it are applied with the new rate on every
// server (dense and sparse), the rule's state is kept, and a re-declare with the declared
// spec still finds the table.
TEST(LearningRateTest, SetLearningRateReachesEveryServerAndKeepsTheState) {
  LocalCluster c(2, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w0 = c.worker(0);
  Worker& w1 = c.worker(1);
  TableSpec spec = TableSpec::Dense("lr", 1000);
  spec.rule = UpdateRule::kMomentum;
  spec.learning_rate = 1.0f;
  spec.momentum = 0.5f;
  auto dense = w0.DeclareTable(spec);
  TableSpec sspec = TableSpec::Sparse("lr_rows", 2);
  sspec.rule = UpdateRule::kSgd;
  sspec.learning_rate = 1.0f;
  auto sparse = w0.DeclareTable(sspec);
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<float> g(1000, 1.0f), out(1000);
  ASSERT_TRUE(w0.Wait(w0.Push(*dense, g.data(), g.size()), kWait).ok());  // b = 1, x = -1
  ASSERT_TRUE(w1.SetLearningRate(*dense, 0.25f).ok());
  ASSERT_TRUE(w0.Wait(w0.Push(*dense, g.data(), g.size()), kWait).ok());  // b = 1.5, x -= 0.375
  ASSERT_TRUE(w1.Wait(w1.Pull(*dense, out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out, std::vector<float>(1000, -1.375f));  // both servers' halves
  EXPECT_EQ(w0.GetTableSpec(*dense)->learning_rate, 0.25f);

  std::vector<Key> keys = {3, 1u << 31, 99};
  std::vector<float> rows(6, 1.0f), got(6);
  ASSERT_TRUE(w0.SetLearningRate(*sparse, 2.0f).ok());
  ASSERT_TRUE(w0.Wait(w0.PushSparse(*sparse, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
  ASSERT_TRUE(w1.Wait(w1.PullSparse(*sparse, keys.data(), keys.size(), got.data(), got.size()), kWait).ok());
  EXPECT_EQ(got, std::vector<float>(6, -2.0f));

  auto again = w1.DeclareTable(spec);  // the declared spec (lr 1) is still this table
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *dense);

  Status sum = w0.SetLearningRate(*w0.DeclareTable(TableSpec::Dense("plain", 4)), 0.1f);
  EXPECT_EQ(sum.code(), StatusCode::kInvalidArgument) << sum;
  EXPECT_EQ(w0.SetLearningRate(*dense, -1.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w0.SetLearningRate(*dense, std::nanf("")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w0.SetLearningRate(4242, 0.1f).code(), StatusCode::kNotFound);
  EXPECT_TRUE(c.Finish().ok());
}

// Worker::DropTable: the table leaves the cluster, requests on its id fail, and the name
// is declared again from the initializer; a name no table has is kNotFound.
TEST(DropTableTest, DroppedTableFreesItsNameAndItsShards) {
  LocalCluster c(2, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w0 = c.worker(0);
  Worker& w1 = c.worker(1);
  auto dense = w0.DeclareTable(TableSpec::Dense("d", 1000));
  auto sparse = w0.DeclareTable(TableSpec::Sparse("s", 4));
  ASSERT_TRUE(dense.ok() && sparse.ok());
  std::vector<float> g(1000, 3.0f), out(1000);
  ASSERT_TRUE(w0.Wait(w0.Push(*dense, g.data(), g.size()), kWait).ok());
  std::vector<Key> keys = {7, 1u << 30};
  std::vector<float> rows(8, 2.0f), got(8);
  ASSERT_TRUE(w0.Wait(w0.PushSparse(*sparse, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
  const auto held = [&](TableId id) {
    return c.server(0).table_stats().count(id) + c.server(1).table_stats().count(id);
  };
  ASSERT_EQ(held(*sparse), 2u);  // both servers hold a share of the sparse table

  ASSERT_TRUE(w1.DropTable("d").ok());
  EXPECT_EQ(w1.GetTableSpec(*dense).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(w1.Wait(w1.Pull(*dense, out.data(), out.size()), kWait).code(), StatusCode::kNotFound);
  Status again = w0.DropTable("d");
  EXPECT_EQ(again.code(), StatusCode::kNotFound) << again;
  EXPECT_NE(again.message().find("'d'"), std::string::npos) << again;

  // Declared again under the same name with another size: a new table, zeros.
  auto dense2 = w1.DeclareTable(TableSpec::Dense("d", 10));
  ASSERT_TRUE(dense2.ok()) << dense2.status();
  EXPECT_NE(*dense2, *dense);
  std::vector<float> out2(10, -1.0f);
  ASSERT_TRUE(w0.Wait(w0.Pull(*dense2, out2.data(), out2.size()), kWait).ok());
  EXPECT_EQ(out2, std::vector<float>(10, 0.0f));

  // The sparse table is untouched by the other's drop; then dropped too.
  ASSERT_TRUE(w1.Wait(w1.PullSparse(*sparse, keys.data(), keys.size(), got.data(), got.size()), kWait).ok());
  EXPECT_EQ(got, rows);
  ASSERT_TRUE(w0.DropTable("s").ok());
  EXPECT_EQ(w0.Wait(w0.PullSparse(*sparse, keys.data(), keys.size(), got.data(), got.size()), kWait).code(),
            StatusCode::kNotFound);
  // The servers free their shares when the map without the table reaches them.
  for (int i = 0; i < 500 && held(*sparse) != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(held(*sparse), 0u);
  auto sparse2 = w0.DeclareTable(TableSpec::Sparse("s", 4));
  ASSERT_TRUE(sparse2.ok()) << sparse2.status();
  ASSERT_TRUE(w1.Wait(w1.PullSparse(*sparse2, keys.data(), keys.size(), got.data(), got.size()), kWait).ok());
  EXPECT_EQ(got, std::vector<float>(8, 0.0f));
  EXPECT_EQ(w0.DropTable("").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A part bigger than max_message_bytes would be dropped by the receiving socket without
// a word: the worker refuses it with the reason instead, and the server is untouched.
TEST(ResourceTest, PartsAboveMaxMessageBytesAreRefused) {
  Options o = FastOptions();
  o.max_message_bytes = 64 << 10;
  LocalCluster c(1, 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto big = w.DeclareTable(TableSpec::Dense("big", 100000));  // 400 KB in one part
  auto small = w.DeclareTable(TableSpec::Dense("small", 1000));
  ASSERT_TRUE(big.ok() && small.ok());
  std::vector<float> g(100000, 1.0f);
  Status s = w.Wait(w.Push(*big, g.data(), g.size()), kWait);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("max_message_bytes"), std::string::npos) << s;
  EXPECT_EQ(w.Wait(w.Pull(*big, g.data(), g.size()), kWait).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(w.Wait(w.Push(*small, g.data(), 1000), kWait).ok());
  EXPECT_EQ(c.server(0).stats().bad_messages, 0u);
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A node whose Start times out because others never came says who is missing (issue 16,
// defect 6): the scheduler answers a membership query with the absent ranks.
TEST(ClusterStartTest, TimeoutNamesTheMissingNodes) {
  Options o = testing::FastOptions();
  o.num_servers = 2;
  o.num_workers = 3;
  o.scheduler_address = "tcp://127.0.0.1:0";
  Scheduler scheduler(o);
  ASSERT_TRUE(scheduler.Start().ok());
  o.scheduler_address = scheduler.address();
  o.connect_timeout_ms = 1500;
  Server server(o);  // server rank 0 comes; server rank 1 and workers 1, 2 never do
  Options wo = o;
  wo.rank = 0;
  Worker worker(wo);
  auto s = std::async(std::launch::async, [&] { return server.Start(); });
  const Status w = worker.Start();
  EXPECT_EQ(w.code(), StatusCode::kTimeout) << w.ToString();
  EXPECT_NE(w.message().find("missing server rank 1 and worker ranks 1, 2"), std::string::npos)
      << w.message();
  EXPECT_NE(w.message().find("(1 of 2 servers and 1 of 3 workers registered)"), std::string::npos)
      << w.message();
  s.get();
  scheduler.Stop();
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// ipc:// socket files are removed when their node stops (issue 16, defect 6).
TEST(ClusterStartTest, IpcSocketFilesAreRemovedAtAStop) {
  std::string scheduler_path, worker_path;
  {
    testing::LocalCluster c(1, 1, "ipc");
    ASSERT_TRUE(c.Start().ok());
    scheduler_path = c.options().scheduler_address.substr(6);
    for (const NodeInfo& n : c.worker(0).Nodes()) {
      if (n.role == Role::kWorker) worker_path = n.endpoint.substr(6);
    }
    ASSERT_EQ(access(scheduler_path.c_str(), F_OK), 0) << scheduler_path;
    ASSERT_FALSE(worker_path.empty());
    ASSERT_EQ(access(worker_path.c_str(), F_OK), 0) << worker_path;
    EXPECT_TRUE(c.Finish().ok());
  }
  EXPECT_NE(access(scheduler_path.c_str(), F_OK), 0) << scheduler_path << " left behind";
  EXPECT_NE(access(worker_path.c_str(), F_OK), 0) << worker_path << " left behind";
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A capacity-limited sparse table (docs/sparse.md) on 2 servers: 10k distinct ids
// pushed in batches; no server ever holds more than its capacity, and the counters add up.
TEST(BoundedSparseTest, CapacityHeldOnEveryServer) {
  LocalCluster c(2, 1, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  TableSpec spec = TableSpec::Sparse("bounded_emb", 4);
  spec.capacity = 1000;
  spec.eviction = Eviction::kLru;
  auto id = w.DeclareTable(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const size_t kIds = 10000, kBatch = 500;
  std::vector<Key> keys(kIds);
  for (size_t i = 0; i < kIds; ++i) keys[i] = MixKey(i + 1);  // spread over both servers
  std::vector<float> rows(kBatch * 4);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 13 + 1);
  for (size_t b = 0; b < kIds; b += kBatch) {
    ASSERT_TRUE(
        w.Wait(w.PushSparse(*id, keys.data() + b, kBatch, rows.data(), rows.size()), kWait).ok());
    for (int s = 0; s < 2; ++s) {
      ASSERT_LE(c.server(s).table_stats().at(*id).rows_live, 1000u) << "server " << s;
    }
  }
  uint64_t admitted = 0;
  for (int s = 0; s < 2; ++s) {
    const SparseTableStats t = c.server(s).table_stats().at(*id);
    EXPECT_EQ(t.name, "bounded_emb");
    EXPECT_EQ(t.rows_live, 1000u) << "server " << s;  // each got ~5000 ids
    EXPECT_EQ(t.admitted - t.evicted - t.expired, t.rows_live);
    EXPECT_EQ(t.refused, 0u);
    admitted += t.admitted;
  }
  EXPECT_EQ(admitted, kIds);  // every id created exactly once, on one server
  // The last batch (~250 ids per server) is still held; the first was evicted and reads
  // as the initializer (zeros).
  std::vector<float> out(rows.size(), -1.0f);
  ASSERT_TRUE(
      w.Wait(w.PullSparse(*id, keys.data() + kIds - kBatch, kBatch, out.data(), out.size()), kWait)
          .ok());
  EXPECT_EQ(out, rows);
  ASSERT_TRUE(w.Wait(w.PullSparse(*id, keys.data(), kBatch, out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out, std::vector<float>(rows.size(), 0.0f));
  // Declaring the name again with another capacity names the field; bad bounds are
  // refused at declare.
  TableSpec other = spec;
  other.capacity = 2000;
  auto again = w.DeclareTable(other);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("capacity: 1000 declared, 2000 asked"), std::string::npos)
      << again.status();
  TableSpec dense = TableSpec::Dense("bounded_dense", 10);
  dense.capacity = 5;
  dense.eviction = Eviction::kLru;
  auto refused = w.DeclareTable(dense);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("capacity"), std::string::npos);
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A job of collectives only (Horovod's way) runs without servers; a table then is refused
// with the reason.
TEST(ZeroServersTest, CollectivesRunAndTablesAreRefused) {
  LocalCluster c(0, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  std::vector<Status> st(2);
  std::vector<float> v(2);
  c.OnEveryWorker([&](int r) {
    float x = static_cast<float>(r + 1);
    st[r] = c.worker(r).communicator().AllReduce(&x, &x, 1, DataType::kFloat32, AllReduceOptions{});
    v[r] = x;
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(v[r], 3.0f);
  }
  auto t = c.worker(0).DeclareTable(TableSpec::Dense("w", 4));
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("no servers (num_servers=0)"), std::string::npos) << t.status();
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps
