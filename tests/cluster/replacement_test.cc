// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Server replacement (the scheduler's replace_servers_ms, docs/checkpoints.md): a server
// is cut off (transport/fault_transport.h) and declared dead; the job waits; a new
// server restored from the last checkpoint takes its rank; the requests that were in
// flight to the dead server, and those made while it was dead, go to the replacement and
// are applied there once. The values are checked exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <filesystem>
#include <random>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;
namespace fs = std::filesystem;

constexpr auto kWait = 60s;
constexpr uint64_t kSize = 40;  // 10 chunks of 4: both servers hold some

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("layerps-replace-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

class ReplacementTest : public ::testing::Test {
 protected:
  Options Base(int replace_ms) {
    injector_ = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
    Options o = testing::FastOptions();
    o.heartbeat_interval_ms = 50;
    o.heartbeat_timeout_ms = 1000;
    o.dense_chunk_elems = 4;
    o.replace_servers_ms = replace_ms;
    SetTransportFactory(&o, injector_);
    return o;
  }

  // Waits (bounded) until the scheduler counted `n` dead nodes.
  static bool AwaitDead(Scheduler& s, uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (s.stats().dead_nodes < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }

  static int IndexOfRank(LocalCluster& c, uint32_t rank) {
    for (int i = 0; i < c.num_servers(); ++i) {
      if (c.server(i).rank() == rank) return i;
    }
    return -1;
  }

  std::shared_ptr<FaultInjector> injector_;
};

TEST_F(ReplacementTest, ReplacementRestoresAndGetsThePartsHeldForTheDeadServer) {
  const std::string dir = TempDir("ok");
  LocalCluster c(2, 1, "inproc", Base(/*replace_ms=*/30000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto sparse = w.DeclareTable(TableSpec::Sparse("emb", 2));
  auto table = w.DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(table.ok() && sparse.ok());
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(w.Wait(w.Push(*table, ones.data(), kSize), kWait).ok());
  std::vector<Key> ids;
  for (Key k = 1; k <= 64; ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull);  // both servers
  std::vector<float> rows(ids.size() * 2, 1.0f);
  ASSERT_TRUE(w.Wait(w.PushSparse(*sparse, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
  StatusOr<std::string> set = w.Checkpoint(dir, kWait);
  ASSERT_TRUE(set.ok()) << set.status();
  // Applied after the checkpoint: lost with the dead server's ranges, kept by the other's.
  ASSERT_TRUE(w.Wait(w.Push(*table, ones.data(), kSize), kWait).ok());

  const int victim = IndexOfRank(c, 1);
  ASSERT_GE(victim, 0);
  const NodeId victim_id = c.server(victim).id();
  injector_->Isolate(victim_id);
  // In flight when the server is cut off: its part is lost on the way.
  const Ticket in_flight = w.Push(*table, ones.data(), kSize);
  const Ticket sparse_in_flight = w.PushSparse(*sparse, ids.data(), ids.size(), rows.data(), rows.size());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  // Made while the rank is vacant: its part waits for the replacement.
  const Ticket while_dead = w.Push(*table, ones.data(), kSize);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(w.Wait(while_dead, 0ms).code(), StatusCode::kTimeout);  // still waiting
  EXPECT_EQ(w.stats().resent, 0u);

  // Only the vacant rank may be taken.
  Options o = c.options();
  o.rank = 0;
  o.connect_timeout_ms = 5000;
  Server wrong(o);
  Status refused = wrong.Start();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("not awaiting a replacement (vacant: 1)"), std::string::npos)
      << refused;

  o.rank = -1;  // the vacant one
  o.restore_dir = dir;
  Server replacement(o);
  ASSERT_TRUE(replacement.Start().ok());
  EXPECT_EQ(replacement.rank(), 1u);
  EXPECT_NE(replacement.id(), victim_id);
  ASSERT_TRUE(w.Wait(in_flight, kWait).ok());
  ASSERT_TRUE(w.Wait(sparse_in_flight, kWait).ok());
  ASSERT_TRUE(w.Wait(while_dead, kWait).ok());
  EXPECT_EQ(w.stats().resent, 3u);  // the dead server's part of each of the three pushes

  // Rank 1's ranges: the checkpoint (1) and the three pushes it missed or held (2);
  // rank 0's: four pushes. Which elements rank 1 holds, the map says.
  std::vector<float> got(kSize);
  ASSERT_TRUE(w.Wait(w.Pull(*table, got.data(), kSize), kWait).ok());
  int on_replacement = 0;
  for (uint64_t i = 0; i < kSize; ++i) {
    const bool replaced = got[i] == 3.0f;
    on_replacement += replaced;
    EXPECT_TRUE(replaced || got[i] == 4.0f) << "element " << i << " = " << got[i];
  }
  EXPECT_GT(on_replacement, 0);
  EXPECT_LT(on_replacement, static_cast<int>(kSize));
  // Sparse rows: 1 pushed before the checkpoint, 1 in flight; on either server, 2.
  std::vector<float> pulled(ids.size() * 2);
  ASSERT_TRUE(w.Wait(w.PullSparse(*sparse, ids.data(), ids.size(), pulled.data(), pulled.size()), kWait).ok());
  for (size_t i = 0; i < pulled.size(); ++i) ASSERT_EQ(pulled[i], 2.0f) << i;

  EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
  w.Stop();
  EXPECT_TRUE(c.scheduler().Join(20s).ok());
  EXPECT_TRUE(replacement.Join(5s).ok());
  fs::remove_all(dir);
}

TEST_F(ReplacementTest, NoReplacementInTimeFailsTheJobAndTheHeldRequests) {
  LocalCluster c(2, 1, "inproc", Base(/*replace_ms=*/1500));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto table = w.DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(table.ok());
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(w.Wait(w.Push(*table, ones.data(), kSize), kWait).ok());
  injector_->Isolate(c.server(IndexOfRank(c, 1)).id());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  const Ticket held = w.Push(*table, ones.data(), kSize);
  Status s = w.Wait(held, kWait);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("no replacement joined within replace_servers_ms=1500"),
            std::string::npos)
      << s;
  Status job = c.scheduler().Join(20s);
  EXPECT_EQ(job.code(), StatusCode::kUnavailable) << job;
  EXPECT_NE(job.message().find("server rank 1"), std::string::npos) << job;
}

TEST_F(ReplacementTest, NoCheckpointSetIsWrittenWhileARankIsVacant) {
  const std::string dir = TempDir("vacant");
  LocalCluster c(2, 1, "inproc", Base(/*replace_ms=*/30000));
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  ASSERT_TRUE(w.DeclareTable(TableSpec::Dense("w", kSize)).ok());
  injector_->Isolate(c.server(IndexOfRank(c, 1)).id());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
  StatusOr<std::string> set = w.Checkpoint(dir, kWait);
  EXPECT_EQ(set.status().code(), StatusCode::kUnavailable) << set.status();
  EXPECT_NE(set.status().message().find("server rank 1"), std::string::npos) << set.status();
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// tolerate_worker_loss: a worker that died is restarted; the new one takes its rank and
// trains with the others; a live rank cannot be taken.
TEST_F(ReplacementTest, ARestartedWorkerTakesTheDeadWorkersRank) {
  Options base = Base(/*replace_ms=*/0);
  base.tolerate_worker_loss = true;
  LocalCluster c(1, 2, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  auto table = c.worker(0).DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(table.ok());
  const std::vector<float> ones(kSize, 1.0f);
  ASSERT_TRUE(c.worker(1).Wait(c.worker(1).Push(*table, ones.data(), kSize), kWait).ok());
  injector_->Isolate(c.worker(1).id());
  ASSERT_TRUE(AwaitDead(c.scheduler(), 1));

  Options o = c.options();
  o.connect_timeout_ms = 5000;
  o.rank = 0;
  Worker taken(o);
  Status refused = taken.Start();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("worker rank 0 is alive"), std::string::npos) << refused;

  o.rank = -1;
  Worker restarted(o);
  ASSERT_TRUE(restarted.Start().ok());
  EXPECT_EQ(restarted.rank(), 1u);
  auto again = restarted.DeclareTable(TableSpec::Dense("w", kSize));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *table);
  std::vector<float> got(kSize);
  ASSERT_TRUE(restarted.Wait(restarted.Pull(*table, got.data(), kSize), kWait).ok());
  EXPECT_EQ(got[0], 1.0f);  // the dead worker's push stays applied
  ASSERT_TRUE(restarted.Wait(restarted.Push(*table, ones.data(), kSize), kWait).ok());
  ASSERT_TRUE(c.worker(0).Wait(c.worker(0).Push(*table, ones.data(), kSize), kWait).ok());
  // Both live workers take part in a barrier of the workers.
  Status b0, b1;
  std::thread t([&] { b1 = restarted.Barrier(Group::kWorkers, kWait); });
  b0 = c.worker(0).Barrier(Group::kWorkers, kWait);
  t.join();
  EXPECT_TRUE(b0.ok()) << b0;
  EXPECT_TRUE(b1.ok()) << b1;
  ASSERT_TRUE(c.worker(0).Wait(c.worker(0).Pull(*table, got.data(), kSize), kWait).ok());
  for (float v : got) ASSERT_EQ(v, 3.0f);
  restarted.Stop();
  c.worker(0).Stop();
  EXPECT_TRUE(c.scheduler().Join(20s).ok());
}

// Pushes `pushes` rounds of random integer gradients (rule sum: every sum exact) to a
// dense table of kSize elements and to the rows `ids` (dim 2) of a sparse table, 8
// requests in flight, calling before(k) ahead of round k; then pulls both and checks they
// hold exactly the sums: no acknowledged update lost, none applied twice.
void PushAndCheckExactSums(Worker& w, TableId dense, TableId sparse, const std::vector<Key>& ids,
                           int pushes, std::mt19937& rng, const std::function<void(int)>& before) {
  std::vector<std::vector<float>> dense_grads, sparse_grads;
  std::vector<double> want_dense(kSize, 0.0), want_sparse(ids.size() * 2, 0.0);
  std::deque<Ticket> in_flight;
  for (int k = 0; k < pushes; ++k) {
    std::vector<float> g(kSize), r(ids.size() * 2);
    for (auto& x : g) x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
    for (auto& x : r) x = static_cast<float>(static_cast<int>(rng() % 9) - 4);
    for (size_t i = 0; i < kSize; ++i) want_dense[i] += g[i];
    for (size_t i = 0; i < r.size(); ++i) want_sparse[i] += r[i];
    dense_grads.push_back(std::move(g));
    sparse_grads.push_back(std::move(r));
    before(k);
    if (::testing::Test::HasFatalFailure()) return;
    in_flight.push_back(w.Push(dense, dense_grads.back().data(), kSize));
    in_flight.push_back(w.PushSparse(sparse, ids.data(), ids.size(), sparse_grads.back().data(),
                                     sparse_grads.back().size()));
    while (in_flight.size() > 8) {
      Status s = w.Wait(in_flight.front(), kWait);
      ASSERT_TRUE(s.ok()) << s << " (push " << k << ")";
      in_flight.pop_front();
    }
  }
  while (!in_flight.empty()) {
    Status s = w.Wait(in_flight.front(), kWait);
    ASSERT_TRUE(s.ok()) << s;
    in_flight.pop_front();
  }
  std::vector<float> got(kSize), rows(ids.size() * 2);
  ASSERT_TRUE(w.Wait(w.Pull(dense, got.data(), kSize), kWait).ok());
  ASSERT_TRUE(w.Wait(w.PullSparse(sparse, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
  for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(got[i], want_dense[i]) << "element " << i;
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], want_sparse[i]) << "row value " << i;
}

// Replication (docs/replication.md): a worker keeps 4 pushes in flight to a dense and a
// sparse table (rule sum, integer values: every sum exact); at a random point a random
// server is cut off; its backup takes over; every push completes, and the final values
// are exactly the sum of all of them: no acknowledged update lost, none applied twice.
TEST_F(ReplacementTest, ReplicationLosesNoAcknowledgedUpdateWhenAPrimaryDies) {
  std::mt19937 rng(20261126);
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Options base = Base(/*replace_ms=*/0);
    base.replication = true;
    LocalCluster c(3, 1, "inproc", base);
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    auto dense = w.DeclareTable(TableSpec::Dense("w", kSize));
    auto sparse = w.DeclareTable(TableSpec::Sparse("emb", 2));
    ASSERT_TRUE(dense.ok() && sparse.ok());
    std::vector<Key> ids;
    for (Key k = 1; k <= 48; ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull);
    const int kill_at = 3 + static_cast<int>(rng() % 30);
    const int victim = static_cast<int>(rng() % 3);
    PushAndCheckExactSums(w, *dense, *sparse, ids, 40, rng, [&](int k) {
      if (k == kill_at) injector_->Isolate(c.server(victim).id());
    });
    ASSERT_FALSE(HasFatalFailure()) << "victim " << victim;
    ASSERT_TRUE(AwaitDead(c.scheduler(), 1));
    // The cluster goes on.
    const std::vector<float> ones(kSize, 1.0f);
    ASSERT_TRUE(w.Wait(w.Push(*dense, ones.data(), kSize), kWait).ok());
    w.Stop();
    Status job = c.scheduler().Join(20s);
    EXPECT_TRUE(job.ok()) << job;
    EXPECT_EQ(c.scheduler().stats().dead_nodes, 1u);
  }
}

// The copies acknowledged by the backups of the servers not in `cut`.
uint64_t CopiesSent(LocalCluster& c, const std::vector<NodeId>& cut) {
  uint64_t n = 0;
  for (int i = 0; i < c.num_servers(); ++i) {
    if (std::find(cut.begin(), cut.end(), c.server(i).id()) == cut.end()) n += c.server(i).stats().copies_sent;
  }
  return n;
}

// Waits (bounded) until every server not in `cut` (cut off: dead to the cluster) has its
// ranges copied to a backup again and at least `copies` copies were acknowledged in all.
// A death makes two: the dead server's predecessor copies to its new backup, and its
// successor, whose ranges grew, to its backup (none when one server is left).
bool AwaitBackedUp(LocalCluster& c, const std::vector<NodeId>& cut, uint64_t copies) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    int live = 0, backed = 0;
    for (int i = 0; i < c.num_servers(); ++i) {
      if (std::find(cut.begin(), cut.end(), c.server(i).id()) != cut.end()) continue;
      ++live;
      backed += c.server(i).stats().backed_up;
    }
    if (live < 2 || (backed == live && CopiesSent(c, cut) >= copies)) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// Cuts server `index` off once the previous cut (if any) was taken over and copied.
void CutAfterRecovery(LocalCluster& c, FaultInjector& injector, int index, std::vector<NodeId>* cut,
                      uint64_t* copies_before) {
  if (!cut->empty()) {
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (c.scheduler().stats().dead_nodes < cut->size() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(c.scheduler().stats().dead_nodes, cut->size());
    ASSERT_TRUE(AwaitBackedUp(c, *cut, *copies_before + 2)) << "after " << cut->size() << " death(s)";
  } else {
    ASSERT_TRUE(AwaitBackedUp(c, *cut, 0));
  }
  cut->push_back(c.server(index).id());
  *copies_before = CopiesSent(c, *cut);
  injector.Isolate(cut->back());
}

// A second and a third fault (docs/replication.md, "A second fault"): 4 servers, pushes in
// flight as above; three servers are cut off one after another, each once the cluster
// has copied the ranges of every live server to its new backup. Every push completes and
// the values are exactly the sums: nothing acknowledged lost, nothing applied twice; the
// last server holds every range.
TEST_F(ReplacementTest, ReplicationSurvivesASecondAndAThirdDeath) {
  std::mt19937 rng(20261127);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Options base = Base(/*replace_ms=*/0);
    base.replication = true;
    LocalCluster c(4, 1, "inproc", base);
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    auto dense = w.DeclareTable(TableSpec::Dense("w", kSize));
    auto sparse = w.DeclareTable(TableSpec::Sparse("emb", 2));
    ASSERT_TRUE(dense.ok() && sparse.ok());
    std::vector<Key> ids;
    for (Key k = 1; k <= 64; ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull);
    std::vector<int> kill_at = {5 + static_cast<int>(rng() % 10), 25 + static_cast<int>(rng() % 10),
                                45 + static_cast<int>(rng() % 10)};
    std::vector<int> order = {0, 1, 2, 3};
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<NodeId> cut;
    uint64_t copies_before = 0;
    PushAndCheckExactSums(w, *dense, *sparse, ids, 60, rng, [&](int k) {
      const auto at = std::find(kill_at.begin(), kill_at.end(), k);
      // "Some time later": the previous takeover is done and the copies are made.
      if (at != kill_at.end()) CutAfterRecovery(c, *injector_, order[at - kill_at.begin()], &cut, &copies_before);
    });
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(AwaitDead(c.scheduler(), 3));
    const int last = order[3];
    EXPECT_GE(c.server(last).stats().copies_received, 1u);
    // After the second death the two left copied their whole stores to each other: every
    // range, so every dense value and every row with its id, went to a backup at least
    // once (the copies count the store's bytes, not the map they begin with).
    uint64_t copy_bytes = 0;
    for (int i = 0; i < c.num_servers(); ++i) copy_bytes += c.server(i).stats().copy_bytes_sent;
    EXPECT_GE(copy_bytes, kSize * sizeof(float) + ids.size() * (sizeof(Key) + 2 * sizeof(float)));
    w.Stop();
    Status job = c.scheduler().Join(20s);
    EXPECT_TRUE(job.ok()) << job;
    EXPECT_EQ(c.scheduler().stats().dead_nodes, 3u);
  }
}

// The copy to a new backup carries the rules' state: Adam on a dense table, Adagrad (per
// element) and rowwise_adagrad (per row) on sparse ones, two servers of three cut off
// between pushes, end bit for bit where a cluster without faults ends.
TEST_F(ReplacementTest, ANewBackupGetsTheRulesState) {
  TableSpec adam = TableSpec::Dense("adam", kSize);
  adam.rule = UpdateRule::kAdam;
  adam.learning_rate = 0.05f;
  TableSpec adagrad = TableSpec::Sparse("adagrad", 3);
  adagrad.rule = UpdateRule::kAdagrad;
  adagrad.learning_rate = 0.1f;
  TableSpec rowwise = TableSpec::Sparse("rowwise", 3, UpdateRule::kRowwiseAdagrad);
  rowwise.learning_rate = 0.1f;
  std::vector<Key> ids;
  for (Key k = 1; k <= 40; ++k) ids.push_back(k * 0x9E3779B97F4A7C15ull);
  const int pushes = 15;
  const auto run = [&](bool faults, std::vector<float>* dense_out, std::vector<float>* rows_out) {
    Options base = Base(/*replace_ms=*/0);
    base.replication = faults;
    LocalCluster c(3, 1, "inproc", base);
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    auto d = w.DeclareTable(adam);
    auto sp = w.DeclareTable(adagrad);
    auto rw = w.DeclareTable(rowwise);
    ASSERT_TRUE(d.ok() && sp.ok() && rw.ok());
    std::mt19937 rng(7);
    std::vector<NodeId> cut;
    uint64_t copies_before = 0;
    for (int k = 0; k < pushes; ++k) {
      if (faults && (k == 5 || k == 10)) {
        CutAfterRecovery(c, *injector_, k == 5 ? 1 : 0, &cut, &copies_before);
        ASSERT_FALSE(HasFatalFailure());
      }
      std::vector<float> g(kSize), r(ids.size() * 3);
      for (auto& x : g) x = std::uniform_real_distribution<float>(-1, 1)(rng);
      for (auto& x : r) x = std::uniform_real_distribution<float>(-1, 1)(rng);
      ASSERT_TRUE(w.Wait(w.Push(*d, g.data(), kSize), kWait).ok());
      ASSERT_TRUE(w.Wait(w.PushSparse(*sp, ids.data(), ids.size(), r.data(), r.size()), kWait).ok());
      ASSERT_TRUE(w.Wait(w.PushSparse(*rw, ids.data(), ids.size(), r.data(), r.size()), kWait).ok());
    }
    dense_out->assign(kSize, 0.0f);
    const size_t n = ids.size() * 3;
    rows_out->assign(2 * n, 0.0f);  // adagrad's rows, then rowwise_adagrad's
    ASSERT_TRUE(w.Wait(w.Pull(*d, dense_out->data(), kSize), kWait).ok());
    ASSERT_TRUE(w.Wait(w.PullSparse(*sp, ids.data(), ids.size(), rows_out->data(), n), kWait).ok());
    ASSERT_TRUE(w.Wait(w.PullSparse(*rw, ids.data(), ids.size(), rows_out->data() + n, n), kWait).ok());
    if (faults) EXPECT_EQ(c.scheduler().stats().dead_nodes, 2u);
    w.Stop();
    EXPECT_TRUE(c.scheduler().Join(20s).ok());
  };
  std::vector<float> want_dense, want_rows, got_dense, got_rows;
  run(false, &want_dense, &want_rows);
  run(true, &got_dense, &got_rows);
  ASSERT_FALSE(HasFailure());
  for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(got_dense[i], want_dense[i]) << "element " << i;
  for (size_t i = 0; i < got_rows.size(); ++i) ASSERT_EQ(got_rows[i], want_rows[i]) << "row value " << i;
}

// A bounded async table cannot be replicated exactly (a backup does not see the pulls that
// create rows and move their recency on the primary, nor its clock), so a replicated
// cluster refuses it at declare time, naming the bounds, and the cluster goes on.
TEST_F(ReplacementTest, ReplicationRefusesBoundedAsyncTables) {
  Options base = Base(/*replace_ms=*/0);
  base.replication = true;
  LocalCluster c(2, 1, "inproc", base);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  TableSpec lru = TableSpec::Sparse("lru", 4);
  lru.capacity = 100;
  lru.eviction = Eviction::kLru;
  StatusOr<TableId> refused = w.DeclareTable(lru);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("'lru' is bounded (capacity)"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("replication"), std::string::npos) << refused.status();

  TableSpec several = TableSpec::Sparse("several", 4);
  several.capacity_bytes = 1 << 20;
  several.eviction = Eviction::kLfu;
  several.expiry_seconds = 30;
  several.admit_after = 3;
  refused = w.DeclareTable(several);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("(capacity_bytes, expiry_seconds, admit_after)"),
            std::string::npos)
      << refused.status();

  // Unbounded async tables and bounded bsp tables (which are not replicated) are declared.
  EXPECT_TRUE(w.DeclareTable(TableSpec::Sparse("plain", 4)).ok());
  TableSpec bsp = lru;
  bsp.name = "bsp";
  bsp.sync = SyncMode::kBsp;
  EXPECT_TRUE(w.DeclareTable(bsp).ok());
  w.Stop();
  EXPECT_TRUE(c.scheduler().Join(20s).ok());
}

// Without replication the same bounded table is declared.
TEST_F(ReplacementTest, BoundedAsyncTablesNeedNoReplicationCheckWithoutIt) {
  LocalCluster c(2, 1, "inproc", Base(/*replace_ms=*/0));
  ASSERT_TRUE(c.Start().ok());
  TableSpec lru = TableSpec::Sparse("lru", 4);
  lru.capacity = 100;
  lru.eviction = Eviction::kLru;
  EXPECT_TRUE(c.worker(0).DeclareTable(lru).ok());
}

}  // namespace
}  // namespace ps
