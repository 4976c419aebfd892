// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The same-host shared-memory path of the transport (ipc:// peers).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "local_cluster.h"
#include "transport/message.h"
#include "transport/transport.h"

namespace ps {
namespace {

using namespace std::chrono_literals;
using testing::LocalCluster;
constexpr auto kWait = 60s;

// 48 pushes of 16 MiB in flight from each of 2 workers: more than the 128 MiB ring, so
// frames wrap it, wait for blocks to be released, and fall back to the socket; then a
// pull (16 MiB reply in shared memory) checks every element.
TEST(SharedMemoryTest, ManyLargeFramesWrapTheRingAndFallBack) {
  LocalCluster c(1, 2, "ipc");
  ASSERT_TRUE(c.Start().ok());
  const uint64_t n = 4u << 20;
  const int kPushes = 48;
  c.OnEveryWorker([&](int r) {
    Worker& w = c.worker(r);
    auto id = w.DeclareTable(TableSpec::Dense("shm-big", n));
    ASSERT_TRUE(id.ok());
    std::vector<float> g(n);
    for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 11 + 1);
    std::vector<Ticket> t;
    for (int k = 0; k < kPushes; ++k) t.push_back(w.Push(*id, g.data(), n));
    for (Ticket tk : t) ASSERT_TRUE(w.Wait(tk, kWait).ok());
    ASSERT_TRUE(w.Barrier(Group::kWorkers, kWait).ok());
    std::vector<float> out(n);
    ASSERT_TRUE(w.Wait(w.Pull(*id, out.data(), n), kWait).ok());
    for (uint64_t i = 0; i < n; ++i) {
      if (out[i] != 2.0f * kPushes * g[i]) FAIL() << "element " << i << " = " << out[i];
    }
  });
  EXPECT_TRUE(c.Finish().ok());
}

// Frames on both sides of the size window (64 KiB .. 32 MiB) and odd sizes, over 2 servers;
// sparse rows (a 6.4 MB frame) too.
TEST(SharedMemoryTest, SizesAroundTheWindowAndSparse) {
  LocalCluster c(2, 1, "ipc");
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  for (uint64_t n : {uint64_t{16383}, uint64_t{16384}, uint64_t{100003}, uint64_t{17u << 20}}) {
    auto id = w.DeclareTable(TableSpec::Dense("shm-" + std::to_string(n), n));
    ASSERT_TRUE(id.ok());
    std::vector<float> g(n), out(n);
    for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 7) - 2.0f;
    ASSERT_TRUE(w.Wait(w.Push(*id, g.data(), n), kWait).ok());
    ASSERT_TRUE(w.Wait(w.PushPull(*id, g.data(), out.data(), n), kWait).ok());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * g[i]) << n << " " << i;
  }
  auto sid = w.DeclareTable(TableSpec::Sparse("shm-sparse", 16));
  ASSERT_TRUE(sid.ok());
  std::vector<Key> keys(100000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<float> rows(keys.size() * 16, 1.5f), out(rows.size());
  ASSERT_TRUE(
      w.Wait(w.PushSparse(*sid, keys.data(), keys.size(), rows.data(), rows.size()), kWait).ok());
  ASSERT_TRUE(
      w.Wait(w.PullSparse(*sid, keys.data(), keys.size(), out.data(), out.size()), kWait).ok());
  EXPECT_EQ(out, rows);
  EXPECT_TRUE(c.Finish().ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// With Options::shared_memory off, ipc:// peers use the socket alone; results agree.
TEST(SharedMemoryTest, SwitchedOffUsesTheSocket) {
  Options o = testing::FastOptions();
  o.shared_memory = false;
  LocalCluster c(2, 1, "ipc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = (4u << 20) + 3;
  auto id = w.DeclareTable(TableSpec::Dense("noshm", n));
  ASSERT_TRUE(id.ok());
  std::vector<float> g(n), out(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 7);
  ASSERT_TRUE(w.Wait(w.PushPull(*id, g.data(), out.data(), n), std::chrono::seconds(60)).ok());
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], g[i]) << i;
  EXPECT_TRUE(c.Finish().ok());
}

// --- Manifests from strangers (issue 13, defect 2) ---------------------------------------

// The transport's segment size (zmq_transport.cc: 4096 flag words + a 128 MiB ring).
constexpr size_t kSegmentBytes = 4096 * 4 + (size_t{128} << 20);

// Lines of /proc/self/maps that name `needle`.
int MappingsOf(const std::string& needle) {
  std::ifstream in("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos;
  return n;
}

// A segment that looks like a LayerPS one (the right name prefix and size).
std::string StrangerSegment(int i) {
  const std::string name =
      "/layerps-shm-stranger-" + std::to_string(getpid()) + "-" + std::to_string(i);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(kSegmentBytes)), 0);
  close(fd);
  return name;
}

bool SegmentExists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// A DEALER connected to `endpoint` as `identity` (empty: ZeroMQ's own). One socket per
// identity: a ROUTER refuses a second connection with an identity still in use.
zmq::socket_t Dealer(zmq::context_t& ctx, const std::string& endpoint,
                     const std::string& identity = "") {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 1000);
  if (!identity.empty()) s.set(zmq::sockopt::routing_id, identity);
  s.connect(endpoint);
  return s;
}

// Sends a push whose one payload frame is "in shared memory" per a manifest that names
// `segment`, claiming to come from `sender`.
void SendManifest(zmq::socket_t& s, const std::string& segment, NodeId sender) {
  std::string manifest(72 + 24, '\0');
  const uint64_t magic = 0x31304D4853535046ull;
  const uint32_t count = 1;
  std::memcpy(&manifest[0], &magic, 8);
  std::memcpy(&manifest[8], &count, 4);
  std::memcpy(&manifest[16], segment.data(), segment.size());
  const uint64_t size = 64;  // entry: frame 0, slot 0, offset 0, 64 bytes
  std::memcpy(&manifest[72 + 16], &size, 8);
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kPush);
  h.sender = sender;
  h.count = 16;
  s.send(zmq::buffer(manifest), zmq::send_flags::sndmore);
  s.send(zmq::buffer(&h, sizeof(h)), zmq::send_flags::sndmore);
  s.send(zmq::message_t(), zmq::send_flags::none);
}

std::string EndpointOf(Worker& w, Role role) {
  for (const auto& n : w.Nodes()) {
    if (n.role == role) return n.endpoint;
  }
  return "";
}

// A stranger names segments of its own in manifests to a server and to a worker, in the
// name of the other: nothing is mapped, nothing unlinked, and the real job, whose own
// mappings the forged manifests try to replace, goes on exactly.
TEST(SharedMemoryTest, StrangersManifestsMapNothingAndDoNotDisturbARealJob) {
  Options o = testing::FastOptions();
  o.request_timeout_ms = 5000;
  LocalCluster c(1, 1, "ipc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  const uint64_t n = 1u << 20;  // 4 MiB frames: through shared memory
  auto id = w.DeclareTable(TableSpec::Dense("shm-stranger", n));
  ASSERT_TRUE(id.ok());
  std::vector<float> g(n, 1.0f), out(n);
  ASSERT_TRUE(w.Wait(w.PushPull(*id, g.data(), out.data(), n), kWait).ok());
  NodeId server_id = 0;
  for (const auto& node : w.Nodes()) {
    if (node.role == Role::kServer) server_id = node.id;
  }
  zmq::context_t ctx;
  zmq::socket_t to_server = Dealer(ctx, EndpointOf(w, Role::kServer));
  zmq::socket_t to_worker = Dealer(ctx, EndpointOf(w, Role::kWorker));
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) {
    names.push_back(StrangerSegment(i));
    SendManifest(to_server, names.back(), w.id());
    SendManifest(to_worker, names.back(), server_id);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(MappingsOf("layerps-shm-stranger"), 0);
  for (const auto& name : names) {
    EXPECT_TRUE(SegmentExists(name)) << name << " was unlinked by the receiver";
    shm_unlink(name.c_str());
  }
  Status s = w.Wait(w.PushPull(*id, g.data(), out.data(), n), kWait);
  ASSERT_TRUE(s.ok()) << s;
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f) << i;
  EXPECT_TRUE(c.Finish().ok());
}

// With shared memory off, no manifest maps anything.
TEST(SharedMemoryTest, SwitchedOffMapsNothing) {
  Options o = testing::FastOptions();
  o.shared_memory = false;
  LocalCluster c(1, 1, "ipc", o);
  ASSERT_TRUE(c.Start().ok());
  Worker& w = c.worker(0);
  zmq::context_t ctx;
  zmq::socket_t stranger = Dealer(ctx, EndpointOf(w, Role::kServer));
  const std::string name = StrangerSegment(100);
  SendManifest(stranger, name, w.id());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(MappingsOf("layerps-shm-stranger"), 0);
  EXPECT_TRUE(SegmentExists(name));
  shm_unlink(name.c_str());
  EXPECT_TRUE(c.Finish().ok());
}

// The transport alone: a manifest is acted on only from a connection listed by
// SetSharedMemoryPeers and only with shared memory on; a member naming one segment after
// another holds one mapping; a member no longer listed holds none.
TEST(SharedMemoryTransportTest, ManifestsOnlyFromListedMembersAndOnlyWhenOn) {
  for (bool on : {false, true}) {
    SCOPED_TRACE(on ? "shared memory on" : "shared memory off");
    TransportOptions o;
    o.shared_memory = on;
    std::unique_ptr<Transport> rx = NewZmqTransport(o);
    StatusOr<std::string> ep = rx->Bind(
        "ipc:///tmp/layerps-shmtx-" + std::to_string(getpid()) + "-" + std::to_string(on) + ".sock",
        "");
    ASSERT_TRUE(ep.ok()) << ep.status();
    rx->SetSharedMemoryPeers({"nmember"});
    zmq::context_t ctx;
    zmq::socket_t stranger = Dealer(ctx, *ep, "nstranger");
    zmq::socket_t member = Dealer(ctx, *ep, "nmember");
    auto receive = [&] {
      Message m;
      Status s;
      for (int i = 0; i < 10; ++i) {
        s = rx->Recv(&m, 2000);
        if (s.code() != StatusCode::kTimeout) break;
      }
      return s;
    };
    const std::string first = StrangerSegment(200);
    SendManifest(stranger, first, 1);
    EXPECT_EQ(receive().code(), StatusCode::kProtocolError);
    EXPECT_EQ(MappingsOf("layerps-shm-stranger"), 0);
    EXPECT_TRUE(SegmentExists(first));
    SendManifest(member, first, 1);
    Status s = receive();
    EXPECT_EQ(s.ok(), on) << s;
    EXPECT_EQ(MappingsOf("layerps-shm-stranger"), on ? 1 : 0);
    EXPECT_EQ(SegmentExists(first), !on);
    shm_unlink(first.c_str());
    if (on) {
      for (int i = 1; i <= 4; ++i) {
        const std::string name = StrangerSegment(200 + i);
        SendManifest(member, name, 1);
        EXPECT_TRUE(receive().ok());
        EXPECT_EQ(MappingsOf("layerps-shm-stranger"), 1) << "one live segment per member";
      }
      rx->SetSharedMemoryPeers({});
      EXPECT_EQ(MappingsOf("layerps-shm-stranger"), 0);
    }
    rx->Close();
  }
}

}  // namespace
}  // namespace ps
