// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The typed collectives (ps/collectives.h): every data type x reduce op x algorithm for
// W = 2, 3, 4 against a reference computed here (exact for integers and for the small
// integer-valued floats used, within rounding for averages); compression on the wire;
// all-gather(v), broadcast, all-to-all(v), reduce-scatter and the barrier with empty and
// unequal counts; grouped and asynchronous calls interleaved with pushes and pulls;
// mismatched calls (single and grouped) failing on every member with the same message; a
// member that dies failing every survivor with the same message; bad input refused
// before anything is sent; a member that never calls; process subsets.
#include "ps/collectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/reduce.h"
#include "common/wire_type.h"
#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"
#include "worker/collectives.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LocalCluster;

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat64, DataType::kInt32,   DataType::kInt64,
                               DataType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 ||
         t == DataType::kFloat64;
}

// Element i of rank r's input, as a double: small integers, so that every sum and product
// of up to 4 members is exact in every type (|sum| <= 12, |product| <= 16; uint8 >= 0).
double Value(DataType t, int op, size_t i, int r) {
  if (op == static_cast<int>(ReduceOp::kProduct)) {
    static const double kFactors[] = {1, 2, -1, -2, 1};
    const double v = kFactors[(i + 3 * r) % 5];
    return t == DataType::kUInt8 ? std::fabs(v) : v;
  }
  const int v = static_cast<int>((i * 7 + r * 5 + op) % 7) - 3;  // -3..3
  return t == DataType::kUInt8 ? v + 3 : v;
}

// Stores a double as one element of type t at p.
void Put(DataType t, uint8_t* p, double v) {
  switch (t) {
    case DataType::kFloat32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DataType::kFloat16: { uint16_t h = pack::FloatToHalf(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DataType::kBFloat16: { uint16_t h = pack::FloatToBFloat16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DataType::kFloat64: std::memcpy(p, &v, 8); break;
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case DataType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case DataType::kUInt8: { uint8_t x = static_cast<uint8_t>(v); std::memcpy(p, &x, 1); break; }
  }
}

double Get(DataType t, const uint8_t* p) {
  switch (t) {
    case DataType::kFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case DataType::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); return pack::HalfToFloat(h); }
    case DataType::kBFloat16: { uint16_t h; std::memcpy(&h, p, 2); return pack::BFloat16ToFloat(h); }
    case DataType::kFloat64: { double d; std::memcpy(&d, p, 8); return d; }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::kInt64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DataType::kUInt8: return *p;
  }
  return 0;
}

std::vector<uint8_t> Input(DataType t, ReduceOp op, size_t n, int r) {
  std::vector<uint8_t> v(n * DataTypeSize(t));
  for (size_t i = 0; i < n; ++i) Put(t, v.data() + i * DataTypeSize(t), Value(t, static_cast<int>(op), i, r));
  return v;
}

// The reference: computed in double from the inputs, then as the type rounds it.
double Reference(DataType t, ReduceOp op, size_t i, const std::vector<int>& ranks) {
  double acc = 0;
  bool first = true;
  for (int r : ranks) {
    const double v = Value(t, static_cast<int>(op), i, r);
    if (first) {
      acc = v;
      first = false;
      continue;
    }
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (op == ReduceOp::kAverage) {
    const double w = static_cast<double>(ranks.size());
    acc = IsFloat(t) ? acc / w : std::trunc(acc / w);
  }
  return acc;
}

double Tolerance(DataType t, double v) {
  switch (t) {
    case DataType::kFloat16: return std::fabs(v) * 1e-3 + 1e-3;
    case DataType::kBFloat16: return std::fabs(v) * 8e-3 + 8e-3;
    case DataType::kFloat32: return std::fabs(v) * 1e-6;
    default: return 0;  // float64 averages of small integers: exact division
  }
}

std::vector<int> AllRanks(int w) {
  std::vector<int> r;
  for (int i = 0; i < w; ++i) r.push_back(i);
  return r;
}

class TypedCollectiveTest : public ::testing::TestWithParam<int> {
 protected:
  int world() const { return GetParam(); }
};

// Every type x op x algorithm (and out of place, with prescale and postscale once).
TEST_P(TypedCollectiveTest, AllReduceEveryTypeOpAndAlgorithm) {
  const int w = world();
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  const size_t n = 203;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (AllReduceAlgorithm alg : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kDirect}) {
        SCOPED_TRACE(std::string(DataTypeName(t)) + " " + ReduceOpName(op) +
                     (alg == AllReduceAlgorithm::kRing ? " ring" : " direct"));
        AllReduceOptions o;
        o.op = op;
        o.algorithm = alg;
        o.segment_bytes = 16 * DataTypeSize(t);  // several segments per chunk
        const bool out_of_place = op == ReduceOp::kMax;
        std::vector<std::vector<uint8_t>> in(w), out(w);
        std::vector<Status> st(w);
        for (int r = 0; r < w; ++r) {
          in[r] = Input(t, op, n, r);
          out[r].assign(in[r].size(), 0xAB);
        }
        c.OnEveryWorker([&](int r) {
          void* dst = out_of_place ? out[r].data() : in[r].data();
          st[r] = c.worker(r).communicator().AllReduce(in[r].data(), dst, n, t, o);
        });
        for (int r = 0; r < w; ++r) {
          ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
          const std::vector<uint8_t>& got = out_of_place ? out[r] : in[r];
          for (size_t i = 0; i < n; ++i) {
            const double want = Reference(t, op, i, AllRanks(w));
            const double v = Get(t, got.data() + i * DataTypeSize(t));
            ASSERT_NEAR(v, want, Tolerance(t, want)) << "rank " << r << " element " << i;
          }
          // Every member holds the same bytes.
          EXPECT_EQ(got, out_of_place ? out[0] : in[0]) << "rank " << r;
        }
      }
    }
  }
  // Prescale and postscale: sum of 2x, then x0.5, is the plain sum.
  AllReduceOptions o;
  o.prescale = 2.0;
  o.postscale = 0.25;
  std::vector<std::vector<uint8_t>> buf(w);
  std::vector<Status> st(w);
  for (int r = 0; r < w; ++r) buf[r] = Input(DataType::kInt64, ReduceOp::kSum, n, r);
  c.OnEveryWorker([&](int r) {
    st[r] = c.worker(r).communicator().AllReduce(buf[r].data(), buf[r].data(), n, DataType::kInt64, o);
  });
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    for (size_t i = 0; i < n; ++i) {
      const double want = std::round(Reference(DataType::kInt64, ReduceOp::kSum, i, AllRanks(w)) * 2 * 0.25);
      ASSERT_EQ(Get(DataType::kInt64, buf[r].data() + i * 8), want) << "element " << i;
    }
  }
  EXPECT_TRUE(c.Finish().ok());
}

// fp16/bf16 on the wire for float32: values exact in the wire type sum exactly; others
// end within the wire type's rounding, the same on every member.
TEST_P(TypedCollectiveTest, CompressedAllReduceAgreesEverywhere) {
  const int w = world();
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  const size_t n = 5000;
  for (WireDType wire : {WireDType::kFloat16, WireDType::kBFloat16}) {
    for (AllReduceAlgorithm alg : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kDirect}) {
      for (bool exact : {true, false}) {
        SCOPED_TRACE(std::string(WireDTypeName(wire)) + (exact ? " exact" : " inexact"));
        AllReduceOptions o;
        o.wire_dtype = wire;
        o.algorithm = alg;
        o.segment_bytes = 1024;
        std::vector<std::vector<float>> buf(w);
        std::vector<double> want(n, 0.0);
        for (int r = 0; r < w; ++r) {
          buf[r].resize(n);
          for (size_t i = 0; i < n; ++i) {
            buf[r][i] = exact ? static_cast<float>(static_cast<int>((i + r) % 9) - 4)
                              : std::sin(0.001f * static_cast<float>(i * (r + 1)));
            want[i] += buf[r][i];
          }
        }
        std::vector<Status> st(w);
        c.OnEveryWorker([&](int r) {
          st[r] = c.worker(r).communicator().AllReduce(buf[r].data(), buf[r].data(), n, DataType::kFloat32, o);
        });
        const double tol = wire == WireDType::kFloat16 ? 4e-3 : 3e-2;
        for (int r = 0; r < w; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r];
          EXPECT_EQ(std::memcmp(buf[r].data(), buf[0].data(), n * 4), 0) << "rank " << r << " differs";
          for (size_t i = 0; i < n; ++i) {
            if (exact) {
              ASSERT_EQ(buf[r][i], want[i]) << "element " << i;
            } else {
              ASSERT_NEAR(buf[r][i], want[i], tol * w) << "element " << i;
            }
          }
        }
      }
    }
  }
  EXPECT_TRUE(c.Finish().ok());
}

// All-gather(v), broadcast (every root, both algorithms), all-to-all(v), reduce-scatter
// and the barrier, with empty and unequal counts.
TEST_P(TypedCollectiveTest, GathersBroadcastsAllToAllAndReduceScatter) {
  const int w = world();
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  CollectiveOptions o;
  o.segment_bytes = 24;  // several messages per block
  // AllGather of int64.
  {
    const size_t n = 11;
    std::vector<std::vector<int64_t>> in(w), out(w, std::vector<int64_t>(n * w, -1));
    for (int r = 0; r < w; ++r)
      for (size_t i = 0; i < n; ++i) in[r].push_back(r * 1000 + static_cast<int64_t>(i));
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) {
      st[r] = c.worker(r).communicator().AllGather(in[r].data(), n, DataType::kInt64, out[r].data(), o);
    });
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      for (int q = 0; q < w; ++q)
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[r][q * n + i], q * 1000 + static_cast<int64_t>(i));
    }
  }
  // AllGatherV: rank r contributes r * 5 float64 (rank 0: none).
  {
    std::vector<std::vector<double>> in(w);
    for (int r = 0; r < w; ++r)
      for (int i = 0; i < r * 5; ++i) in[r].push_back(r + i * 0.5);
    std::vector<GatherResult> res(w);
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) {
      st[r] = c.worker(r).communicator().AllGatherV(in[r].data(), in[r].size(), DataType::kFloat64, &res[r], o);
    });
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      ASSERT_EQ(res[r].counts.size(), static_cast<size_t>(w));
      for (int q = 0; q < w; ++q) {
        ASSERT_EQ(res[r].counts[q], static_cast<size_t>(q * 5));
        for (int i = 0; i < q * 5; ++i) {
          double v;
          std::memcpy(&v, res[r].data.data() + (res[r].Offset(q) + i) * 8, 8);
          ASSERT_EQ(v, q + i * 0.5);
        }
      }
    }
  }
  // Broadcast from every root, direct and chained, of 1001 int32.
  for (AllReduceAlgorithm alg : {AllReduceAlgorithm::kDirect, AllReduceAlgorithm::kRing}) {
    for (int root = 0; root < w; ++root) {
      const size_t n = 1001;
      std::vector<std::vector<int32_t>> buf(w, std::vector<int32_t>(n));
      for (int r = 0; r < w; ++r)
        for (size_t i = 0; i < n; ++i) buf[r][i] = r * 100000 + static_cast<int32_t>(i);
      CollectiveOptions b = o;
      b.algorithm = alg;
      std::vector<Status> st(w);
      c.OnEveryWorker([&](int r) {
        st[r] = c.worker(r).communicator().Broadcast(buf[r].data(), n, DataType::kInt32, root, b);
      });
      for (int r = 0; r < w; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r];
        ASSERT_EQ(buf[r], buf[root]) << "rank " << r << " root " << root;
        ASSERT_EQ(buf[r][5], root * 100000 + 5);
      }
    }
  }
  // AllToAll of uint8: block q of rank r is (r, q) coded.
  {
    const size_t n = 30;
    std::vector<std::vector<uint8_t>> in(w, std::vector<uint8_t>(n * w)), out(w, std::vector<uint8_t>(n * w));
    for (int r = 0; r < w; ++r)
      for (int q = 0; q < w; ++q)
        for (size_t i = 0; i < n; ++i) in[r][q * n + i] = static_cast<uint8_t>(r * 16 + q + i);
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) {
      st[r] = c.worker(r).communicator().AllToAll(in[r].data(), n, DataType::kUInt8, out[r].data(), o);
    });
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      for (int q = 0; q < w; ++q)
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[r][q * n + i], static_cast<uint8_t>(q * 16 + r + i));
    }
  }
  // AllToAllV: rank r sends (r + q) % 3 int32 to q (some zero).
  {
    std::vector<std::vector<int32_t>> in(w);
    std::vector<std::vector<size_t>> counts(w, std::vector<size_t>(w));
    for (int r = 0; r < w; ++r)
      for (int q = 0; q < w; ++q) {
        counts[r][q] = (r + q) % 3;
        for (size_t i = 0; i < counts[r][q]; ++i) in[r].push_back(r * 100 + q * 10 + static_cast<int32_t>(i));
      }
    std::vector<GatherResult> res(w);
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) {
      st[r] = c.worker(r).communicator().AllToAllV(in[r].data(), counts[r], DataType::kInt32, &res[r], o);
    });
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      for (int q = 0; q < w; ++q) {
        ASSERT_EQ(res[r].counts[q], counts[q][r]);
        for (size_t i = 0; i < counts[q][r]; ++i) {
          int32_t v;
          std::memcpy(&v, res[r].data.data() + (res[r].Offset(q) + i) * 4, 4);
          ASSERT_EQ(v, q * 100 + r * 10 + static_cast<int32_t>(i));
        }
      }
    }
  }
  // ReduceScatter (sum, average) of 1003 float32.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    const size_t n = 1003;
    AllReduceOptions ro;
    ro.op = op;
    ro.segment_bytes = 64;
    std::vector<std::vector<uint8_t>> in(w), out(w);
    for (int r = 0; r < w; ++r) {
      in[r] = Input(DataType::kFloat32, op, n, r);
      out[r].resize(Communicator::ReduceScatterBlock(n, w, r) * 4);
    }
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) {
      st[r] = c.worker(r).communicator().ReduceScatter(in[r].data(), n, DataType::kFloat32, out[r].data(), ro);
    });
    size_t covered = 0;
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      const size_t first = Communicator::ReduceScatterOffset(n, w, r);
      for (size_t i = 0; i < out[r].size() / 4; ++i) {
        const double want = Reference(DataType::kFloat32, op, first + i, AllRanks(w));
        ASSERT_NEAR(Get(DataType::kFloat32, out[r].data() + i * 4), want, Tolerance(DataType::kFloat32, want));
      }
      covered += out[r].size() / 4;
    }
    EXPECT_EQ(covered, n);
  }
  // A barrier.
  {
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) { st[r] = c.worker(r).communicator().CollectiveBarrier(o); });
    for (int r = 0; r < w; ++r) EXPECT_TRUE(st[r].ok()) << st[r];
  }
  EXPECT_TRUE(c.Finish().ok());
}

// A grouped all-reduce of mixed types, and asynchronous collectives in flight beside
// pushes and pulls of a table.
TEST_P(TypedCollectiveTest, GroupedAndAsyncBesidePushesAndPulls) {
  const int w = world();
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  std::vector<TableId> table(w);
  for (int r = 0; r < w; ++r) {
    auto t = c.worker(r).DeclareTable(TableSpec::Dense("w", 1000));
    ASSERT_TRUE(t.ok()) << t.status();
    table[r] = *t;
  }
  std::vector<Status> st(w);
  std::vector<std::vector<float>> a(w), b(w);
  std::vector<std::vector<int32_t>> ints(w);
  std::vector<std::vector<double>> d(w);
  c.OnEveryWorker([&](int r) {
    Worker& wk = c.worker(r);
    a[r].assign(300, static_cast<float>(r + 1));
    b[r].assign(7, static_cast<float>(2 * r));
    ints[r].assign(50, r);
    d[r].assign(3, 0.5 * r);
    std::vector<CollectiveTensor> group = {
        {a[r].data(), a[r].data(), a[r].size(), DataType::kFloat32},
        {ints[r].data(), ints[r].data(), ints[r].size(), DataType::kInt32},
        {b[r].data(), b[r].data(), b[r].size(), DataType::kFloat32},
        {d[r].data(), d[r].data(), d[r].size(), DataType::kFloat64}};
    AllReduceOptions o;
    std::vector<float> g(1000, 1.0f), pulled(1000);
    // Pushes and pulls in flight while two collectives run.
    const Ticket p1 = wk.Push(table[r], g.data(), g.size());
    const Ticket grouped = wk.communicator().GroupedAllReduceAsync(group, o);
    std::vector<int64_t> ranks(4, r), gathered(4 * w);
    const Ticket gather = wk.communicator().AllGatherAsync(ranks.data(), 4, DataType::kInt64, gathered.data(), o);
    const Ticket p2 = wk.Push(table[r], g.data(), g.size());
    Status s = wk.Wait(grouped, milliseconds(30000));
    if (s.ok()) s = wk.Wait(gather, milliseconds(30000));
    if (s.ok()) s = wk.Wait(p1, milliseconds(30000));
    if (s.ok()) s = wk.Wait(p2, milliseconds(30000));
    for (int q = 0; q < w && s.ok(); ++q) {
      if (gathered[4 * q] != q) s = Internal("gathered " + std::to_string(gathered[4 * q]));
    }
    st[r] = s;
  });
  int sum_r = 0;
  for (int r = 0; r < w; ++r) sum_r += r;
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(a[r][0], static_cast<float>(sum_r + w));
    EXPECT_EQ(b[r][6], static_cast<float>(2 * sum_r));
    EXPECT_EQ(ints[r][49], sum_r);
    EXPECT_EQ(d[r][2], 0.5 * sum_r);
  }
  std::vector<float> values(1000);
  ASSERT_TRUE(c.worker(0).Wait(c.worker(0).Pull(table[0], values.data(), values.size()), milliseconds(30000)).ok());
  EXPECT_EQ(values[999], static_cast<float>(2 * w));
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Worlds, TypedCollectiveTest, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "W" + std::to_string(i.param);
                         });

// Calls that differ fail on every member with the same message, naming what differs.
TEST(CollectiveMismatchTest, EveryMemberGetsTheSameError) {
  const int w = 3;
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  struct Case {
    std::string what;
    std::function<Status(Worker&, int)> call;
    std::string needle;
  };
  std::vector<float> big(64, 1.0f);
  std::vector<std::vector<float>> bufs(w, std::vector<float>(64, 1.0f));
  const std::vector<Case> cases = {
      {"count",
       [&](Worker& wk, int r) {
         return wk.communicator().AllReduce(bufs[r].data(), bufs[r].data(), r == 2 ? 50 : 55, DataType::kFloat32,
                             AllReduceOptions{});
       },
       "count differs"},
      {"op",
       [&](Worker& wk, int r) {
         AllReduceOptions o;
         o.op = r == 1 ? ReduceOp::kMax : ReduceOp::kSum;
         return wk.communicator().AllReduce(bufs[r].data(), bufs[r].data(), 8, DataType::kFloat32, o);
       },
       "op differs"},
      {"type",
       [&](Worker& wk, int r) {
         return wk.communicator().AllReduce(bufs[r].data(), bufs[r].data(), 8,
                             r == 0 ? DataType::kInt32 : DataType::kFloat32, AllReduceOptions{});
       },
       "type differs"},
      {"kind",
       [&](Worker& wk, int r) {
         if (r == 2) {
           std::vector<float> out(8 * w);
           return wk.communicator().AllGather(bufs[r].data(), 8, DataType::kFloat32, out.data(), CollectiveOptions{});
         }
         return wk.communicator().AllReduce(bufs[r].data(), bufs[r].data(), 8, DataType::kFloat32, AllReduceOptions{});
       },
       "kind differs"},
      {"root",
       [&](Worker& wk, int r) {
         return wk.communicator().Broadcast(bufs[r].data(), 8, DataType::kFloat32, r == 1 ? 1 : 0, CollectiveOptions{});
       },
       "root differs"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) { st[r] = k.call(c.worker(r), r); });
    std::printf("%s: %s\n", k.what.c_str(), st[0].ToString().c_str());
    for (int r = 0; r < w; ++r) {
      EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << st[r];
      EXPECT_EQ(st[r].message(), st[0].message()) << "rank " << r;
      EXPECT_NE(st[r].message().find(k.needle), std::string::npos) << st[r];
      EXPECT_NE(st[r].message().find("process set [0, 1, 2]"), std::string::npos) << st[r];
    }
    // The set goes on: the next collective works.
    c.OnEveryWorker([&](int r) {
      std::vector<int32_t> one(4, 1);
      st[r] = c.worker(r).communicator().AllReduce(one.data(), one.data(), 4, DataType::kInt32, AllReduceOptions{});
      if (st[r].ok() && one[3] != w) st[r] = Internal("sum " + std::to_string(one[3]));
    });
    for (int r = 0; r < w; ++r) EXPECT_TRUE(st[r].ok()) << "after the mismatch, rank " << r << ": " << st[r];
  }
  EXPECT_TRUE(c.Finish().ok());
}

// A grouped all-reduce whose tensor lists differ in two element types at once: one
// all-reduce per type, each failing (float32: the tensor list differs; int32: the count
// differs). Every member reports the same one of the two, whichever failed first there.
TEST(CollectiveMismatchTest, GroupedMismatchReadsTheSameOnEveryMember) {
  const int w = 2;
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<Status> st(w);
    c.OnEveryWorker([&](int r) {
      std::vector<float> f(4, 1.0f);
      std::vector<int32_t> i(r == 0 ? 4 : 6, 1);
      // Rank 0: float32 [4] and int32 [4]; rank 1: float32 [4] and int32 [6].
      std::vector<CollectiveTensor> group = {{f.data(), f.data(), f.size(), DataType::kFloat32},
                                             {i.data(), i.data(), i.size(), DataType::kInt32}};
      st[r] = c.worker(r).communicator().GroupedAllReduce(group, AllReduceOptions{});
    });
    for (int r = 0; r < w; ++r) {
      EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << st[r];
      EXPECT_EQ(st[r].message(), st[0].message()) << "rank " << r << " and rank 0 differ";
      EXPECT_NE(st[r].message().find("differs"), std::string::npos) << st[r];
    }
    if (round == 0) std::printf("grouped: %s\n", st[0].ToString().c_str());
  }
  EXPECT_TRUE(c.Finish().ok());
}

// A member that dies: every survivor fails with the same kUnavailable naming it, whether
// the death reached it during the collective (rank 0, in flight) or before it called
// (rank 1, which calls the same collective only once rank 0 failed), and the others go
// on among themselves (tolerate_worker_loss).
TEST(CollectiveDeathTest, EverySurvivorGetsTheSameMessage) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = testing::FastOptions();
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 1000;
  o.request_timeout_ms = 120000;  // far beyond: a failure must come from the death
  o.tolerate_worker_loss = true;
  SetTransportFactory(&o, injector);
  const int w = 3;
  LocalCluster c(1, w, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  const NodeId victim = c.worker(2).id();
  std::vector<Status> st(w);
  std::vector<std::vector<int64_t>> in(w, std::vector<int64_t>(4, 1));
  std::vector<std::vector<int64_t>> out(w, std::vector<int64_t>(4 * w));
  CollectiveOptions opts;
  opts.name = "ids";
  std::thread first([&] {  // in flight when the victim dies
    st[0] = c.worker(0).communicator().AllGather(in[0].data(), 4, DataType::kInt64, out[0].data(), opts);
  });
  std::this_thread::sleep_for(milliseconds(200));
  injector->Isolate(victim);  // the victim never calls: silent from here on
  first.join();
  std::this_thread::sleep_for(milliseconds(300));  // the notice reached rank 1 too
  st[1] = c.worker(1).communicator().AllGather(in[1].data(), 4, DataType::kInt64, out[1].data(), opts);
  std::printf("survivor 0: %s\nsurvivor 1: %s\n", st[0].ToString().c_str(),
              st[1].ToString().c_str());
  const std::string want =
      "AllGather 'ids' #0 failed: member rank 2 (node " + std::to_string(victim) + ") died";
  for (int r : {0, 1}) {
    EXPECT_EQ(st[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << st[r];
    EXPECT_EQ(st[r].message(), want) << "rank " << r;
  }
  // The survivors go on among themselves.
  c.OnEveryWorker([&](int r) {
    if (r == 2) return;
    AllReduceOptions pair;
    pair.ranks = {0, 1};
    int32_t one = 1;
    st[r] = c.worker(r).communicator().AllReduce(&one, &one, 1, DataType::kInt32, pair);
    if (st[r].ok() && one != 2) st[r] = Internal("sum " + std::to_string(one));
  });
  for (int r : {0, 1}) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
}

// Bad arguments are refused before anything is sent: the other members see nothing, and
// their next collective pairs with this member's next one.
TEST(CollectiveBadInputTest, RefusedBeforeAnythingIsSent) {
  const int w = 2;
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& a = c.worker(0);
  std::vector<float> buf(8, 1.0f);
  AllReduceOptions o;
  EXPECT_EQ(a.communicator().AllReduce(nullptr, buf.data(), 8, DataType::kFloat32, o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.communicator().AllReduce(buf.data(), buf.data(), 8, static_cast<DataType>(42), o).code(),
            StatusCode::kInvalidArgument);
  AllReduceOptions bad_op;
  bad_op.op = static_cast<ReduceOp>(9);
  EXPECT_EQ(a.communicator().AllReduce(buf.data(), buf.data(), 8, DataType::kFloat32, bad_op).code(),
            StatusCode::kInvalidArgument);
  Status overflow = a.communicator().AllReduce(buf.data(), buf.data(), ~size_t{0} / 2, DataType::kFloat64, o);
  EXPECT_EQ(overflow.code(), StatusCode::kInvalidArgument) << overflow;
  AllReduceOptions outside;
  outside.ranks = {0, 7};
  Status s = a.communicator().AllReduce(buf.data(), buf.data(), 8, DataType::kFloat32, outside);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("no worker of rank 7"), std::string::npos) << s;
  AllReduceOptions compress_int;
  compress_int.wire_dtype = WireDType::kFloat16;
  EXPECT_EQ(a.communicator().AllReduce(buf.data(), buf.data(), 8, DataType::kInt32, compress_int).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a.communicator().Broadcast(buf.data(), 8, DataType::kFloat32, 5, CollectiveOptions{}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a.communicator().AllToAllV(buf.data(), {1}, DataType::kFloat32, nullptr, CollectiveOptions{}).code(),
            StatusCode::kInvalidArgument);
  Worker never_started(c.options());
  EXPECT_EQ(never_started.communicator().AllReduce(buf.data(), buf.data(), 8, DataType::kFloat32, o).code(),
            StatusCode::kFailedPrecondition);
  // Nothing was consumed: the next collective pairs up.
  std::vector<Status> st(w);
  std::vector<std::vector<float>> bufs(w, std::vector<float>(8, 2.0f));
  c.OnEveryWorker([&](int r) {
    st[r] = c.worker(r).communicator().AllReduce(bufs[r].data(), bufs[r].data(), 8, DataType::kFloat32, o);
  });
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(bufs[r][7], 4.0f);
  }
  EXPECT_TRUE(c.Finish().ok());
}

// A member that never calls: the others fail with kTimeout naming it, at their timeout.
TEST(CollectiveTimeoutTest, AMissingMemberIsNamed) {
  const int w = 3;
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  CollectiveOptions o;
  o.timeout = milliseconds(400);
  o.name = "metrics";
  std::vector<Status> st(w);
  std::vector<std::vector<int64_t>> in(w, std::vector<int64_t>(2, 1)), out(w, std::vector<int64_t>(2 * w));
  c.OnEveryWorker([&](int r) {
    if (r == 1) return;  // never calls
    st[r] = c.worker(r).communicator().AllGather(in[r].data(), 2, DataType::kInt64, out[r].data(), o);
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(st[r].code(), StatusCode::kTimeout) << st[r];
    EXPECT_NE(st[r].message().find("AllGather 'metrics' did not complete within 400 ms"),
              std::string::npos)
        << st[r];
    EXPECT_NE(st[r].message().find("no word from rank(s) [1]"), std::string::npos) << st[r];
  }
  EXPECT_TRUE(c.Finish().ok());
}

// A process subset: ranks 0 and 2 of 3 all-reduce among themselves, rank 1 alone.
TEST(CollectiveSubsetTest, ProcessSetsAreIndependent) {
  const int w = 3;
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  std::vector<Status> st(w);
  std::vector<std::vector<int32_t>> buf(w);
  c.OnEveryWorker([&](int r) {
    buf[r].assign(5, r + 1);
    AllReduceOptions o;
    o.ranks = r == 1 ? std::vector<uint32_t>{1} : std::vector<uint32_t>{0, 2};
    o.op = ReduceOp::kProduct;
    st[r] = c.worker(r).communicator().AllReduce(buf[r].data(), buf[r].data(), 5, DataType::kInt32, o);
  });
  for (int r = 0; r < w; ++r) ASSERT_TRUE(st[r].ok()) << st[r];
  EXPECT_EQ(buf[0][4], 3);
  EXPECT_EQ(buf[2][4], 3);
  EXPECT_EQ(buf[1][4], 2);
  EXPECT_TRUE(c.Finish().ok());
}

// Horovod's join with uneven steps: rank r all-reduces steps[r] times, then joins; the
// joined members contribute zeros (average divided by the full set size), max's identity
// for max, and the last to join is named. The values equal a one-process emulation.
TEST(CollectiveJoinTest, UnevenStepsEqualHorovodsJoin) {
  const int w = 3;
  LocalCluster c(1, w, "inproc");
  ASSERT_TRUE(c.Start().ok());
  const int steps[w] = {5, 3, 1};
  const size_t n = 1000;
  auto input = [](int r, int k, size_t i) { return static_cast<float>((r + 1) * 10 + k + static_cast<int>(i % 7)); };
  std::vector<Status> st(w), joined(w);
  std::vector<uint32_t> last(w, 99);
  std::vector<std::vector<std::vector<float>>> got(w);
  std::vector<std::vector<int64_t>> maxes(w);
  c.OnEveryWorker([&](int r) {
    for (int k = 0; k < steps[r] && st[r].ok(); ++k) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = input(r, k, i);
      AllReduceOptions avg;
      avg.op = ReduceOp::kAverage;
      avg.algorithm = k % 2 == 0 ? AllReduceAlgorithm::kRing : AllReduceAlgorithm::kDirect;
      avg.segment_bytes = 512;
      st[r] = c.worker(r).communicator().AllReduce(v.data(), v.data(), n, DataType::kFloat32, avg);
      got[r].push_back(v);
      AllReduceOptions mx;
      mx.op = ReduceOp::kMax;
      int64_t m = -5 * (r + 1) - k;
      if (st[r].ok()) st[r] = c.worker(r).communicator().AllReduce(&m, &m, 1, DataType::kInt64, mx);
      maxes[r].push_back(m);
    }
    joined[r] = c.worker(r).communicator().JoinCollectives(CollectiveOptions{}, milliseconds(30000), &last[r]);
  });
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    ASSERT_TRUE(joined[r].ok()) << "rank " << r << ": " << joined[r];
    EXPECT_EQ(last[r], 0u) << "rank " << r;  // rank 0 ran the most steps
    for (int k = 0; k < steps[r]; ++k) {
      int64_t want_max = INT64_MIN;
      for (int q = 0; q < w; ++q) {
        if (steps[q] > k) want_max = std::max<int64_t>(want_max, -5 * (q + 1) - k);
      }
      EXPECT_EQ(maxes[r][k], want_max) << "rank " << r << " step " << k;
      for (size_t i = 0; i < n; i += 97) {
        double sum = 0;
        for (int q = 0; q < w; ++q) {
          if (steps[q] > k) sum += input(q, k, i);
        }
        ASSERT_NEAR(got[r][k][i], sum / w, 1e-4) << "rank " << r << " step " << k << " element " << i;
      }
    }
  }
  // A collective other than AllReduce while a member joined fails on every member still
  // running, and the joined member carries on to the end.
  std::vector<Status> bc(w);
  c.OnEveryWorker([&](int r) {
    if (r == 2) {
      bc[r] = c.worker(r).communicator().JoinCollectives(CollectiveOptions{}, milliseconds(30000), &last[r]);
      return;
    }
    std::vector<float> v(4, static_cast<float>(r));
    bc[r] = c.worker(r).communicator().Broadcast(v.data(), 4, DataType::kFloat32, 0, CollectiveOptions{});
    EXPECT_EQ(bc[r].code(), StatusCode::kInvalidArgument) << bc[r];
    EXPECT_NE(bc[r].message().find("while rank(s) [2] joined"), std::string::npos) << bc[r];
    bc[r] = c.worker(r).communicator().JoinCollectives(CollectiveOptions{}, milliseconds(30000), &last[r]);
  });
  for (int r = 0; r < w; ++r) EXPECT_TRUE(bc[r].ok()) << "rank " << r << ": " << bc[r];
  EXPECT_TRUE(c.Finish().ok());
}

// The last Join round: a member whose Join descriptor arrived may leave (its own Join
// returned) before this member heard from every other one; that changes nothing. Here
// rank 0's descriptor to rank 2 is held back until rank 1 has returned and left.
TEST(CollectiveJoinTest, AMemberLeavingAfterTheLastRoundChangesNothing) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = testing::FastOptions();
  o.tolerate_worker_loss = true;
  SetTransportFactory(&o, injector);
  const int w = 3;
  LocalCluster c(1, w, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  const NodeId from = c.worker(0).id(), to = c.worker(2).id();
  FaultRule slow;
  slow.match = [from, to](NodeId peer, const Message& m) {
    return m.header.sender == from && peer == to && m.header.msg_type() == MsgType::kPeerTensor &&
           (m.header.offset & kCollectiveTagBit) != 0;
  };
  slow.action = FaultAction::kDelay;
  slow.delay_ms = 1500;
  injector->AddRule(slow);
  std::vector<Status> st(w);
  std::vector<uint32_t> last(w, 99);
  c.OnEveryWorker([&](int r) {
    st[r] = c.worker(r).communicator().JoinCollectives(CollectiveOptions{}, milliseconds(20000), &last[r]);
    if (r == 1) c.worker(1).Stop();  // leaves while rank 2 still waits for rank 0's word
  });
  for (int r = 0; r < w; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
}

// A member that leaves (Stop) right after its collective completed fails nobody, even
// when the scheduler's notice of its leaving arrives before the acknowledgements of what
// the others sent it (held back here): it received all of that, or its collective would
// not have completed.
TEST(CollectiveLeaveTest, AMemberThatLeavesRightAfterACollectiveFailsNobody) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = testing::FastOptions();
  o.tolerate_worker_loss = true;
  o.request_timeout_ms = 120000;  // a failure must come from the leave, not a deadline
  SetTransportFactory(&o, injector);
  const int w = 3;
  LocalCluster c(1, w, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  const NodeId leaver = c.worker(1).id(), held = c.worker(0).id();
  FaultRule late_acks;  // the leaver's acknowledgements to rank 0
  late_acks.match = [leaver, held](NodeId peer, const Message& m) {
    return m.header.sender == leaver && peer == held && m.header.msg_type() == MsgType::kReply &&
           (m.header.offset & kCollectiveTagBit) != 0;
  };
  late_acks.action = FaultAction::kDelay;
  late_acks.delay_ms = 3000;
  injector->AddRule(late_acks);
  std::vector<Status> st(w);
  std::vector<std::vector<int64_t>> in(w), out(w, std::vector<int64_t>(2 * w));
  for (int r = 0; r < w; ++r) in[r] = {r, 10 * r};
  CollectiveOptions opts;
  opts.name = "leave";
  c.OnEveryWorker([&](int r) {
    st[r] = c.worker(r).communicator().AllGather(in[r].data(), 2, DataType::kInt64,
                                                 out[r].data(), opts);
    if (r == 1) c.worker(1).Stop();
  });
  for (int r = 0; r < w; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(out[r], (std::vector<int64_t>{0, 0, 1, 10, 2, 20})) << "rank " << r;
  }
  // The survivors go on among themselves, and one including the leaver is refused.
  c.OnEveryWorker([&](int r) {
    if (r == 1) return;
    AllReduceOptions pair;
    pair.ranks = {0, 2};
    int32_t one = 1;
    st[r] = c.worker(r).communicator().AllReduce(&one, &one, 1, DataType::kInt32, pair);
    if (st[r].ok() && one != 2) st[r] = Internal("sum " + std::to_string(one));
  });
  for (int r : {0, 2}) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  int32_t x = 1;
  const Status all = c.worker(0).communicator().AllReduce(&x, &x, 1, DataType::kInt32, {});
  EXPECT_EQ(all.code(), StatusCode::kUnavailable) << all;
}

// A member that leaves without calling the collective the others are in: they fail at
// once (not at their deadline), each naming it.
TEST(CollectiveLeaveTest, AMemberThatLeavesWithoutCallingIsNamed) {
  Options o = testing::FastOptions();
  o.tolerate_worker_loss = true;
  o.request_timeout_ms = 120000;  // a failure must come from the leave, not a deadline
  const int w = 3;
  LocalCluster c(1, w, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  const NodeId leaver = c.worker(1).id();
  std::vector<Status> st(w);
  std::vector<std::vector<int64_t>> in(w, std::vector<int64_t>(2, 1)),
      out(w, std::vector<int64_t>(2 * w));
  CollectiveOptions opts;
  opts.name = "gone";
  c.OnEveryWorker([&](int r) {
    if (r == 1) {
      // Before or after the others posted theirs: the outcome is the same either way.
      std::this_thread::sleep_for(milliseconds(100));
      c.worker(1).Stop();
      return;
    }
    st[r] = c.worker(r).communicator().AllGather(in[r].data(), 2, DataType::kInt64,
                                                 out[r].data(), opts);
  });
  const std::string want =
      "AllGather 'gone' #0 failed: member rank 1 (node " + std::to_string(leaver) + ") died";
  for (int r : {0, 2}) {
    EXPECT_EQ(st[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << st[r];
    EXPECT_EQ(st[r].message(), want) << "rank " << r;
  }
}

TEST(ReduceKernelTest, IntegersWrapAndAveragesTruncate) {
  int32_t a[3] = {2147483647, -7, 7}, b[3] = {1, 0, 0};
  reduce::Combine(DataType::kInt32, ReduceOp::kSum, a, b, 3);
  EXPECT_EQ(a[0], -2147483647 - 1);  // wraps around
  reduce::Divide(DataType::kInt32, a + 1, 2, 2);
  EXPECT_EQ(a[1], -3);  // toward zero
  EXPECT_EQ(a[2], 3);
  uint8_t u[2] = {200, 3}, v[2] = {100, 200};
  reduce::Combine(DataType::kUInt8, ReduceOp::kSum, u, v, 2);
  EXPECT_EQ(u[0], 44);
  EXPECT_EQ(u[1], 203);
  float f[2] = {1.0f, NAN}, g[2] = {NAN, 2.0f};
  reduce::Combine(DataType::kFloat32, ReduceOp::kMin, f, g, 2);
  EXPECT_TRUE(std::isnan(f[0]) && std::isnan(f[1]));  // NaN propagates
  int64_t x[4];
  reduce::FillIdentity(DataType::kInt64, ReduceOp::kMin, x, 1);
  reduce::FillIdentity(DataType::kInt64, ReduceOp::kMax, x + 1, 1);
  reduce::FillIdentity(DataType::kInt64, ReduceOp::kProduct, x + 2, 1);
  reduce::FillIdentity(DataType::kInt64, ReduceOp::kAverage, x + 3, 1);
  EXPECT_EQ(x[0], INT64_MAX);
  EXPECT_EQ(x[1], INT64_MIN);
  EXPECT_EQ(x[2], 1);
  EXPECT_EQ(x[3], 0);
  int32_t s[2] = {5, -5};
  reduce::Scale(DataType::kInt32, s, 2, 0.5);  // 2.5 and -2.5 round to nearest, away from 0
  EXPECT_EQ(s[0], 3);
  EXPECT_EQ(s[1], -3);
  EXPECT_EQ(ParseDataType("fp16").value(), DataType::kFloat16);
  EXPECT_EQ(ParseReduceOp("Average").value(), ReduceOp::kAverage);
  EXPECT_FALSE(ParseDataType("complex64").ok());
}

}  // namespace
}  // namespace ps
