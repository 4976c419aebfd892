// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What a server does with a data message from a member: the checks every request passes
// (CheckRequest: frames against the header, tables held, fused segments in range, fused
// sparse segments' tables, dims and keys) and then the sync policy, which applies it to
// the store and answers: dense, sparse, fused and fused sparse pushes, pulls, assigns.
// The store is fresh for every input: this server (node 1) holds elements [256, 768) of
// dense table 0 (1000 elements, chunks of 256), half of the hash space of sparse table 1
// (dim 4, adagrad), all of dense table 2 (100 elements, adam) and all of sparse table 3
// (dim 2, sum, bounded: 16 rows, LRU). Input: as SplitMessage (a header, then
// length-prefixed frames).
#include <memory>

#include "fuzz_util.h"
#include "server/request.h"
#include "server/store.h"
#include "server/sync_policy.h"

namespace {

constexpr ps::NodeId kSelf = 1;
constexpr uint64_t kMaxElems = uint64_t{1} << 20;

std::unique_ptr<ps::Store> NewStore() {
  using namespace ps;
  auto store = std::make_unique<Store>(kSelf);
  TableInfo dense;
  dense.id = 0;
  dense.spec = TableSpec::Dense("d", 1000, UpdateRule::kSgd);
  dense.chunk_elems = 256;
  dense.ranges = {{0, 1, 2}, {1, 3, kSelf}, {3, 4, 2}};
  TableInfo sparse;
  sparse.id = 1;
  sparse.spec = TableSpec::Sparse("s", 4, UpdateRule::kAdagrad);
  sparse.ranges = {{0, uint64_t{1} << 63, kSelf}, {uint64_t{1} << 63, 0, 2}};
  TableInfo adam;
  adam.id = 2;
  adam.spec = TableSpec::Dense("a", 100, UpdateRule::kAdam);
  adam.chunk_elems = 256;
  adam.ranges = {{0, 1, kSelf}};
  TableInfo bounded;
  bounded.id = 3;
  bounded.spec = TableSpec::Sparse("b", 2);
  bounded.spec.capacity = 16;
  bounded.spec.eviction = Eviction::kLru;
  bounded.ranges = {{0, 0, kSelf}};
  for (const TableInfo* t : {&dense, &sparse, &adam, &bounded}) {
    FUZZ_ASSERT(t->spec.Validate().ok());
    FUZZ_ASSERT(store->Install(*t).ok());
  }
  return store;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  Message msg;
  Status header;
  if (!fuzz::SplitMessage(data, size, &msg, &header)) return 0;
  if (msg.header.msg_type() == MsgType::kControl || msg.header.msg_type() == MsgType::kReply ||
      msg.header.msg_type() == MsgType::kPeerTensor) {
    return 0;  // a server's runtime hands it requests only
  }
  std::unique_ptr<Store> store = NewStore();
  DataRequest req;
  Status valid = CheckRequest(std::move(msg), *store, /*epoch=*/5, kMaxElems, &req);
  if (!valid.ok()) return 0;
  const Header h = req.header;
  std::unique_ptr<SyncPolicy> policy = NewApplyOnArrival();
  int replies = 0;
  policy->Handle(std::move(req), *store,
                 [&](const Header& rh, const Status& s, std::vector<Frame> frames) {
                   ++replies;
                   FUZZ_ASSERT(rh.request_id == h.request_id && rh.part == h.part);
                   if (!s.ok()) return;
                   uint64_t bytes = 0;
                   for (const Frame& f : frames) bytes += f.size();
                   if (h.msg_type() == MsgType::kPush || h.msg_type() == MsgType::kAssign) {
                     FUZZ_ASSERT(bytes == 0);
                   }
                 });
  FUZZ_ASSERT(replies == 1);
  return 0;
}
