// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Options::part_bytes: a dense or sparse request's share for one server above the
// threshold goes as several messages, all in flight at once. Values are reassembled exactly around the
// threshold, the worker's message counter shows the parts, a lost part fails the whole
// request (naming the part), and the parts of concurrent requests never mix.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;
constexpr int64_t kPartBytes = 64 << 10;  // 16384 floats
constexpr uint64_t kPartElems = kPartBytes / 4;

float G(uint64_t i) { return static_cast<float>(static_cast<int>(i % 251) - 125); }

Options PartOptions() {
  Options o = testing::FastOptions();
  o.part_bytes = kPartBytes;
  return o;
}

uint64_t Sent(Worker& w) { return w.stats().requests_sent; }

// One server: a table's whole share is one range, so the number of messages per request
// is exactly ceil(bytes / part_bytes).
TEST(PartsTest, ValuesAroundTheThresholdAndMessageCounts) {
  LocalCluster c(1, 1, "tcp", PartOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  struct Case {
    uint64_t elems;
    uint64_t parts;
    WireDType wire;
  };
  const Case cases[] = {
      {kPartElems - 1, 1, WireDType::kFloat32},      {kPartElems, 1, WireDType::kFloat32},
      {kPartElems + 1, 2, WireDType::kFloat32},      {5 * kPartElems + 7, 6, WireDType::kFloat32},
      {2 * kPartElems, 1, WireDType::kFloat16},  // 2 bytes per element on the wire
      {2 * kPartElems + 1, 2, WireDType::kBFloat16},
  };
  int k = 0;
  for (const Case& cs : cases) {
    TableSpec spec = TableSpec::Dense("t" + std::to_string(k++), cs.elems);
    spec.wire_dtype = cs.wire;
    auto t = w.DeclareTable(spec);
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<float> g(cs.elems), out(cs.elems, -1.0f);
    for (uint64_t i = 0; i < cs.elems; ++i) g[i] = G(i);
    uint64_t before = Sent(w);
    ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), cs.elems), kWait).ok());
    EXPECT_EQ(Sent(w) - before, cs.parts) << cs.elems;
    before = Sent(w);
    ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), cs.elems), kWait).ok());
    EXPECT_EQ(Sent(w) - before, cs.parts) << cs.elems;
    for (uint64_t i = 0; i < cs.elems; ++i) ASSERT_EQ(out[i], g[i]) << cs.elems << " at " << i;
    before = Sent(w);
    ASSERT_TRUE(w.Wait(w.PushPull(*t, g.data(), out.data(), cs.elems), kWait).ok());
    EXPECT_EQ(Sent(w) - before, cs.parts) << cs.elems;
    for (uint64_t i = 0; i < cs.elems; ++i) ASSERT_EQ(out[i], 2 * g[i]) << cs.elems << " at " << i;
  }
  // part_bytes 0 would send each of these as one message: the counts above came from it.
  c.Finish();
}

// Two servers, several ranges each split, and PushMany/PullMany with a split tensor
// beside small fused ones; parts of concurrent requests on two tables never mix.
TEST(PartsTest, ManyServersConcurrentRequestsAndMultiTensor) {
  Options o = PartOptions();
  o.dense_chunk_elems = 50000;
  LocalCluster c(2, 1, "tcp", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = 300001;  // 7 chunks over 2 servers, each share several parts
  auto a = w.DeclareTable(TableSpec::Dense("a", n));
  auto b = w.DeclareTable(TableSpec::Dense("b", n));
  auto s = w.DeclareTable(TableSpec::Dense("small", 100));
  ASSERT_TRUE(a.ok() && b.ok() && s.ok());
  std::vector<float> ga(n), gb(n), gs(100, 3.0f);
  for (uint64_t i = 0; i < n; ++i) {
    ga[i] = G(i);
    gb[i] = -2 * G(i + 1);
  }
  std::vector<Ticket> tickets;
  for (int r = 0; r < 8; ++r) {
    tickets.push_back(w.Push(*a, ga.data(), n));
    tickets.push_back(w.Push(*b, gb.data(), n));
  }
  for (Ticket t : tickets) ASSERT_TRUE(w.Wait(t, kWait).ok());
  ASSERT_TRUE(w.Wait(w.PushMany({{*a, ga.data(), n}, {*s, gs.data(), 100}}), kWait).ok());
  std::vector<float> oa(n), ob(n), os(100);
  ASSERT_TRUE(
      w.Wait(w.PullMany({{*a, oa.data(), n}, {*b, ob.data(), n}, {*s, os.data(), 100}}), kWait)
          .ok());
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(oa[i], 9 * ga[i]) << i;
    ASSERT_EQ(ob[i], 8 * gb[i]) << i;
  }
  for (float v : os) ASSERT_EQ(v, 3.0f);
  c.Finish();
}

// A part that is lost (its message dropped) fails the whole request once its deadline
// passes, naming the part; the parts that arrived were applied (docs/wire-format.md);
// the next request on the table is not disturbed by the failed one.
TEST(PartsTest, ALostPartFailsTheWholeRequest) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = PartOptions();
  o.request_timeout_ms = 1500;
  SetTransportFactory(&o, injector);
  LocalCluster c(1, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = 4 * kPartElems;  // 4 parts
  auto t = w.DeclareTable(TableSpec::Dense("lossy", n));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<float> g(n, 1.0f), out(n);
  FaultRule drop;
  drop.match = [](NodeId, const Message& m) {
    return m.header.msg_type() == MsgType::kPush && m.header.part == 2;
  };
  drop.times = 1;
  const int rule = injector->AddRule(drop);
  Status st = w.Wait(w.Push(*t, g.data(), n), kWait);
  EXPECT_EQ(injector->Applied(rule), 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("part 2 of 4"), std::string::npos) << st;
  EXPECT_NE(st.message().find("may have applied its other parts"), std::string::npos) << st;
  Status pulled = w.Wait(w.Pull(*t, out.data(), n), kWait);
  ASSERT_TRUE(pulled.ok()) << pulled;
  for (uint64_t i = 0; i < n; ++i) {
    const bool lost = i >= 2 * kPartElems && i < 3 * kPartElems;
    ASSERT_EQ(out[i], lost ? 0.0f : 1.0f) << i;
  }
  ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), n), kWait).ok());
  ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), n), kWait).ok());
  for (uint64_t i = 0; i < n; ++i) {
    const bool lost = i >= 2 * kPartElems && i < 3 * kPartElems;
    ASSERT_EQ(out[i], lost ? 1.0f : 2.0f) << i;
  }
  c.Finish();
}

// A server that dies after some parts of a push were answered: the request fails
// Unavailable once the worker learns of the death (the heartbeat timeout, not the
// request's deadline), naming a part; the other server's parts were applied.
TEST(PartsTest, AServerDyingBetweenPartsFailsTheRequest) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = PartOptions();
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 1000;
  o.request_timeout_ms = 60000;
  o.dense_chunk_elems = 2 * kPartElems;  // server 0: chunk 0, server 1: chunk 1
  SetTransportFactory(&o, injector);
  LocalCluster c(2, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = 4 * kPartElems;  // 2 parts per server
  auto t = w.DeclareTable(TableSpec::Dense("dies", n));
  ASSERT_TRUE(t.ok()) << t.status();
  const NodeId victim = c.server(1).id();
  // The victim answers its first part, never its second, then is cut off.
  injector->AddRule({[victim](NodeId, const Message& m) {
                       return m.header.sender == victim && m.header.msg_type() == MsgType::kReply &&
                              m.header.part % 2 == 1;
                     },
                     FaultAction::kDrop});
  std::vector<float> g(n, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Ticket tk = w.Push(*t, g.data(), n);
  std::this_thread::sleep_for(200ms);
  injector->Isolate(victim);
  Status st = w.Wait(tk, 20s);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("of 4"), std::string::npos) << st;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

// bsp tables count one push per worker and step per range: never split.
TEST(PartsTest, SynchronizedTablesAreNotSplit) {
  LocalCluster c(1, 1, "tcp", PartOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = 3 * kPartElems;
  TableSpec spec = TableSpec::Dense("bsp", n);
  spec.sync = SyncMode::kBsp;
  auto t = w.DeclareTable(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<float> g(n, 2.0f), out(n);
  const uint64_t before = Sent(w);
  ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), n), kWait).ok());
  EXPECT_EQ(Sent(w) - before, 1u);
  ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), n), kWait).ok());
  for (float v : out) ASSERT_EQ(v, 2.0f);
  c.Finish();
}

// Sparse: a share of more than part_bytes on the wire (8 bytes of key and dim values per
// unique key) goes as parts of equal key counts; duplicates are summed before counting.
TEST(PartsTest, SparseValuesAroundTheThresholdAndMessageCounts) {
  LocalCluster c(1, 1, "tcp", PartOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  constexpr uint32_t kDim = 4;
  struct Case {
    uint64_t unique;  // distinct keys
    int copies;       // each key appears this many times in the request
    uint64_t parts;
    WireDType wire;
  };
  const uint64_t at = kPartBytes / (8 + 4 * kDim);  // 2730 keys fit one part in fp32
  const Case cases[] = {
      {at, 1, 1, WireDType::kFloat32},
      {at + 1, 1, 2, WireDType::kFloat32},
      {10000, 1, 4, WireDType::kFloat32},
      {10000, 3, 4, WireDType::kFloat32},                           // 30000 keys, 10000 unique
      {kPartBytes / (8 + 2 * kDim), 1, 1, WireDType::kFloat16},     // 4096
      {kPartBytes / (8 + 2 * kDim) + 1, 1, 2, WireDType::kBFloat16},
  };
  int k = 0;
  for (const Case& cs : cases) {
    SCOPED_TRACE("unique=" + std::to_string(cs.unique) + " copies=" + std::to_string(cs.copies));
    TableSpec spec = TableSpec::Sparse("s" + std::to_string(k++), kDim);
    spec.wire_dtype = cs.wire;
    auto t = w.DeclareTable(spec);
    ASSERT_TRUE(t.ok()) << t.status();
    const uint64_t n = cs.unique * cs.copies;
    std::vector<Key> keys(n);
    std::vector<float> rows(n * kDim), out(n * kDim, -1.0f);
    for (uint64_t i = 0; i < n; ++i) {
      keys[i] = (i % cs.unique) * 7919 + 3;
      for (uint32_t d = 0; d < kDim; ++d) rows[i * kDim + d] = G(i % cs.unique + d);
    }
    uint64_t before = Sent(w);
    ASSERT_TRUE(w.Wait(w.PushSparse(*t, keys.data(), n, rows.data(), rows.size()), kWait).ok());
    EXPECT_EQ(Sent(w) - before, cs.parts);
    before = Sent(w);
    ASSERT_TRUE(w.Wait(w.PullSparse(*t, keys.data(), n, out.data(), out.size()), kWait).ok());
    EXPECT_EQ(Sent(w) - before, cs.parts);
    for (uint64_t i = 0; i < n; ++i) {
      for (uint32_t d = 0; d < kDim; ++d) {
        ASSERT_EQ(out[i * kDim + d], cs.copies * G(i % cs.unique + d)) << "key " << i;
      }
    }
    // Assign goes in parts too (the last row of a duplicated key wins).
    before = Sent(w);
    ASSERT_TRUE(w.Wait(w.AssignSparse(*t, keys.data(), n, rows.data(), rows.size()), kWait).ok());
    EXPECT_EQ(Sent(w) - before, cs.parts);
    ASSERT_TRUE(w.Wait(w.PullSparse(*t, keys.data(), n, out.data(), out.size()), kWait).ok());
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i * kDim + 1], G(i % cs.unique + 1)) << "key " << i;
    }
  }
  c.Finish();
}

// A sparse pull writes every caller row from the reply of the part that carries its key
// (PsRequests::ScatterReplies): three servers, each share split into several parts, keys
// in random order with repeats, and a narrowed table; every row exact.
TEST(PartsTest, SparsePullOfShuffledRepeatedKeysOverSplitSharesIsExact) {
  LocalCluster c(3, 1, "tcp", PartOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  constexpr uint32_t kDim = 8;
  const uint64_t unique = 20000;  // about 6700 keys a server: 5 parts each in fp32
  int k = 0;
  for (WireDType wire : {WireDType::kFloat32, WireDType::kBFloat16}) {
    SCOPED_TRACE("wire " + std::to_string(static_cast<int>(wire)));
    TableSpec spec = TableSpec::Sparse("shuffled" + std::to_string(k++), kDim);
    spec.wire_dtype = wire;
    auto t = w.DeclareTable(spec);
    ASSERT_TRUE(t.ok()) << t.status();
    // Row of key id u: G(u + d), which bfloat16 holds exactly (integers below 256).
    std::vector<Key> ukeys(unique);
    std::vector<float> urows(unique * kDim);
    for (uint64_t u = 0; u < unique; ++u) {
      ukeys[u] = u * 104729 + 11;
      for (uint32_t d = 0; d < kDim; ++d) urows[u * kDim + d] = G(u + d);
    }
    ASSERT_TRUE(
        w.Wait(w.AssignSparse(*t, ukeys.data(), unique, urows.data(), urows.size()), kWait).ok());
    // A pull of every key once plus a quarter of them again, shuffled.
    std::vector<uint64_t> ids(unique + unique / 4);
    for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i % unique;
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(3 + k));
    std::vector<Key> keys(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) keys[i] = ukeys[ids[i]];
    std::vector<float> out(ids.size() * kDim, -1000.0f);
    const uint64_t before = Sent(w);
    ASSERT_TRUE(w.Wait(w.PullSparse(*t, keys.data(), keys.size(), out.data(), out.size()), kWait)
                    .ok());
    EXPECT_GE(Sent(w) - before, 6u);  // more parts than servers: the shares were split
    for (size_t i = 0; i < ids.size(); ++i) {
      for (uint32_t d = 0; d < kDim; ++d) {
        ASSERT_EQ(out[i * kDim + d], G(ids[i] + d)) << "position " << i << " column " << d;
      }
    }
  }
  c.Finish();
}

// A lost part of a sparse push fails the whole request, naming the part and its unique
// keys; the keys of the other parts were applied.
TEST(PartsTest, ALostSparsePartFailsTheWholeRequest) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = PartOptions();
  o.request_timeout_ms = 1500;
  SetTransportFactory(&o, injector);
  LocalCluster c(1, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  constexpr uint32_t kDim = 8;
  const uint64_t n = 3 * (kPartBytes / (8 + 4 * kDim));  // 3 parts of 1638 keys
  auto t = w.DeclareTable(TableSpec::Sparse("lossy-sparse", kDim));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<Key> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = i;
  std::vector<float> rows(n * kDim, 1.0f), out(n * kDim);
  FaultRule drop;
  drop.match = [](NodeId, const Message& m) {
    return m.header.msg_type() == MsgType::kPush && m.header.part == 1;
  };
  drop.times = 1;
  const int rule = injector->AddRule(drop);
  Status st = w.Wait(w.PushSparse(*t, keys.data(), n, rows.data(), rows.size()), kWait);
  EXPECT_EQ(injector->Applied(rule), 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("part 1 of 3 (unique keys 1638..3276"), std::string::npos) << st;
  ASSERT_TRUE(w.Wait(w.PullSparse(*t, keys.data(), n, out.data(), out.size()), kWait).ok());
  // One server: the unique keys keep the request's order, so part 1 held keys 1638..3275.
  for (uint64_t i = 0; i < n; ++i) {
    const bool lost = i >= n / 3 && i < 2 * n / 3;
    ASSERT_EQ(out[i * kDim], lost ? 0.0f : 1.0f) << i;
  }
  c.Finish();
}

}  // namespace
}  // namespace ps
