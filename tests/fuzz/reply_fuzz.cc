// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What a worker does with the replies servers send (RequestTracker::OnReply): it matches
// a reply to an outstanding part and copies the pulled values into the caller's buffer,
// so a reply that passes must never write outside it. Every input issues the same
// requests through PsRequests (a dense pull over two servers, a sparse pull with a
// repeated key, a fused PullMany, a dense pushpull) and then answers them with replies
// built from the requests' own headers: a sequence of records, each
//   [selector] [mode] [byte index] [byte value] [u16 length] [length bytes of frames]
// where the selector picks a sent part, mode bit 0 makes it an error reply (status =
// the value), bit 1 flips the header byte at the index by the value, and the frames are
// length-prefixed as in SplitMessage. Finally everything still open is failed and waited.
#include <memory>
#include <mutex>
#include <vector>

#include "fuzz_util.h"
#include "worker/ps_requests.h"
#include "worker/request_tracker.h"

namespace ps {
namespace {

constexpr NodeId kServerA = 1, kServerB = 2;

std::shared_ptr<const ClusterMap> MakeMap() {
  auto m = std::make_shared<ClusterMap>();
  m->epoch = 3;
  for (NodeId id : {kServerA, kServerB}) {
    NodeInfo n;
    n.id = id;
    n.role = Role::kServer;
    n.rank = id - 1;
    n.alive = true;
    m->nodes.push_back(n);
  }
  TableInfo dense;
  dense.id = 0;
  dense.spec = TableSpec::Dense("d", 1000);
  dense.chunk_elems = 256;
  dense.ranges = {{0, 2, kServerA}, {2, 4, kServerB}};
  TableInfo sparse;
  sparse.id = 1;
  sparse.spec = TableSpec::Sparse("s", 3);
  sparse.ranges = {{0, uint64_t{1} << 63, kServerA}, {uint64_t{1} << 63, 0, kServerB}};
  TableInfo small;
  small.id = 2;
  small.spec = TableSpec::Dense("small", 40);
  small.chunk_elems = 256;
  small.ranges = {{0, 1, kServerB}};
  for (TableInfo* t : {&dense, &sparse, &small}) m->tables[t->id] = *t;
  return m;
}

struct Sent {
  NodeId to;
  Header header;
};

struct Harness {
  Harness() {
    options.request_timeout_ms = 600000;
    tracker = std::make_unique<RequestTracker>(options, [this](NodeId to, Message&& m) {
      std::lock_guard<std::mutex> lock(mu);
      sent.push_back(Sent{to, m.header});
      return Status::OK();
    });
    tracker->Start();
    ps = std::make_unique<PsRequests>(tracker.get(), [this] { return map; });
  }
  MemberOptions options;
  std::shared_ptr<const ClusterMap> map = MakeMap();
  std::mutex mu;
  std::vector<Sent> sent;  // guarded by mu
  std::unique_ptr<RequestTracker> tracker;
  std::unique_ptr<PsRequests> ps;
};

Harness& H() {
  static Harness* h = new Harness();  // lives for the whole run
  return *h;
}

}  // namespace
}  // namespace ps

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  ps::H();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  Harness& h = H();
  {
    std::lock_guard<std::mutex> lock(h.mu);
    h.sent.clear();
  }
  // Destinations of their own size: ASan reports any write past them.
  std::vector<float> dense_out(1000), many_a(300), many_b(40), pushpull_out(1000);
  std::vector<float> grad(1000, 1.0f);
  const std::vector<Key> keys = {7, 1, 7, uint64_t{1} << 40, 3};
  std::vector<float> rows(keys.size() * 3);
  std::vector<Ticket> tickets;
  tickets.push_back(h.ps->Dense(MsgType::kPull, 0, nullptr, dense_out.data(), 1000, nullptr));
  tickets.push_back(h.ps->Sparse(MsgType::kPull, 1, keys.data(), keys.size(), nullptr, rows.data(),
                                 rows.size(), nullptr));
  tickets.push_back(h.ps->Many(MsgType::kPull, {0, 2}, {nullptr, nullptr},
                               {many_a.data(), many_b.data()}, {300, 40}, nullptr));
  tickets.push_back(
      h.ps->Dense(MsgType::kPushPull, 0, grad.data(), pushpull_out.data(), 1000, nullptr));
  std::vector<Sent> sent;
  {
    std::lock_guard<std::mutex> lock(h.mu);
    sent = h.sent;
  }
  size_t at = 0;
  while (!sent.empty() && at + 6 <= size) {
    const Sent& s = sent[data[at] % sent.size()];
    const uint8_t mode = data[at + 1], index = data[at + 2] % sizeof(Header), value = data[at + 3];
    const size_t len = std::min<size_t>(data[at + 4] | (data[at + 5] << 8), size - at - 6);
    at += 6;
    Header reply = s.header;
    reply.type = static_cast<uint16_t>(MsgType::kReply);
    reply.sender = s.to;
    if (mode & 1) reply.status = static_cast<int8_t>(value);
    if (mode & 2) reinterpret_cast<uint8_t*>(&reply)[index] ^= value;
    Message msg;
    Status parsed;
    std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(&reply),
                               reinterpret_cast<const uint8_t*>(&reply) + sizeof(reply));
    bytes.insert(bytes.end(), data + at, data + at + len);
    at += len;
    if (!fuzz::SplitMessage(bytes.data(), bytes.size(), &msg, &parsed)) continue;
    if (msg.header.msg_type() != MsgType::kReply) continue;  // the runtime dispatches by kind
    h.tracker->OnReply(std::move(msg));
  }
  // What is still open fails; every request is over before its buffers go.
  h.tracker->FailMatching([](const Part&) { return true; }, Aborted("end of input"));
  for (Ticket t : tickets) {
    Status s = h.tracker->Wait(t, std::chrono::milliseconds(10000));
    FUZZ_ASSERT(s.code() != StatusCode::kTimeout);
  }
  return 0;
}
