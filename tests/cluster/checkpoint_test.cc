// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Checkpoints (docs/checkpoints.md): a cluster writes its tables with Worker::Checkpoint,
// a new cluster started with the servers' restore_dir starts from exactly those values
// and the update rules' state (the next push lands exactly where it would have in the
// first cluster), with the same or another number of servers; bad sets are refused with
// the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "local_cluster.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::FastOptions;
using testing::LocalCluster;
namespace fs = std::filesystem;

constexpr auto kWait = 60s;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("layerps-ckpt-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// The tables every cluster of these tests declares: a dense one spread over servers
// (Adam: two state planes), an unbounded sparse one (Adagrad), a bounded one (LRU, room
// for fewer ids than are pushed) and a sparse one whose rule keeps its state per row
// (rowwise_adagrad: one float after the row's values).
struct Tables {
  TableId dense = 0, sparse = 0, bounded = 0, rowwise = 0;
};
constexpr uint64_t kDenseSize = 2500;
constexpr uint32_t kDim = 4;

TableSpec DenseSpec(uint64_t size = kDenseSize) {
  TableSpec s = TableSpec::Dense("d", size, UpdateRule::kAdam);
  s.learning_rate = 0.01f;
  s.init = Initializer::kUniform;
  s.init_a = -1.0f;
  s.init_b = 1.0f;
  return s;
}
TableSpec SparseSpec() {
  TableSpec s = TableSpec::Sparse("s", kDim, UpdateRule::kAdagrad);
  s.learning_rate = 0.1f;
  return s;
}
TableSpec RowwiseSpec() {
  TableSpec s = TableSpec::Sparse("r", kDim, UpdateRule::kRowwiseAdagrad);
  s.learning_rate = 0.1f;
  s.init = Initializer::kNormal;
  s.init_b = 0.5f;
  return s;
}
TableSpec BoundedSpec() {
  TableSpec s = TableSpec::Sparse("b", kDim, UpdateRule::kSgd);
  s.learning_rate = 0.5f;
  s.capacity = 40;
  s.eviction = Eviction::kLru;
  return s;
}

Tables Declare(Worker& w) {
  Tables t;
  auto d = w.DeclareTable(DenseSpec());
  auto s = w.DeclareTable(SparseSpec());
  auto b = w.DeclareTable(BoundedSpec());
  auto r = w.DeclareTable(RowwiseSpec());
  EXPECT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(r.ok()) << r.status();
  if (d.ok()) t.dense = *d;
  if (s.ok()) t.sparse = *s;
  if (b.ok()) t.bounded = *b;
  if (r.ok()) t.rowwise = *r;
  return t;
}

std::vector<Key> Ids(int round, int n) {
  std::vector<Key> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<Key>((i * 7919 + round * 104729) % 100000));
  return ids;
}

// One training step: a push to every table (gradients from `round`).
void Step(Worker& w, const Tables& t, int round) {
  std::vector<float> g(kDenseSize);
  for (uint64_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i * 13 + round) % 11) - 5.0f;
  ASSERT_TRUE(w.Wait(w.Push(t.dense, g.data(), g.size()), kWait).ok());
  const std::vector<Key> ids = Ids(round, 60);
  std::vector<float> rows(ids.size() * kDim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i + round) % 7) - 3.0f;
  ASSERT_TRUE(w.Wait(w.PushSparse(t.sparse, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
  ASSERT_TRUE(w.Wait(w.PushSparse(t.bounded, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
  ASSERT_TRUE(w.Wait(w.PushSparse(t.rowwise, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
}

// Everything a test compares: the dense values, and the sparse rows of every id pushed.
struct Values {
  std::vector<float> dense, sparse, bounded, rowwise;
  bool operator==(const Values& o) const {
    return dense == o.dense && sparse == o.sparse && bounded == o.bounded && rowwise == o.rowwise;
  }
  bool operator!=(const Values& o) const { return !(*this == o); }
};
Values Read(Worker& w, const Tables& t, int rounds) {
  Values v;
  v.dense.resize(kDenseSize);
  EXPECT_TRUE(w.Wait(w.Pull(t.dense, v.dense.data(), v.dense.size()), kWait).ok());
  std::vector<Key> ids;
  for (int r = 0; r < rounds; ++r) {
    const std::vector<Key> more = Ids(r, 60);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  v.sparse.resize(ids.size() * kDim);
  EXPECT_TRUE(w.Wait(w.PullSparse(t.sparse, ids.data(), ids.size(), v.sparse.data(), v.sparse.size()), kWait).ok());
  v.rowwise.resize(ids.size() * kDim);
  EXPECT_TRUE(w.Wait(w.PullSparse(t.rowwise, ids.data(), ids.size(), v.rowwise.data(), v.rowwise.size()), kWait).ok());
  // The bounded table holds the last ids pushed (40 of them): those of the last round.
  const std::vector<Key> last = Ids(rounds - 1, 60);
  const std::vector<Key> held(last.end() - 40, last.end());
  v.bounded.resize(held.size() * kDim);
  EXPECT_TRUE(w.Wait(w.PullSparse(t.bounded, held.data(), held.size(), v.bounded.data(), v.bounded.size()), kWait).ok());
  return v;
}

// Trains, checkpoints, trains one more step; returns the set's directory and the values
// at the checkpoint and after the extra step.
struct Outcome {
  std::string set;
  Values at_checkpoint, after_step;
};
Outcome TrainAndCheckpoint(int servers, const std::string& dir, int rounds) {
  Outcome out;
  Options o = FastOptions();
  o.dense_chunk_elems = 1000;  // the dense table spans several servers
  LocalCluster c(servers, 1, "inproc", o);
  EXPECT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const Tables t = Declare(w);
  for (int r = 0; r < rounds; ++r) Step(w, t, r);
  out.at_checkpoint = Read(w, t, rounds);
  StatusOr<std::string> set = w.Checkpoint(dir, kWait);
  EXPECT_TRUE(set.ok()) << set.status();
  if (set.ok()) out.set = *set;
  Step(w, t, rounds);
  out.after_step = Read(w, t, rounds + 1);
  EXPECT_TRUE(c.Finish().ok());
  return out;
}

// A cluster of `servers` restored from `restore`: its values, and after the same extra
// step as TrainAndCheckpoint's.
Outcome Restore(int servers, const std::string& restore, int rounds) {
  Outcome out;
  Options o = FastOptions();
  o.dense_chunk_elems = 1000;
  o.restore_dir = restore;
  LocalCluster c(servers, 1, "inproc", o);
  Status started = c.Start();
  EXPECT_TRUE(started.ok()) << started;
  if (!started.ok()) return out;
  Worker& w = c.worker(0);
  const Tables t = Declare(w);
  out.at_checkpoint = Read(w, t, rounds);
  Step(w, t, rounds);
  out.after_step = Read(w, t, rounds + 1);
  EXPECT_TRUE(c.Finish().ok());
  return out;
}

TEST(CheckpointTest, RestoredClusterContinuesExactly) {
  const std::string dir = TempDir("exact");
  const Outcome first = TrainAndCheckpoint(2, dir, 5);
  ASSERT_FALSE(first.set.empty());
  EXPECT_EQ(fs::path(first.set).parent_path(), fs::path(dir));
  EXPECT_TRUE(fs::exists(first.set + "/server-0.lpsckpt"));
  EXPECT_TRUE(fs::exists(first.set + "/server-1.lpsckpt"));
  ASSERT_TRUE(first.at_checkpoint != first.after_step);  // the extra step changed something

  const Outcome second = Restore(2, dir, 5);
  EXPECT_TRUE(second.at_checkpoint.dense == first.at_checkpoint.dense);
  EXPECT_TRUE(second.at_checkpoint.sparse == first.at_checkpoint.sparse);
  EXPECT_TRUE(second.at_checkpoint.bounded == first.at_checkpoint.bounded);
  EXPECT_TRUE(second.at_checkpoint.rowwise == first.at_checkpoint.rowwise);
  // The rules' state came back too: Adam's moments, Adagrad's accumulators (per element
  // and per row).
  EXPECT_TRUE(second.after_step.dense == first.after_step.dense);
  EXPECT_TRUE(second.after_step.sparse == first.after_step.sparse);
  EXPECT_TRUE(second.after_step.bounded == first.after_step.bounded);
  EXPECT_TRUE(second.after_step.rowwise == first.after_step.rowwise);
  fs::remove_all(dir);
}

// Another number of servers: every server takes its new ranges out of every file.
TEST(CheckpointTest, RestoreIntoMoreOrFewerServers) {
  const std::string dir = TempDir("reshard");
  const Outcome first = TrainAndCheckpoint(2, dir, 4);
  ASSERT_FALSE(first.set.empty());
  for (int servers : {1, 3}) {
    SCOPED_TRACE(std::to_string(servers) + " server(s)");
    const Outcome again = Restore(servers, first.set, 4);  // the set's own directory
    EXPECT_TRUE(again.at_checkpoint.dense == first.at_checkpoint.dense);
    EXPECT_TRUE(again.at_checkpoint.sparse == first.at_checkpoint.sparse);
    EXPECT_TRUE(again.after_step.dense == first.after_step.dense);
    EXPECT_TRUE(again.after_step.sparse == first.after_step.sparse);
    EXPECT_TRUE(again.at_checkpoint.rowwise == first.at_checkpoint.rowwise);
    EXPECT_TRUE(again.after_step.rowwise == first.after_step.rowwise);
    // A bounded table's capacity is per server: one server has room for half the rows
    // two held, so only more servers are sure to get every row back.
    if (servers > 2) {
      EXPECT_TRUE(again.at_checkpoint.bounded == first.at_checkpoint.bounded);
      EXPECT_TRUE(again.after_step.bounded == first.after_step.bounded);
    }
  }
  fs::remove_all(dir);
}

// The newest complete set is taken; a set missing a server's file is skipped; a damaged
// file is refused with the reason; sets beyond checkpoint_keep are deleted.
TEST(CheckpointTest, NewestCompleteSetAndDamage) {
  const std::string dir = TempDir("sets");
  Options o = FastOptions();
  o.dense_chunk_elems = 1000;
  o.checkpoint_keep = 2;
  std::vector<std::string> sets;
  std::vector<Values> values;
  {
    LocalCluster c(2, 1, "inproc", o);
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    const Tables t = Declare(w);
    for (int r = 0; r < 3; ++r) {
      Step(w, t, r);
      values.push_back(Read(w, t, r + 1));
      StatusOr<std::string> set = w.Checkpoint(dir, kWait);
      ASSERT_TRUE(set.ok()) << set.status();
      sets.push_back(*set);
    }
    ASSERT_TRUE(c.Finish().ok());
  }
  // checkpoint_keep = 2: the first set is gone.
  EXPECT_FALSE(fs::exists(sets[0]));
  EXPECT_TRUE(fs::exists(sets[1]) && fs::exists(sets[2]));
  ASSERT_LT(sets[1], sets[2]);

  // The newest set loses a file: the one before it is restored.
  fs::rename(sets[2] + "/server-1.lpsckpt", dir + "/moved.lpsckpt");
  EXPECT_TRUE(Restore(2, dir, 2).at_checkpoint == values[1]);
  // Named directly, the incomplete set is refused at Start.
  {
    Options r = o;
    r.restore_dir = sets[2];
    Server s(r);
    Status st = s.Start();
    EXPECT_EQ(st.code(), StatusCode::kIoError) << st;
    EXPECT_NE(st.message().find("server-1.lpsckpt"), std::string::npos) << st;
  }
  fs::rename(dir + "/moved.lpsckpt", sets[2] + "/server-1.lpsckpt");
  EXPECT_TRUE(Restore(2, dir, 3).at_checkpoint == values[2]);

  // A flipped byte in a table's data: the declare of that table fails with the reason.
  {
    std::fstream f(sets[2] + "/server-0.lpsckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char b = 0;
    f.read(&b, 1);
    b ^= 0x40;
    f.seekp(100);
    f.write(&b, 1);
  }
  {
    Options r = o;
    r.restore_dir = dir;
    LocalCluster c(2, 1, "inproc", r);
    ASSERT_TRUE(c.Start().ok());
    StatusOr<TableId> d = c.worker(0).DeclareTable(DenseSpec());
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("checksum mismatch"), std::string::npos) << d.status();
    c.Finish();
  }
  // Not a directory of sets at all.
  {
    Options r = o;
    r.restore_dir = dir + "/nothing-here";
    Server s(r);
    EXPECT_EQ(s.Start().code(), StatusCode::kNotFound);
  }
  fs::remove_all(dir);
}

// A table declared with another layout than the checkpoint's is refused, naming both; a
// table the checkpoint does not have starts from its initializer.
TEST(CheckpointTest, OtherLayoutRefusedUnknownTableFresh) {
  const std::string dir = TempDir("layout");
  const Outcome first = TrainAndCheckpoint(2, dir, 2);
  ASSERT_FALSE(first.set.empty());
  Options o = FastOptions();
  o.dense_chunk_elems = 1000;
  o.restore_dir = dir;
  LocalCluster c(2, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  StatusOr<TableId> d = w.DeclareTable(DenseSpec(kDenseSize + 1));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("declared as dense, 2501 elements"), std::string::npos)
      << d.status();
  EXPECT_NE(d.status().message().find("as dense, 2500 elements"), std::string::npos) << d.status();
  TableSpec other = SparseSpec();
  other.rule = UpdateRule::kSgd;  // no state: another layout
  StatusOr<TableId> s = w.DeclareTable(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("rule adagrad"), std::string::npos) << s.status();
  // Per-row state against per-element state: the same dim, another row width.
  TableSpec per_element = RowwiseSpec();
  per_element.rule = UpdateRule::kAdagrad;
  StatusOr<TableId> r = w.DeclareTable(per_element);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rule rowwise_adagrad (1 state floats per row)"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("rule adagrad (4 state floats per row)"), std::string::npos)
      << r.status();
  // A new name: fresh values from the initializer.
  auto fresh = w.DeclareTable(TableSpec::Dense("new", 10));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::vector<float> out(10, -1.0f);
  ASSERT_TRUE(w.Wait(w.Pull(*fresh, out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out, std::vector<float>(10, 0.0f));
  EXPECT_TRUE(c.Finish().ok());
  fs::remove_all(dir);
}

// A cold-tier table: the checkpoint holds the rows on disk only too; a restore into the
// same cold_dir empties the store first, so rows spilled after the checkpoint do not
// come back.
TEST(CheckpointTest, ColdTierRowsOnDiskAndAfterTheCheckpoint) {
  const std::string dir = TempDir("cold");
  Options o = FastOptions();
  o.cold_dir = dir + "/cold";
  TableSpec spec = TableSpec::Sparse("c", kDim, UpdateRule::kSgd);
  spec.learning_rate = 1.0f;
  spec.capacity = 10;
  spec.eviction = Eviction::kLru;
  spec.cold_tier = true;
  std::vector<Key> ids, late;
  for (Key k = 0; k < 100; ++k) ids.push_back(k * 977);
  for (Key k = 0; k < 50; ++k) late.push_back(1000000 + k);
  std::vector<float> rows(ids.size() * kDim), at_ckpt(ids.size() * kDim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 9) + 1.0f;
  std::vector<float> late_rows(late.size() * kDim, 2.0f);
  std::string set;
  {
    LocalCluster c(1, 1, "inproc", o);
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    auto t = w.DeclareTable(spec);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(w.Wait(w.PushSparse(*t, ids.data(), ids.size(), rows.data(), rows.size()), kWait).ok());
    StatusOr<std::string> s = w.Checkpoint(dir + "/ckpt", kWait);
    ASSERT_TRUE(s.ok()) << s.status();
    set = *s;
    // After the checkpoint: new ids, spilled to the cold tier as others come in.
    ASSERT_TRUE(w.Wait(w.PushSparse(*t, late.data(), late.size(), late_rows.data(), late_rows.size()), kWait).ok());
    ASSERT_TRUE(w.Wait(w.PullSparse(*t, ids.data(), ids.size(), at_ckpt.data(), at_ckpt.size()), kWait).ok());
    ASSERT_TRUE(c.Finish().ok());
  }
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(at_ckpt[i], -rows[i]) << i;
  for (const std::string cold : {dir + "/cold", dir + "/fresh-cold"}) {
    SCOPED_TRACE(cold);
    Options r = o;
    r.cold_dir = cold;
    r.restore_dir = set;
    LocalCluster c(1, 1, "inproc", r);
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    auto t = w.DeclareTable(spec);
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<float> got(ids.size() * kDim), got_late(late.size() * kDim, -1.0f);
    ASSERT_TRUE(w.Wait(w.PullSparse(*t, ids.data(), ids.size(), got.data(), got.size()), kWait).ok());
    EXPECT_EQ(got, at_ckpt);
    ASSERT_TRUE(w.Wait(w.PullSparse(*t, late.data(), late.size(), got_late.data(), got_late.size()), kWait).ok());
    EXPECT_EQ(got_late, std::vector<float>(late.size() * kDim, 0.0f));  // never checkpointed
    ASSERT_TRUE(c.Finish().ok());
  }
  fs::remove_all(dir);
}

// Errors: no directory anywhere; a directory the servers cannot write (the message names
// the server). Periodic checkpoints: the scheduler starts sets on its own.
TEST(CheckpointTest, ErrorsAndPeriodicSets) {
  const std::string dir = TempDir("periodic");
  {
    LocalCluster c(2, 1, "inproc");
    ASSERT_TRUE(c.Start().ok());
    Worker& w = c.worker(0);
    StatusOr<std::string> none = w.Checkpoint("", kWait);
    EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument) << none.status();
    std::ofstream(dir + "/file") << "x";
    StatusOr<std::string> bad = w.Checkpoint(dir + "/file/sub", kWait);
    EXPECT_EQ(bad.status().code(), StatusCode::kIoError) << bad.status();
    EXPECT_NE(bad.status().message().find("server rank"), std::string::npos) << bad.status();
    EXPECT_TRUE(c.Finish().ok());
  }
  Options o = FastOptions();
  o.checkpoint_dir = dir + "/auto";
  o.checkpoint_every_s = 1;
  o.checkpoint_keep = 2;
  LocalCluster c(2, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  auto t = w.DeclareTable(TableSpec::Dense("p", 100));
  ASSERT_TRUE(t.ok());
  std::vector<float> g(100, 1.0f);
  ASSERT_TRUE(w.Wait(w.Push(*t, g.data(), g.size()), kWait).ok());
  auto count_sets = [&] {
    int n = 0;
    if (!fs::exists(dir + "/auto")) return 0;
    for (const auto& e : fs::directory_iterator(dir + "/auto")) {
      if (e.path().filename().string().rfind("ckpt-", 0) == 0 &&
          fs::exists(e.path() / "server-1.lpsckpt"))
        ++n;
    }
    return n;
  };
  for (int i = 0; i < 100 && count_sets() < 2; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_GE(count_sets(), 2);
  // An explicit request without a directory goes to checkpoint_dir too.
  StatusOr<std::string> mine = w.Checkpoint("", kWait);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(fs::path(*mine).parent_path(), fs::path(dir + "/auto"));
  EXPECT_LE(count_sets(), 3);  // checkpoint_keep (one more while a set is being written)
  EXPECT_TRUE(c.Finish().ok());
  fs::remove_all(dir);
}

// A server writing a checkpoint longer than heartbeat_timeout_ms reads none of the
// scheduler's messages meanwhile: that is not silence. (It used to take the scheduler
// for lost and stop.)
TEST(CheckpointSlowTest, AWriteLongerThanTheHeartbeatTimeoutLosesNothing) {
  const std::string dir = TempDir("slow");
  Options o = FastOptions();
  o.heartbeat_interval_ms = 20;
  o.heartbeat_timeout_ms = 100;
  LocalCluster c(1, 1, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  // 16M elements with Adam's two state planes: 192 MiB to write, well over 100 ms.
  const uint64_t n = uint64_t{1} << 24;
  auto t = w.DeclareTable(TableSpec::Dense("big", n, UpdateRule::kAdam));
  ASSERT_TRUE(t.ok()) << t.status();
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> set = w.Checkpoint(dir, kWait);
  ASSERT_TRUE(set.ok()) << set.status();
  const auto took = std::chrono::steady_clock::now() - start;
  std::vector<float> out(n);
  ASSERT_TRUE(w.Wait(w.Pull(*t, out.data(), out.size()), kWait).ok());
  EXPECT_EQ(c.scheduler().stats().dead_nodes, 0u);
  EXPECT_TRUE(c.Finish().ok());
  fs::remove_all(dir);
  RecordProperty("checkpoint_ms",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
}

}  // namespace
}  // namespace ps
