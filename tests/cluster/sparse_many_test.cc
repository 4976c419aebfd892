// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Several sparse tables in one request (Worker::PushSparseMany/PullSparseMany): the
// result equals the same pushes and pulls made table by table, bit for bit (bounded
// tables, adagrad, worker caches, fp16 and ssp tables included); one message goes to
// each server per call; entries naming one table are merged (sums and deduplication
// once); bad arguments fail before anything is sent; a malformed fused sparse message
// from a member is refused whole with an error reply; replication keeps fused pushes
// through a primary's death. The frame checks of the fused sparse layout are tested
// here too.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "local_cluster.h"
#include "server/request.h"
#include "server/store.h"
#include "server/sync_policy.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"
#include "transport/message.h"
#include "transport/transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;

Options InprocOptions(std::shared_ptr<TransportFactory> factory = nullptr) {
  Options o = testing::FastOptions();
  SetTransportFactory(&o, factory ? std::move(factory) : std::make_shared<InProcessNetwork>());
  return o;
}

// The tables of the tests: different dims and rules, one bounded (LRU, capacity below
// the keys a server gets, so that rows are evicted), seeded uniform initial values.
std::vector<TableSpec> MixedSpecs() {
  std::vector<TableSpec> specs;
  TableSpec a = TableSpec::Sparse("user", 4, UpdateRule::kSum);
  TableSpec b = TableSpec::Sparse("item", 8, UpdateRule::kAdagrad);
  b.learning_rate = 0.1f;
  TableSpec c = TableSpec::Sparse("bounded", 3, UpdateRule::kSgd);
  c.learning_rate = 0.5f;
  c.capacity = 40;
  c.eviction = Eviction::kLru;
  TableSpec d = TableSpec::Sparse("wide", 16, UpdateRule::kAdagrad);
  d.learning_rate = 0.05f;
  for (TableSpec* s : {&a, &b, &c, &d}) {
    s->init = Initializer::kUniform;
    s->init_a = -1.0f;
    s->init_b = 1.0f;
    s->seed = 11;
    specs.push_back(*s);
  }
  return specs;
}

std::vector<TableId> Declare(Worker& w, const std::vector<TableSpec>& specs) {
  std::vector<TableId> ids;
  for (const TableSpec& s : specs) {
    auto id = w.DeclareTable(s);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.ok() ? *id : kInvalidTable);
  }
  return ids;
}

// One step's keys and gradients per table: repeated keys included.
struct Batch {
  std::vector<std::vector<Key>> keys;
  std::vector<std::vector<float>> rows;
};

Batch MakeBatch(const std::vector<TableSpec>& specs, std::mt19937_64& rng, size_t n) {
  Batch b;
  for (const TableSpec& s : specs) {
    std::vector<Key> k(n);
    for (auto& x : k) x = rng() % (4 * n);  // about a quarter repeated
    std::vector<float> r(n * s.dim);
    for (auto& x : r) x = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 256.0f;
    b.keys.push_back(std::move(k));
    b.rows.push_back(std::move(r));
  }
  return b;
}

uint64_t MessagesTo(const Worker& w, NodeId peer) {
  const TrafficStats t = w.traffic();
  auto it = t.peers.find(peer);
  return it == t.peers.end() ? 0 : it->second.messages_sent;
}

std::vector<NodeId> ServerIds(LocalCluster& c) {
  std::vector<NodeId> ids;
  for (int i = 0; i < c.num_servers(); ++i) ids.push_back(c.server(i).id());
  return ids;
}

// Pulls `keys` of every table, table by table.
std::vector<std::vector<float>> PullEach(Worker& w, const std::vector<TableId>& ids,
                                         const std::vector<TableSpec>& specs,
                                         const std::vector<std::vector<Key>>& keys) {
  std::vector<std::vector<float>> out(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    out[t].assign(keys[t].size() * specs[t].dim, -7.0f);
    Status s = w.Wait(
        w.PullSparse(ids[t], keys[t].data(), keys[t].size(), out[t].data(), out[t].size()), kWait);
    EXPECT_TRUE(s.ok()) << s;
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// (a) PushSparseMany/PullSparseMany over four tables (sum, adagrad, a bounded sgd table,
// adagrad of dim 16) on two servers hold and return exactly what the same pushes and
// pulls made one table at a time do.
TEST(SparseManyTest, EqualsTableByTableBitForBit) {
  const std::vector<TableSpec> specs = MixedSpecs();
  LocalCluster many(2, 1, "inproc", InprocOptions());
  LocalCluster each(2, 1, "inproc", InprocOptions());
  ASSERT_TRUE(many.Start().ok());
  ASSERT_TRUE(each.Start().ok());
  Worker& wm = many.worker(0);
  Worker& we = each.worker(0);
  const std::vector<TableId> im = Declare(wm, specs);
  const std::vector<TableId> ie = Declare(we, specs);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Batch b = MakeBatch(specs, rng, 120);
    std::vector<SparseRef> refs;
    for (size_t t = 0; t < specs.size(); ++t) {
      refs.push_back(
          {im[t], b.keys[t].data(), b.keys[t].size(), b.rows[t].data(), b.rows[t].size()});
      ASSERT_TRUE(we.Wait(we.PushSparse(ie[t], b.keys[t].data(), b.keys[t].size(), b.rows[t].data(),
                                        b.rows[t].size()),
                          kWait)
                      .ok());
    }
    Status s = wm.Wait(wm.PushSparseMany(refs), kWait);
    ASSERT_TRUE(s.ok()) << s;
    // Pulls of the same keys: one request against four.
    std::vector<std::vector<float>> got(specs.size());
    std::vector<SparseOut> outs;
    for (size_t t = 0; t < specs.size(); ++t) {
      got[t].assign(b.keys[t].size() * specs[t].dim, -7.0f);
      outs.push_back({im[t], b.keys[t].data(), b.keys[t].size(), got[t].data(), got[t].size()});
    }
    s = wm.Wait(wm.PullSparseMany(outs), kWait);
    ASSERT_TRUE(s.ok()) << s;
    const std::vector<std::vector<float>> want = PullEach(we, ie, specs, b.keys);
    for (size_t t = 0; t < specs.size(); ++t) {
      EXPECT_TRUE(SameBits(got[t], want[t])) << specs[t].name;
    }
  }
  // The bounded table evicted rows on both clusters alike.
  uint64_t evicted_many = 0, evicted_each = 0;
  for (int i = 0; i < 2; ++i) {
    evicted_many += many.server(i).table_stats().at(im[2]).evicted;
    evicted_each += each.server(i).table_stats().at(ie[2]).evicted;
  }
  EXPECT_GT(evicted_many, 0u);
  EXPECT_EQ(evicted_many, evicted_each);
  EXPECT_TRUE(many.Finish().ok());
  EXPECT_TRUE(each.Finish().ok());
}

// (b) N tables on S servers: one message per server per call (S, not N x S), for pushes
// and for pulls, and the servers count one request each (over tcp).
TEST(SparseManyTest, OneMessagePerServerPerCall) {
  for (int servers : {2, 3}) {
    SCOPED_TRACE(std::to_string(servers) + " servers");
    const std::vector<TableSpec> specs = MixedSpecs();
    LocalCluster c(servers, 1, "tcp");  // ZeroMQ, as between processes
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    const std::vector<TableId> ids = Declare(w, specs);
    std::mt19937_64 rng(9);
    const Batch b = MakeBatch(specs, rng, 200);  // every server gets keys of every table
    std::vector<SparseRef> refs;
    std::vector<std::vector<float>> got(specs.size());
    std::vector<SparseOut> outs;
    for (size_t t = 0; t < specs.size(); ++t) {
      refs.push_back(
          {ids[t], b.keys[t].data(), b.keys[t].size(), b.rows[t].data(), b.rows[t].size()});
      got[t].resize(b.rows[t].size());
      outs.push_back({ids[t], b.keys[t].data(), b.keys[t].size(), got[t].data(), got[t].size()});
    }
    std::map<NodeId, uint64_t> before;
    uint64_t requests_before = 0;
    for (NodeId s : ServerIds(c)) before[s] = MessagesTo(w, s);
    for (int i = 0; i < servers; ++i) requests_before += c.server(i).stats().messages_received;
    ASSERT_TRUE(w.Wait(w.PushSparseMany(refs), kWait).ok());
    for (NodeId s : ServerIds(c))
      EXPECT_EQ(MessagesTo(w, s) - before[s], 1u) << "push, server " << s;
    ASSERT_TRUE(w.Wait(w.PullSparseMany(outs), kWait).ok());
    for (NodeId s : ServerIds(c))
      EXPECT_EQ(MessagesTo(w, s) - before[s], 2u) << "pull, server " << s;
    uint64_t requests_after = 0;
    for (int i = 0; i < servers; ++i) requests_after += c.server(i).stats().messages_received;
    EXPECT_EQ(requests_after - requests_before, 2u * servers);
    EXPECT_TRUE(c.Finish().ok());
  }
}

// A server's share above part_bytes goes as several fused messages (none above it), and
// the values are still exact.
TEST(SparseManyTest, ASharesAbovePartBytesIsSplitIntoSeveralFusedMessages) {
  Options o = InprocOptions();
  o.part_bytes = 4096;
  LocalCluster c(2, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const std::vector<TableId> ids = Declare(
      w, {TableSpec::Sparse("a", 4), TableSpec::Sparse("b", 12), TableSpec::Sparse("c", 1)});
  const uint32_t dims[] = {4, 12, 1};
  std::vector<std::vector<Key>> keys(3);
  std::vector<std::vector<float>> rows(3);
  std::vector<SparseRef> refs;
  for (size_t t = 0; t < 3; ++t) {
    for (Key k = 0; k < 300; ++k) keys[t].push_back(k * 7919 + t);
    for (size_t i = 0; i < 300 * dims[t]; ++i) rows[t].push_back(static_cast<float>(i % 13));
    refs.push_back({ids[t], keys[t].data(), 300, rows[t].data(), rows[t].size()});
  }
  const uint64_t before = w.stats().requests_sent;
  ASSERT_TRUE(w.Wait(w.PushSparseMany(refs), kWait).ok());
  // 300 x (12 + 20 + 56) bytes = 26 400 bytes of keys and rows: at least 7 messages of
  // at most 4096 bytes, and at most one per 4096 bytes plus one per server.
  const uint64_t sent = w.stats().requests_sent - before;
  EXPECT_GE(sent, 7u);
  EXPECT_LE(sent, 26400u / 4096 + 1 + 2);
  for (size_t t = 0; t < 3; ++t) {
    std::vector<float> got(rows[t].size());
    std::vector<SparseOut> outs = {{ids[t], keys[t].data(), 300, got.data(), got.size()}};
    ASSERT_TRUE(w.Wait(w.PullSparseMany(outs), kWait).ok());
    EXPECT_EQ(got, rows[t]) << t;
  }
  EXPECT_TRUE(c.Finish().ok());
}

// (c) Two entries on one table with overlapping keys (and a key repeated inside one):
// the push sums every occurrence and sends each unique key once; the pull asks for each
// unique key once and fills both entries.
TEST(SparseManyTest, EntriesOfOneTableAreMergedAndDeduplicatedOnce) {
  LocalCluster c(2, 1, "inproc", InprocOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const std::vector<TableId> ids =
      Declare(w, {TableSpec::Sparse("t", 2), TableSpec::Sparse("u", 3)});
  const std::vector<Key> k1 = {1, 2, 3, 2};
  const std::vector<Key> k2 = {3, 4, 1};
  const std::vector<float> r1 = {1, 10, 2, 20, 3, 30, 4, 40};
  const std::vector<float> r2 = {5, 50, 6, 60, 7, 70};
  const std::vector<Key> ku = {9};
  const std::vector<float> ru = {1, 2, 3};
  const uint64_t bytes_before = w.traffic().tables[ids[0]].bytes_sent;
  ASSERT_TRUE(w.Wait(w.PushSparseMany({{ids[0], k1.data(), 4, r1.data(), 8},
                                       {ids[1], ku.data(), 1, ru.data(), 3},
                                       {ids[0], k2.data(), 3, r2.data(), 6}}),
                     kWait)
                  .ok());
  // Table t: 4 unique keys sent once each (8 bytes of key, 2 floats).
  EXPECT_EQ(w.traffic().tables[ids[0]].bytes_sent - bytes_before, 4u * (8 + 2 * 4));
  std::vector<float> o1(8), o2(6), ou(3);
  ASSERT_TRUE(w.Wait(w.PullSparseMany({{ids[0], k1.data(), 4, o1.data(), 8},
                                       {ids[1], ku.data(), 1, ou.data(), 3},
                                       {ids[0], k2.data(), 3, o2.data(), 6}}),
                     kWait)
                  .ok());
  // key 1: 1 + 7; key 2: 2 + 4; key 3: 3 + 5; key 4: 6.
  EXPECT_EQ(o1, (std::vector<float>{8, 80, 6, 60, 8, 80, 6, 60}));
  EXPECT_EQ(o2, (std::vector<float>{8, 80, 6, 60, 8, 80}));
  EXPECT_EQ(ou, ru);
  // The pull sent each unique key of t once (keys only: 8 bytes each).
  const uint64_t after_push = w.traffic().tables[ids[0]].bytes_sent;
  EXPECT_EQ(after_push - bytes_before, 4u * (8 + 2 * 4) + 4u * 8);
  EXPECT_TRUE(c.Finish().ok());
}

// (d) Bad arguments: an unknown table, a dense table, a wrong rows_len, null keys or
// rows. InvalidArgument naming the entry and the table, nothing sent, nothing changed.
TEST(SparseManyTest, BadEntriesFailBeforeAnythingIsSent) {
  LocalCluster c(2, 1, "inproc", InprocOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const std::vector<TableId> ids =
      Declare(w, {TableSpec::Sparse("emb", 2), TableSpec::Dense("dense_w", 10)});
  const TableId emb = ids[0], dense = ids[1];
  const std::vector<Key> keys = {1, 2, 3};
  const std::vector<float> rows = {1, 1, 2, 2, 3, 3};
  ASSERT_TRUE(w.Wait(w.PushSparse(emb, keys.data(), 3, rows.data(), 6), kWait).ok());
  const std::vector<std::vector<float>> before =
      PullEach(w, {emb}, {TableSpec::Sparse("emb", 2)}, {keys});
  const uint64_t sent_before = w.stats().requests_sent;
  const SparseRef good{emb, keys.data(), 3, rows.data(), 6};
  struct Case {
    SparseRef bad;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {{999, keys.data(), 3, rows.data(), 6}, {"entry 1", "id 999", "unknown table"}},
      {{dense, keys.data(), 3, rows.data(), 6}, {"entry 1", "'dense_w'", "dense"}},
      {{emb, keys.data(), 3, rows.data(), 5}, {"entry 1", "'emb'", "need 6 values, got 5"}},
      {{emb, nullptr, 3, rows.data(), 6}, {"entry 1", "'emb'", "null"}},
      {{emb, keys.data(), 3, nullptr, 6}, {"entry 1", "'emb'", "null"}},
  };
  for (const Case& k : cases) {
    Status s = w.Wait(w.PushSparseMany({good, k.bad}), kWait);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    for (const std::string& part : k.says)
      EXPECT_NE(s.message().find(part), std::string::npos) << s;
    std::vector<float> out(6);
    s = w.Wait(w.PullSparseMany({{emb, keys.data(), 3, out.data(), 6},
                                 {k.bad.table, k.bad.keys, k.bad.num_keys,
                                  k.bad.rows ? out.data() : nullptr, k.bad.rows_len}}),
               kWait);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    for (const std::string& part : k.says)
      EXPECT_NE(s.message().find(part), std::string::npos) << s;
  }
  EXPECT_EQ(w.stats().requests_sent, sent_before) << "nothing may be sent";
  EXPECT_EQ(PullEach(w, {emb}, {TableSpec::Sparse("emb", 2)}, {keys}), before);
  // An empty call completes at once, OK.
  EXPECT_TRUE(w.Wait(w.PushSparseMany({}), kWait).ok());
  EXPECT_TRUE(w.Wait(w.PullSparseMany({}), kWait).ok());
  EXPECT_TRUE(c.Finish().ok());
}

// Tables that do not fuse travel as their own parts of the same request: fp16 on the
// wire, ssp (its clock counts the call as one step), and a worker cache (pulls answered
// from it). The results equal the single-table calls', bit for bit, cache hits included.
TEST(SparseManyTest, UnfusedTablesTravelAsTheirOwnPartsOfTheRequest) {
  std::vector<TableSpec> specs;
  specs.push_back(TableSpec::Sparse("plain", 4, UpdateRule::kSum));
  TableSpec half = TableSpec::Sparse("half", 4, UpdateRule::kSum);
  half.wire_dtype = WireDType::kFloat16;
  specs.push_back(half);
  TableSpec stale = TableSpec::Sparse("stale", 2, UpdateRule::kSgd);
  stale.sync = SyncMode::kSsp;
  stale.staleness = 1;
  stale.learning_rate = 0.5f;
  specs.push_back(stale);
  TableSpec cached = TableSpec::Sparse("cached", 3, UpdateRule::kSum);
  cached.cache_rows = 1000;
  cached.cache_staleness = 2;
  specs.push_back(cached);
  LocalCluster many(2, 1, "inproc", InprocOptions());
  LocalCluster each(2, 1, "inproc", InprocOptions());
  ASSERT_TRUE(many.Start().ok());
  ASSERT_TRUE(each.Start().ok());
  Worker& wm = many.worker(0);
  Worker& we = each.worker(0);
  const std::vector<TableId> im = Declare(wm, specs);
  const std::vector<TableId> ie = Declare(we, specs);
  std::mt19937_64 rng(17);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Batch b = MakeBatch(specs, rng, 50);
    std::vector<std::vector<float>> got(specs.size());
    std::vector<SparseOut> outs;
    for (size_t t = 0; t < specs.size(); ++t) {
      got[t].assign(b.rows[t].size(), -7.0f);
      outs.push_back({im[t], b.keys[t].data(), b.keys[t].size(), got[t].data(), got[t].size()});
    }
    ASSERT_TRUE(wm.Wait(wm.PullSparseMany(outs), kWait).ok());
    const std::vector<std::vector<float>> want = PullEach(we, ie, specs, b.keys);
    for (size_t t = 0; t < specs.size(); ++t)
      EXPECT_TRUE(SameBits(got[t], want[t])) << specs[t].name;
    std::vector<SparseRef> refs;
    for (size_t t = 0; t < specs.size(); ++t) {
      refs.push_back(
          {im[t], b.keys[t].data(), b.keys[t].size(), b.rows[t].data(), b.rows[t].size()});
      ASSERT_TRUE(we.Wait(we.PushSparse(ie[t], b.keys[t].data(), b.keys[t].size(), b.rows[t].data(),
                                        b.rows[t].size()),
                          kWait)
                      .ok());
    }
    ASSERT_TRUE(wm.Wait(wm.PushSparseMany(refs), kWait).ok());
  }
  EXPECT_GT(wm.stats().cache_hits, 0u);
  EXPECT_EQ(wm.stats().cache_hits, we.stats().cache_hits);
  EXPECT_EQ(wm.stats().cache_misses, we.stats().cache_misses);
  EXPECT_TRUE(many.Finish().ok());
  EXPECT_TRUE(each.Finish().ok());
}

// --- A member that sends a malformed fused sparse message --------------------------------

// A transport factory whose transports let the test rewrite the fused sparse requests a
// node sends (the rest pass untouched): a worker then sends exactly the bytes the test
// chooses, from a member's connection, and gets the server's answer.
class RewritingNetwork : public TransportFactory {
 public:
  using Rewrite = std::function<void(NodeId peer, Message* msg)>;
  explicit RewritingNetwork(std::shared_ptr<TransportFactory> inner) : inner_(std::move(inner)) {}

  std::unique_ptr<Transport> Create(const TransportOptions& options) override {
    return std::make_unique<Rewriting>(inner_->Create(options), this);
  }
  void Set(Rewrite r) {
    MutexLock lock(&mu_);
    rewrite_ = std::move(r);
  }

 private:
  class Rewriting final : public Transport {
   public:
    Rewriting(std::unique_ptr<Transport> inner, RewritingNetwork* net)
        : inner_(std::move(inner)), net_(net) {}
    StatusOr<std::string> Bind(const std::string& a, const std::string& h) override {
      return inner_->Bind(a, h);
    }
    Status Connect(NodeId p, const std::string& e, const std::string& i) override {
      return inner_->Connect(p, e, i);
    }
    void Disconnect(NodeId p) override { inner_->Disconnect(p); }
    bool IsConnected(NodeId p) const override { return inner_->IsConnected(p); }
    Status Send(NodeId peer, Message&& msg, int timeout_ms) override {
      const Header& h = msg.header;
      if (h.fused() && h.sparse() && h.msg_type() != MsgType::kReply) {
        MutexLock lock(&net_->mu_);
        if (net_->rewrite_) net_->rewrite_(peer, &msg);
      }
      return inner_->Send(peer, std::move(msg), timeout_ms);
    }
    Status Recv(Message* msg, int timeout_ms) override { return inner_->Recv(msg, timeout_ms); }
    void SetSharedMemoryPeers(std::vector<std::string> ids) override {
      inner_->SetSharedMemoryPeers(std::move(ids));
    }
    void Close() override { inner_->Close(); }

   private:
    std::unique_ptr<Transport> inner_;
    RewritingNetwork* const net_;
  };

  const std::shared_ptr<TransportFactory> inner_;
  Mutex mu_;
  Rewrite rewrite_ GUARDED_BY(mu_);
};

std::vector<FusedSparseSegment> SegmentsOf(const Message& m) {
  std::vector<FusedSparseSegment> segs(m.frames[0].size() / sizeof(FusedSparseSegment));
  std::memcpy(segs.data(), m.frames[0].data(), m.frames[0].size());
  return segs;
}

void SetSegments(Message* m, const std::vector<FusedSparseSegment>& segs) {
  m->frames[0] = Frame::Copy(segs.data(), segs.size() * sizeof(FusedSparseSegment));
}

// (e) Each fused sparse push carries two segments, the second one made bad in transit:
// its table dense or unknown, its dim wrong (frames resized to match), a key another
// server holds, or the rows frame cut short. Every server answers with an error and
// applies neither segment.
TEST(SparseManyTest, AMalformedFusedSparseMessageChangesNothing) {
  auto net = std::make_shared<RewritingNetwork>(std::make_shared<InProcessNetwork>());
  LocalCluster c(2, 1, "inproc", InprocOptions(net));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const std::vector<TableId> ids = Declare(
      w, {TableSpec::Sparse("first", 2), TableSpec::Sparse("second", 4), TableSpec::Dense("d", 8)});
  // A key held by each server, found by where a single-key push goes.
  std::map<NodeId, Key> key_on;
  {
    const std::vector<NodeId> servers = ServerIds(c);
    TableSpec probe_spec = TableSpec::Sparse("probe", 1);
    const TableId probe = *w.DeclareTable(probe_spec);
    for (Key k = 1; key_on.size() < 2 && k < 100; ++k) {
      std::map<NodeId, uint64_t> before;
      for (NodeId s : servers) before[s] = MessagesTo(w, s);
      const float one = 1.0f;
      ASSERT_TRUE(w.Wait(w.PushSparse(probe, &k, 1, &one, 1), kWait).ok());
      for (NodeId s : servers) {
        if (MessagesTo(w, s) > before[s]) key_on.emplace(s, k);
      }
    }
    ASSERT_EQ(key_on.size(), 2u);
  }
  std::vector<Key> keys;
  for (Key k = 1000; k < 1040; ++k) keys.push_back(k);  // both servers get keys of both
  std::vector<float> r1(keys.size() * 2, 1.0f), r2(keys.size() * 4, 2.0f);
  const std::vector<SparseRef> push = {{ids[0], keys.data(), keys.size(), r1.data(), r1.size()},
                                       {ids[1], keys.data(), keys.size(), r2.data(), r2.size()}};
  const std::vector<TableSpec> specs = {TableSpec::Sparse("first", 2),
                                        TableSpec::Sparse("second", 4)};
  const auto pull_both = [&] { return PullEach(w, {ids[0], ids[1]}, specs, {keys, keys}); };
  const std::vector<std::vector<float>> before = pull_both();

  struct Case {
    std::string name;
    RewritingNetwork::Rewrite rewrite;
    StatusCode code;
    std::string says;
  };
  const TableId dense = ids[2];
  const std::vector<Case> cases = {
      {"dense table",
       [&](NodeId, Message* m) {
         auto segs = SegmentsOf(*m);
         segs[1].table = dense;
         SetSegments(m, segs);
       },
       StatusCode::kInvalidArgument, "is dense"},
      {"unknown table",
       [&](NodeId, Message* m) {
         auto segs = SegmentsOf(*m);
         segs[1].table = 4242;
         SetSegments(m, segs);
       },
       StatusCode::kNotFound, "table 4242"},
      {"wrong dim",
       [&](NodeId, Message* m) {
         auto segs = SegmentsOf(*m);
         segs[1].dim = 3;  // the table's is 4; the rows frame made to agree with 3
         SetSegments(m, segs);
         const size_t floats = segs[0].keys * segs[0].dim + segs[1].keys * 3;
         m->frames[2] =
             Frame::Copy(std::vector<float>(floats, 2.0f).data(), floats * sizeof(float));
       },
       StatusCode::kInvalidArgument, "has dim 4"},
      {"key of another server",
       [&](NodeId peer, Message* m) {
         auto segs = SegmentsOf(*m);
         std::vector<Key> k(m->frames[1].size() / sizeof(Key));
         std::memcpy(k.data(), m->frames[1].data(), m->frames[1].size());
         for (const auto& kv : key_on) {
           if (kv.first != peer) k[segs[0].keys] = kv.second;  // the first key of segment 1
         }
         m->frames[1] = Frame::Copy(k.data(), k.size() * sizeof(Key));
       },
       StatusCode::kNotFound, "not held by this server"},
      {"short rows frame",
       [&](NodeId, Message* m) {
         m->frames[2] = Frame::Copy(m->frames[2].data(), m->frames[2].size() - 4);
       },
       StatusCode::kProtocolError, "rows frame"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const uint64_t bad_before = c.server(0).stats().bad_messages + c.server(1).stats().bad_messages;
    net->Set(k.rewrite);
    Status s = w.Wait(w.PushSparseMany(push), kWait);
    net->Set(nullptr);
    EXPECT_EQ(s.code(), k.code) << s;
    EXPECT_NE(s.message().find(k.says), std::string::npos) << s;
    EXPECT_EQ(c.server(0).stats().bad_messages + c.server(1).stats().bad_messages - bad_before, 2u);
    EXPECT_EQ(pull_both(), before) << "a refused message changed the tables";
  }
  // The same push unharmed is applied.
  ASSERT_TRUE(w.Wait(w.PushSparseMany(push), kWait).ok());
  const std::vector<std::vector<float>> after = pull_both();
  for (size_t i = 0; i < after[0].size(); ++i) ASSERT_EQ(after[0][i], before[0][i] + 1.0f);
  for (size_t i = 0; i < after[1].size(); ++i) ASSERT_EQ(after[1][i], before[1][i] + 2.0f);
  EXPECT_TRUE(c.Finish().ok());
}

// Replication (docs/replication.md): fused sparse pushes are forwarded to the backup as
// they came, so a primary cut off in the middle of a run of them loses no acknowledged
// update and applies none twice (rule sum, integer values: every sum exact).
TEST(SparseManyTest, ReplicationKeepsFusedPushesThroughAPrimarysDeath) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = InprocOptions(injector);
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 1000;
  o.replication = true;
  LocalCluster c(3, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const std::vector<TableSpec> specs = {TableSpec::Sparse("a", 2), TableSpec::Sparse("b", 3)};
  const std::vector<TableId> ids = Declare(w, specs);
  std::vector<Key> keys;
  for (Key k = 1; k <= 48; ++k) keys.push_back(k * 0x9E3779B97F4A7C15ull);
  std::vector<std::vector<float>> expect = {std::vector<float>(keys.size() * 2, 0.0f),
                                            std::vector<float>(keys.size() * 3, 0.0f)};
  std::mt19937 rng(3);
  for (int step = 0; step < 30; ++step) {
    if (step == 10) injector->Isolate(c.server(1).id());
    std::vector<std::vector<float>> rows(2);
    for (size_t t = 0; t < 2; ++t) {
      rows[t].resize(keys.size() * specs[t].dim);
      for (size_t i = 0; i < rows[t].size(); ++i) {
        rows[t][i] = static_cast<float>(rng() % 5);
        expect[t][i] += rows[t][i];
      }
    }
    Status s = w.Wait(
        w.PushSparseMany({{ids[0], keys.data(), keys.size(), rows[0].data(), rows[0].size()},
                          {ids[1], keys.data(), keys.size(), rows[1].data(), rows[1].size()}}),
        kWait);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
  }
  std::vector<std::vector<float>> got = {std::vector<float>(expect[0].size()),
                                         std::vector<float>(expect[1].size())};
  ASSERT_TRUE(
      w.Wait(w.PullSparseMany({{ids[0], keys.data(), keys.size(), got[0].data(), got[0].size()},
                               {ids[1], keys.data(), keys.size(), got[1].data(), got[1].size()}}),
             kWait)
          .ok());
  EXPECT_EQ(got, expect);
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
  w.Stop();
  EXPECT_TRUE(c.scheduler().Join(20s).ok());
}

// --- The frame checks of the fused sparse layout (no cluster) ------------------------------

Message FusedSparse(MsgType type, const std::vector<FusedSparseSegment>& segs, size_t keys,
                    size_t row_floats, bool with_rows) {
  Message m;
  m.header.type = static_cast<uint16_t>(type);
  m.header.flags = kFlagSparse | kFlagFused;
  m.header.count = segs.size();
  m.frames.push_back(Frame::Copy(segs.data(), segs.size() * sizeof(FusedSparseSegment)));
  m.frames.push_back(Frame::Copy(std::vector<Key>(keys, 1).data(), keys * sizeof(Key)));
  if (with_rows) {
    m.frames.push_back(
        Frame::Copy(std::vector<float>(row_floats, 1.0f).data(), row_floats * sizeof(float)));
  }
  return m;
}

TEST(SparseManyFramesTest, ValidateFusedSparseFrames) {
  const std::vector<FusedSparseSegment> segs = {{1, 4, 3}, {2, 2, 5}};
  EXPECT_TRUE(ValidateDataFrames(FusedSparse(MsgType::kPush, segs, 8, 22, true), 1 << 20).ok());
  EXPECT_TRUE(ValidateDataFrames(FusedSparse(MsgType::kPull, segs, 8, 0, false), 1 << 20).ok());
  auto bad = [&](Message m, const std::string& says) {
    Status s = ValidateDataFrames(m, 1 << 20);
    EXPECT_EQ(s.code(), StatusCode::kProtocolError) << says;
    EXPECT_NE(s.message().find(says), std::string::npos) << s;
  };
  bad(FusedSparse(MsgType::kPush, segs, 7, 22, true), "keys frame");
  bad(FusedSparse(MsgType::kPush, segs, 8, 21, true), "rows frame");
  bad(FusedSparse(MsgType::kPush, segs, 8, 22, false), "frames");
  bad(FusedSparse(MsgType::kPull, segs, 8, 22, true), "frames");
  bad(FusedSparse(MsgType::kPushPull, segs, 8, 22, true), "only pushes and pulls");
  bad(FusedSparse(MsgType::kAssign, segs, 8, 22, true), "only pushes and pulls");
  bad(FusedSparse(MsgType::kPush, {{1, 0, 3}}, 3, 0, true), "dim 0");
  bad(FusedSparse(MsgType::kPull, {}, 0, 0, false), "segment count");
  // Counts whose products overflow 64 bits are refused, not wrapped.
  bad(FusedSparse(MsgType::kPull, {{1, 0xFFFFFFFFu, uint64_t{1} << 40}}, 0, 0, false),
      "size limit");
  bad(FusedSparse(MsgType::kPull, {{1, 4, 1 << 19}, {1, 4, 1 << 19}, {1, 4, 1}}, 0, 0, false),
      "size limit");
  Message m = FusedSparse(MsgType::kPush, segs, 8, 22, true);
  m.header.dim = 4;
  bad(m, "dim != 0");
  m = FusedSparse(MsgType::kPush, segs, 8, 22, true);
  m.header.count = 3;
  bad(m, "segment frame");
  // A fused reply carries at most one frame; an error reply echoes the header.
  Message reply;
  reply.header.type = static_cast<uint16_t>(MsgType::kReply);
  reply.header.flags = kFlagSparse | kFlagFused;
  reply.header.count = 2;
  reply.frames.push_back(Frame::Copy(std::vector<float>(22).data(), 88));
  EXPECT_TRUE(ValidateDataFrames(reply, 1 << 20).ok());
  // The replicate ack of a fused sparse push echoes its dim 0.
  Message ack;
  ack.header.type = static_cast<uint16_t>(MsgType::kReplicateAck);
  ack.header.flags = kFlagSparse | kFlagFused;
  EXPECT_TRUE(ValidateDataFrames(ack, 1 << 20).ok());
  ack.header.dim = 2;
  EXPECT_FALSE(ValidateDataFrames(ack, 1 << 20).ok());
}

// The server's side without a cluster: a store holding half of sparse table 1 (dim 2) and
// all of sparse table 2 (dim 3). A fused sparse push whose second segment has a key of
// the other half is refused before anything is applied; the same push without it is
// applied segment by segment (from frames that arrive misaligned), and a fused pull
// returns every segment's rows in segment order.
TEST(SparseManyFramesTest, TheServerChecksEverySegmentBeforeApplyingAny) {
  constexpr NodeId kSelf = 1;
  Store store(kSelf);
  TableInfo half;
  half.id = 1;
  half.spec = TableSpec::Sparse("half", 2);
  half.ranges = {{0, uint64_t{1} << 63, kSelf}, {uint64_t{1} << 63, 0, 2}};
  TableInfo all;
  all.id = 2;
  all.spec = TableSpec::Sparse("all", 3);
  all.ranges = {{0, 0, kSelf}};
  ASSERT_TRUE(store.Install(half).ok());
  ASSERT_TRUE(store.Install(all).ok());
  // Keys 3 and 10 route to [0, 2^63) (MixKey), key 1 does not.
  const auto message = [](MsgType type, const std::vector<Key>& keys, size_t row_floats,
                          size_t misalign) {
    const std::vector<FusedSparseSegment> segs = {{2, 3, 2}, {1, 2, 2}};
    Message m;
    m.header.type = static_cast<uint16_t>(type);
    m.header.flags = kFlagSparse | kFlagFused;
    m.header.count = segs.size();
    m.header.epoch = 1;
    m.frames.push_back(Frame::Copy(segs.data(), segs.size() * sizeof(FusedSparseSegment)));
    // Keys at an odd address: the server aligns before reading.
    auto buf = std::make_shared<std::vector<uint8_t>>(keys.size() * sizeof(Key) + misalign);
    std::memcpy(buf->data() + misalign, keys.data(), keys.size() * sizeof(Key));
    m.frames.push_back(Frame::Borrow(buf->data() + misalign, keys.size() * sizeof(Key), buf));
    if (row_floats > 0) {
      std::vector<float> rows(row_floats);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i + 1);
      m.frames.push_back(Frame::Copy(rows.data(), rows.size() * sizeof(float)));
    }
    return m;
  };
  const auto handle = [&](Message m, std::vector<float>* pulled) {
    DataRequest req;
    Status s = CheckRequest(std::move(m), store, 1, 1 << 20, &req);
    if (!s.ok()) return s;
    Status replied = Internal("no reply");
    NewApplyOnArrival()->Handle(std::move(req), store,
                                [&](const Header&, const Status& st, std::vector<Frame> frames) {
                                  replied = st;
                                  if (pulled != nullptr && st.ok() && frames.size() == 1) {
                                    pulled->resize(frames[0].size() / sizeof(float));
                                    std::memcpy(pulled->data(), frames[0].data(), frames[0].size());
                                  }
                                });
    return replied;
  };
  const std::vector<Key> bad = {5, 6, 3, 1};  // segment 1's second key is not held
  const std::vector<Key> good = {5, 6, 3, 10};
  Status s = handle(message(MsgType::kPush, bad, 2 * 3 + 2 * 2, 1), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("fused sparse segment 1"), std::string::npos) << s;
  std::vector<float> rows(6);
  ASSERT_TRUE(store.ReadSparse(2, good.data(), 2, 3, rows.data()).ok());
  EXPECT_EQ(rows, std::vector<float>(6, 0.0f)) << "segment 0 was applied";
  ASSERT_TRUE(handle(message(MsgType::kPush, good, 2 * 3 + 2 * 2, 4), nullptr).ok());
  std::vector<float> pulled;
  ASSERT_TRUE(handle(message(MsgType::kPull, good, 0, 3), &pulled).ok());
  EXPECT_EQ(pulled, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  // A segment naming a table of another dim is refused as well.
  Message wrong = message(MsgType::kPull, good, 0, 0);
  std::vector<FusedSparseSegment> segs = {{1, 3, 2}, {2, 2, 2}};
  wrong.frames[0] = Frame::Copy(segs.data(), segs.size() * sizeof(FusedSparseSegment));
  s = handle(std::move(wrong), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("has dim 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
