// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Options::streams: several connections per peer, messages striped over them by lane.
// The transport opens exactly `streams` connections to a tcp peer, keeps the order within
// a lane, shows the receiver one identity, and closes every stream on Disconnect. In a
// cluster, a pull issued after pushes that were not waited for sees all of them (dense
// parts, fused small shares, sparse tables), whatever the transport.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "local_cluster.h"
#include "transport/transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;

constexpr auto kWait = 60s;

// Established TCP connections (IPv4) whose local port is `port`: on a listening socket's
// port, the connections it accepted.
int AcceptedConnections(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the column names
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (colon == std::string::npos) continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) == port && state == "01") ++n;
  }
  return n;
}

int PortOf(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

Status RecvOne(Transport& t, Message* msg) {
  for (int i = 0; i < 200; ++i) {
    Status s = t.Recv(msg, 100);
    if (s.code() != StatusCode::kTimeout) return s;
  }
  return Timeout("nothing arrived in 20 s");
}

class TransportStreamsTest : public ::testing::TestWithParam<int> {};

// 400 messages on 8 lanes (payloads of 0 to 256 KiB, so that streams could overtake each
// other): each lane's come in the order sent, all under the sender's one identity, over
// exactly `streams` connections; Disconnect closes them all.
TEST_P(TransportStreamsTest, LanesKeepTheirOrderOverTheirOwnConnections) {
  const int streams = GetParam();
  TransportOptions o;
  o.shared_memory = false;
  o.streams = streams;
  o.io_threads = streams;  // one I/O thread per stream, as a node has
  std::unique_ptr<Transport> rx = NewZmqTransport(o);
  std::unique_ptr<Transport> tx = NewZmqTransport(o);
  auto ep = rx->Bind("tcp://127.0.0.1:0", "");
  ASSERT_TRUE(ep.ok()) << ep.status();
  ASSERT_TRUE(tx->Connect(7, *ep, "nsender").ok());
  constexpr int kLanes = 8, kMessages = 400;
  std::vector<uint64_t> sent(kLanes, 0);
  for (int i = 0; i < kMessages; ++i) {
    Message m;
    m.header.type = static_cast<uint16_t>(MsgType::kPeerTensor);
    m.lane = static_cast<uint32_t>(i % kLanes);
    m.header.table = m.lane;
    m.header.request_id = sent[m.lane]++;
    const size_t bytes = (i % 5 == 0) ? (256 << 10) : static_cast<size_t>(i) * 8;
    std::vector<uint8_t> payload(bytes, static_cast<uint8_t>(i));
    m.header.count = bytes;
    m.frames.push_back(Frame::Copy(payload.data(), payload.size()));
    ASSERT_TRUE(tx->Send(7, std::move(m), 10000).ok());
  }
  std::vector<uint64_t> next(kLanes, 0);
  for (int i = 0; i < kMessages; ++i) {
    Message m;
    ASSERT_TRUE(RecvOne(*rx, &m).ok()) << "message " << i;
    EXPECT_EQ(m.identity, "nsender");
    ASSERT_LT(m.header.table, static_cast<uint32_t>(kLanes));
    EXPECT_EQ(m.header.request_id, next[m.header.table]++) << "lane " << m.header.table;
    ASSERT_EQ(m.frames.size(), 1u);
    EXPECT_EQ(m.frames[0].size(), m.header.count);
  }
  EXPECT_EQ(next, sent);
  EXPECT_EQ(AcceptedConnections(PortOf(*ep)), streams);
  tx->Disconnect(7);
  int left = -1;
  for (int i = 0; i < 100 && left != 0; ++i) {
    left = AcceptedConnections(PortOf(*ep));
    if (left != 0) std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(left, 0) << "streams left open after Disconnect";
  tx->Close();
  rx->Close();
}

INSTANTIATE_TEST_SUITE_P(Streams, TransportStreamsTest, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "streams" + std::to_string(p.param);
                         });

// The receiver cuts an identity at its zero byte: identities with one are refused.
TEST(TransportStreamsTest, IdentityWithAZeroByteIsRefused) {
  TransportOptions o;
  o.streams = 2;
  std::unique_ptr<Transport> tx = NewZmqTransport(o);
  EXPECT_EQ(tx->Connect(1, "tcp://127.0.0.1:1", std::string("n\0x", 3)).code(),
            StatusCode::kInvalidArgument);
  tx->Close();
}

// Sends on streams that are being closed under them: every send either succeeds or fails
// with kUnavailable, and Close returns (a socket opened after Close would keep it waiting).
TEST(TransportStreamsTest, SendsRacingCloseNeverHang) {
  TransportOptions o;
  o.shared_memory = false;
  o.streams = 4;
  for (int round = 0; round < 5; ++round) {
    std::unique_ptr<Transport> rx = NewZmqTransport(o);
    std::unique_ptr<Transport> tx = NewZmqTransport(o);
    auto ep = rx->Bind("tcp://127.0.0.1:0", "");
    ASSERT_TRUE(ep.ok()) << ep.status();
    ASSERT_TRUE(tx->Connect(3, *ep, "nracer").ok());
    std::atomic<int> bad{0};
    std::vector<std::thread> senders;
    for (int s = 0; s < 3; ++s) {
      senders.emplace_back([&, s] {
        for (int i = 0; i < 200; ++i) {
          Message m;
          m.header.type = static_cast<uint16_t>(MsgType::kPeerTensor);
          m.lane = static_cast<uint32_t>(s * 200 + i);
          Status st = tx->Send(3, std::move(m), 100);
          if (!st.ok() && st.code() != StatusCode::kUnavailable && st.code() != StatusCode::kAborted) {
            ++bad;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(round));
    if (round % 2 == 0) tx->Disconnect(3);
    tx->Close();
    for (auto& t : senders) t.join();
    rx->Close();
    EXPECT_EQ(bad.load(), 0);
  }
}

Options StreamOptions() {
  Options o = testing::FastOptions();
  o.streams = 4;
  o.part_bytes = 64 << 10;
  return o;
}

class ClusterStreamsTest : public ::testing::TestWithParam<std::string> {};

// Pushes not waited for, then a pull: the pull sees every push. A 4 MiB dense table (64
// parts on 4 streams), a small one pushed alone and pulled fused beside the big one, and a
// sparse table, two servers.
TEST_P(ClusterStreamsTest, APullSeesEveryPushBeforeIt) {
  LocalCluster c(2, 1, GetParam(), StreamOptions());
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  constexpr uint64_t kBig = 1 << 20, kSmall = 1000;
  constexpr uint32_t kDim = 8;
  constexpr size_t kKeys = 20000;
  auto big = w.DeclareTable(TableSpec::Dense("big", kBig));
  auto small = w.DeclareTable(TableSpec::Dense("small", kSmall));
  auto sparse = w.DeclareTable(TableSpec::Sparse("emb", kDim));
  ASSERT_TRUE(big.ok() && small.ok() && sparse.ok());
  const std::vector<float> ones_big(kBig, 1.0f), ones_small(kSmall, 1.0f);
  std::vector<Key> keys(kKeys);
  for (size_t i = 0; i < kKeys; ++i) keys[i] = i * 7919;
  const std::vector<float> rows(kKeys * kDim, 1.0f);
  constexpr int kPushes = 6;
  for (int round = 1; round <= 3; ++round) {
    std::vector<Ticket> pushes;
    for (int i = 0; i < kPushes; ++i) {
      pushes.push_back(w.Push(*big, ones_big.data(), kBig));
      pushes.push_back(w.Push(*small, ones_small.data(), kSmall));
      pushes.push_back(w.PushSparse(*sparse, keys.data(), kKeys, rows.data(), rows.size()));
    }
    const float want = static_cast<float>(round * kPushes);
    std::vector<float> out_big(kBig, -1.0f), out_small(kSmall, -1.0f);
    ASSERT_TRUE(w.Wait(w.PullMany({{*big, out_big.data(), kBig}, {*small, out_small.data(), kSmall}}),
                       kWait)
                    .ok());
    std::vector<float> out_rows(kKeys * kDim, -1.0f);
    ASSERT_TRUE(w.Wait(w.PullSparse(*sparse, keys.data(), kKeys, out_rows.data(), out_rows.size()),
                       kWait)
                    .ok());
    for (uint64_t i = 0; i < kBig; ++i) ASSERT_EQ(out_big[i], want) << "big " << i;
    for (uint64_t i = 0; i < kSmall; ++i) ASSERT_EQ(out_small[i], want) << "small " << i;
    for (size_t i = 0; i < out_rows.size(); ++i) ASSERT_EQ(out_rows[i], want) << "row " << i;
    for (Ticket t : pushes) ASSERT_TRUE(w.Wait(t, kWait).ok());
  }
  c.Finish();
}

INSTANTIATE_TEST_SUITE_P(Transports, ClusterStreamsTest, ::testing::Values("tcp", "ipc", "inproc"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace ps
