// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Worker-to-worker tensors (Worker::SendTo / RecvFrom / RecvFromAny): delivery in either
// order, order within a tag, tags kept apart, size mismatches, bad ranks, a peer that dies,
// and receives from whichever worker sends first.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "transport/fault_transport.h"
#include "transport/inproc_transport.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using testing::LocalCluster;

constexpr auto kWait = milliseconds(10000);

std::vector<float> Iota(size_t n, float first) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class PeerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerTest, TensorsArriveWhicheverSideComesFirstInOrderPerTag) {
  LocalCluster c(1, 2, GetParam());
  ASSERT_TRUE(c.Start().ok());
  Worker& a = c.worker(0);
  Worker& b = c.worker(1);
  // Receive posted first.
  std::vector<float> got(1000);
  Ticket r = b.communicator().RecvFrom(0, /*tag=*/7, got.data(), got.size());
  const std::vector<float> x = Iota(1000, 1.0f);
  ASSERT_TRUE(a.Wait(a.communicator().SendTo(1, 7, x.data(), x.size()), kWait).ok());
  ASSERT_TRUE(b.Wait(r, kWait).ok());
  EXPECT_EQ(got, x);
  // Sends first, three under one tag and one under another: order kept, tags apart.
  std::vector<std::vector<float>> sent;
  for (int i = 0; i < 3; ++i) sent.push_back(Iota(64 << 10, 100.0f * i));  // 256 KiB each
  const std::vector<float> other = Iota(5, -5.0f);
  std::vector<Ticket> sends;
  for (const auto& s : sent) sends.push_back(a.communicator().SendTo(1, 1, s.data(), s.size()));
  sends.push_back(a.communicator().SendTo(1, 2, other.data(), other.size()));
  for (Ticket t : sends) ASSERT_TRUE(a.Wait(t, kWait).ok());
  std::vector<float> o(5);
  ASSERT_TRUE(b.Wait(b.communicator().RecvFrom(0, 2, o.data(), o.size()), kWait).ok());
  EXPECT_EQ(o, other);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> g(64 << 10);
    ASSERT_TRUE(b.Wait(b.communicator().RecvFrom(0, 1, g.data(), g.size()), kWait).ok());
    EXPECT_EQ(g, sent[i]) << "tensor " << i;
  }
  // Both directions at once.
  std::vector<float> back(3);
  const std::vector<float> y = {9, 8, 7};
  Ticket rb = a.communicator().RecvFrom(1, 3, back.data(), 3);
  ASSERT_TRUE(b.Wait(b.communicator().SendTo(0, 3, y.data(), 3), kWait).ok());
  ASSERT_TRUE(a.Wait(rb, kWait).ok());
  EXPECT_EQ(back, y);
  EXPECT_TRUE(c.Finish().ok());
}

TEST_P(PeerTest, BadRanksAndSizesAreClearErrors) {
  LocalCluster c(1, 2, GetParam());
  ASSERT_TRUE(c.Start().ok());
  Worker& a = c.worker(0);
  Worker& b = c.worker(1);
  const std::vector<float> x = Iota(4, 0.0f);
  EXPECT_EQ(a.Wait(a.communicator().SendTo(5, 0, x.data(), 4), kWait).code(), StatusCode::kNotFound);
  EXPECT_EQ(a.Wait(a.communicator().SendTo(0, 0, x.data(), 4), kWait).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Wait(a.communicator().SendTo(1, 0, nullptr, 4), kWait).code(), StatusCode::kInvalidArgument);
  std::vector<float> small(3);
  Ticket r = b.communicator().RecvFrom(0, 9, small.data(), small.size());
  EXPECT_TRUE(a.Wait(a.communicator().SendTo(1, 9, x.data(), 4), kWait).ok());
  Status s = b.Wait(r, kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("4 values where 3"), std::string::npos) << s;
  EXPECT_TRUE(c.Finish().ok());
}

// Receives posted while their tensors arrive (one tag each, so every tensor that comes
// first is buffered): each must still meet its tensor, none left waiting beside it.
TEST_P(PeerTest, ReceivesPostedWhileTheirTensorsArriveAllMatch) {
  LocalCluster c(1, 2, GetParam());
  ASSERT_TRUE(c.Start().ok());
  Worker& a = c.worker(0);
  Worker& b = c.worker(1);
  constexpr int kTensors = 5000;
  const std::vector<float> x = Iota(16, 1.0f);
  std::vector<std::vector<float>> got(kTensors, std::vector<float>(16));
  std::vector<Ticket> recvs(kTensors), sends(kTensors);
  // Lock-step: tensor i is sent as receive i is posted, i + 1 only after both.
  std::atomic<int> posted{-1};
  std::thread sender([&] {
    for (int i = 0; i < kTensors; ++i) {
      while (posted.load() < i - 1) std::this_thread::yield();
      sends[i] = a.communicator().SendTo(1, 1000 + i, x.data(), x.size());
    }
  });
  for (int i = 0; i < kTensors; ++i) {
    recvs[i] = b.communicator().RecvFrom(0, 1000 + i, got[i].data(), 16);
    posted.store(i);
  }
  sender.join();
  for (int i = 0; i < kTensors; ++i) {
    ASSERT_TRUE(b.Wait(recvs[i], kWait).ok()) << "tensor " << i;
    ASSERT_TRUE(a.Wait(sends[i], kWait).ok()) << "tensor " << i;
    ASSERT_EQ(got[i], x) << "tensor " << i;
  }
  EXPECT_TRUE(c.Finish().ok());
}

// RecvFromAny: tensors of several senders, receives posted before and after they arrive;
// each names its sender, and each sender's tensors come in the order it sent them.
TEST_P(PeerTest, ReceiveFromAnyNamesTheSenderAndKeepsEachSendersOrder) {
  LocalCluster c(1, 3, GetParam());
  ASSERT_TRUE(c.Start().ok());
  Worker& r = c.worker(0);
  // Posted first: the first tensor of either sender completes it.
  std::vector<float> got(4);
  uint32_t from = 99;
  Ticket t = r.communicator().RecvFromAny(5, got.data(), got.size(), &from);
  const std::vector<float> x2 = Iota(4, 20.0f);
  ASSERT_TRUE(c.worker(2).Wait(c.worker(2).communicator().SendTo(0, 5, x2.data(), 4), kWait).ok());
  ASSERT_TRUE(r.Wait(t, kWait).ok());
  EXPECT_EQ(from, 2u);
  EXPECT_EQ(got, x2);
  // Many tensors from two senders at once, most of them kept before any receive is posted:
  // tensor k of sender s holds s * 1000 + k.
  constexpr int kEach = 200;
  c.OnEveryWorker([&](int rank) {
    if (rank == 0) return;
    Worker& w = c.worker(rank);
    std::vector<std::vector<float>> bufs;
    std::vector<Ticket> sends;
    for (int k = 0; k < kEach; ++k) bufs.push_back(std::vector<float>(4, rank * 1000.0f + k));
    for (int k = 0; k < kEach; ++k) sends.push_back(w.communicator().SendTo(0, 6, bufs[k].data(), 4));
    for (Ticket s : sends) EXPECT_TRUE(w.Wait(s, kWait).ok());
  });
  std::vector<int> next(3, 0);
  for (int i = 0; i < 2 * kEach; ++i) {
    uint32_t sender = 99;
    ASSERT_TRUE(r.Wait(r.communicator().RecvFromAny(6, got.data(), 4, &sender), kWait).ok()) << i;
    ASSERT_TRUE(sender == 1 || sender == 2) << sender;
    EXPECT_EQ(got[0], sender * 1000.0f + next[sender]) << "tensor " << i;
    ++next[sender];
  }
  EXPECT_EQ(next[1], kEach);
  EXPECT_EQ(next[2], kEach);
  // Kept tensors go to RecvFromAny in arrival order across senders.
  const std::vector<float> a1(4, 1.0f), a2(4, 2.0f);
  ASSERT_TRUE(c.worker(2).Wait(c.worker(2).communicator().SendTo(0, 7, a2.data(), 4), kWait).ok());
  ASSERT_TRUE(c.worker(1).Wait(c.worker(1).communicator().SendTo(0, 7, a1.data(), 4), kWait).ok());
  ASSERT_TRUE(r.Wait(r.communicator().RecvFromAny(7, got.data(), 4, &from), kWait).ok());
  EXPECT_EQ(from, 2u);
  ASSERT_TRUE(r.Wait(r.communicator().RecvFromAny(7, got.data(), 4, nullptr), kWait).ok());  // from may be null
  EXPECT_EQ(got, a1);
  EXPECT_TRUE(c.Finish().ok());
}

// RecvFrom and RecvFromAny on one tag: a tensor goes to a receive naming its sender first.
TEST_P(PeerTest, ReceiveNamingTheSenderComesBeforeReceiveFromAny) {
  LocalCluster c(1, 3, GetParam());
  ASSERT_TRUE(c.Start().ok());
  Worker& r = c.worker(0);
  std::vector<float> any(2), named(2);
  uint32_t from = 99;
  Ticket ta = r.communicator().RecvFromAny(3, any.data(), 2, &from);
  Ticket tn = r.communicator().RecvFrom(2, 3, named.data(), 2);
  const std::vector<float> x2 = {2, 2}, x1 = {1, 1};
  ASSERT_TRUE(c.worker(2).Wait(c.worker(2).communicator().SendTo(0, 3, x2.data(), 2), kWait).ok());
  ASSERT_TRUE(r.Wait(tn, kWait).ok());
  EXPECT_EQ(named, x2);
  EXPECT_EQ(r.Wait(ta, milliseconds(100)).code(), StatusCode::kTimeout);  // still waiting
  ASSERT_TRUE(c.worker(1).Wait(c.worker(1).communicator().SendTo(0, 3, x1.data(), 2), kWait).ok());
  ASSERT_TRUE(r.Wait(ta, kWait).ok());
  EXPECT_EQ(from, 1u);
  EXPECT_EQ(any, x1);
  EXPECT_TRUE(c.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerTest, ::testing::Values("tcp", "inproc"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Byte counters: every message counted exactly, per peer and per table.
TEST(TrafficTest, CountsEveryByteToEachPeerAndTable) {
  LocalCluster c(1, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& a = c.worker(0);
  Worker& b = c.worker(1);
  auto table = a.DeclareTable(TableSpec::Dense("w", 1000));
  ASSERT_TRUE(table.ok());
  const NodeId server = c.server(0).id();
  const TrafficStats before = a.traffic();
  const TrafficStats server_before = c.server(0).traffic();
  const std::vector<float> g = Iota(1000, 0.0f);
  std::vector<float> out(1000);
  ASSERT_TRUE(a.Wait(a.Push(*table, g.data(), 1000), kWait).ok());
  ASSERT_TRUE(a.Wait(a.Pull(*table, out.data(), 1000), kWait).ok());
  const TrafficStats after = a.traffic();
  const PeerTraffic& p0 = before.peers.count(server) ? before.peers.at(server) : PeerTraffic{};
  const PeerTraffic& p1 = after.peers.at(server);
  EXPECT_EQ(p1.messages_sent - p0.messages_sent, 2u);          // push, pull
  EXPECT_EQ(p1.bytes_sent - p0.bytes_sent, 2 * 64 + 4000u);    // headers + pushed values
  EXPECT_EQ(p1.messages_received - p0.messages_received, 2u);  // two replies
  EXPECT_EQ(p1.bytes_received - p0.bytes_received, 2 * 64 + 4000u);
  EXPECT_EQ(after.tables.at(*table).bytes_sent, 4000u);
  EXPECT_EQ(after.tables.at(*table).bytes_received, 4000u);
  const TrafficStats st = c.server(0).traffic();
  EXPECT_EQ(
      st.tables.at(*table).bytes_received -
          (server_before.tables.count(*table) ? server_before.tables.at(*table).bytes_received : 0),
      4000u);
  // A peer tensor: one message each way (the tensor, its acknowledgement).
  std::vector<float> got(10);
  Ticket r = b.communicator().RecvFrom(0, 1, got.data(), 10);
  ASSERT_TRUE(a.Wait(a.communicator().SendTo(1, 1, g.data(), 10), kWait).ok());
  ASSERT_TRUE(b.Wait(r, kWait).ok());
  const PeerTraffic to_b = a.traffic().peers.at(b.id());
  EXPECT_EQ(to_b.messages_sent, 1u);
  EXPECT_EQ(to_b.bytes_sent, 64 + 40u);
  EXPECT_EQ(to_b.messages_received, 1u);
  EXPECT_EQ(to_b.bytes_received, 64u);
  EXPECT_GT(a.traffic().peers.at(kSchedulerId).messages_sent, 0u);  // register, declare...
  EXPECT_TRUE(c.Finish().ok());
}

// A receive waiting on a worker that leaves fails at once, not at its deadline.
TEST(PeerLeaveTest, ReceiveFromAWorkerThatLeftFailsUnavailable) {
  LocalCluster c(1, 2, "inproc");
  ASSERT_TRUE(c.Start().ok());
  std::vector<float> got(8);
  const auto start = std::chrono::steady_clock::now();
  Ticket r = c.worker(1).communicator().RecvFrom(0, 1, got.data(), got.size());
  c.worker(0).Stop();
  Status s = c.worker(1).Wait(r, milliseconds(20000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("left"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(15000));  // deadline: 60 s
  // And sending to it or receiving from it is refused at once; Nodes() shows it gone.
  EXPECT_EQ(c.worker(1).Wait(c.worker(1).communicator().SendTo(0, 1, got.data(), 8), kWait).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(c.worker(1).Wait(c.worker(1).communicator().RecvFrom(0, 1, got.data(), 8), kWait).code(),
            StatusCode::kUnavailable);
  int alive = 0;
  for (const NodeInfo& n : c.worker(1).Nodes()) {
    if (n.role == Role::kWorker) {
      EXPECT_EQ(n.alive, n.id != c.worker(0).id()) << "node " << n.id;
      alive += n.alive ? 1 : 0;
    }
  }
  EXPECT_EQ(alive, 1);
}

// A receive waiting on a worker that is cut off fails within the heartbeat timeout.
TEST(PeerFaultTest, ReceiveFromADeadWorkerFailsUnavailable) {
  auto injector = std::make_shared<FaultInjector>(std::make_shared<InProcessNetwork>());
  Options o = testing::FastOptions();
  o.heartbeat_interval_ms = 50;
  o.heartbeat_timeout_ms = 1000;
  SetTransportFactory(&o, injector);
  LocalCluster c(1, 2, "inproc", o);
  ASSERT_TRUE(c.Start().ok());
  std::vector<float> got(8);
  const auto start = std::chrono::steady_clock::now();
  Ticket r = c.worker(1).communicator().RecvFrom(0, 1, got.data(), got.size());
  injector->Isolate(c.worker(0).id());
  Status s = c.worker(1).Wait(r, milliseconds(20000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(15000));
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// RecvFromAny's errors: size, reserved tags, not started, its deadline, Stop; and the
// death of one worker does not fail it (another may still send).
TEST(PeerAnyTest, ReceiveFromAnyErrors) {
  // Everything but the deadline runs with FastOptions' 60 s request_timeout_ms, so no
  // receive below can reach its deadline on a loaded machine before its sender acts.
  LocalCluster c(1, 3, "inproc");
  ASSERT_TRUE(c.Start().ok());
  Worker& r = c.worker(0);
  std::vector<float> got(3);
  uint32_t from = 99;
  EXPECT_EQ(r.Wait(r.communicator().RecvFromAny(uint64_t{1} << 63, got.data(), 3, &from), kWait).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Wait(r.communicator().RecvFromAny(1, nullptr, 3, &from), kWait).code(),
            StatusCode::kInvalidArgument);
  Ticket small = r.communicator().RecvFromAny(1, got.data(), 3, &from);
  const std::vector<float> x = Iota(4, 0.0f);
  ASSERT_TRUE(c.worker(1).Wait(c.worker(1).communicator().SendTo(0, 1, x.data(), 4), kWait).ok());
  Status s = r.Wait(small, kWait);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  // Nothing comes: kUnavailable at request_timeout_ms, naming the tag (a cluster of its
  // own, whose deadline is short).
  {
    Options o = testing::FastOptions();
    o.request_timeout_ms = 1500;
    LocalCluster d(1, 2, "inproc", o);
    ASSERT_TRUE(d.Start().ok());
    Worker& dr = d.worker(0);
    const auto start = std::chrono::steady_clock::now();
    s = dr.Wait(dr.communicator().RecvFromAny(2, got.data(), 3, &from), kWait);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("tag 2 from any worker"), std::string::npos) << s;
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1400));
    EXPECT_TRUE(d.Finish().ok());
  }
  // Worker 1 leaves while a receive waits: it keeps waiting, and worker 2's tensor ends it.
  std::vector<float> g3(3);
  Ticket t = r.communicator().RecvFromAny(4, g3.data(), 3, &from);
  c.worker(1).Stop();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(r.Wait(t, milliseconds(10)).code(), StatusCode::kTimeout);
  ASSERT_TRUE(c.worker(2).Wait(c.worker(2).communicator().SendTo(0, 4, x.data(), 3), kWait).ok());
  ASSERT_TRUE(r.Wait(t, kWait).ok());
  EXPECT_EQ(from, 2u);
  // Stop aborts a waiting receive.
  Ticket last = r.communicator().RecvFromAny(4, g3.data(), 3, &from);
  r.Stop();
  EXPECT_EQ(r.Wait(last, kWait).code(), StatusCode::kAborted);
  EXPECT_EQ(r.Wait(r.communicator().RecvFromAny(4, g3.data(), 3, &from), kWait).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
