// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The control messages the scheduler parses (ParseControl) and what it does with them
// from a member: declares (spec decoding and validation, range assignment), map
// acknowledgements, barriers, placements, rejoins, run through the scheduler's own TableDirectory
// and Barriers over a fixed cluster (2 servers, 2 workers). Input: a sequence of
// messages, each a byte (the sender: node 1..4), a 2-byte little-endian length and that
// many bytes of a Control frame; every input starts from a fresh scheduler state.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "layerps.pb.h"
#include "scheduler/barriers.h"
#include "scheduler/cluster_state.h"
#include "scheduler/table_directory.h"
#include "transport/map_codec.h"

namespace ps {
namespace {

class FakeState final : public ClusterState {
 public:
  FakeState() {
    for (NodeId id = 0; id <= 4; ++id) {
      NodeInfo n;
      n.id = id;
      n.role = id == 0 ? Role::kScheduler : id <= 2 ? Role::kServer : Role::kWorker;
      n.rank = id == 0 ? 0 : (id - 1) % 2;
      n.endpoint = "tcp://127.0.0.1:" + std::to_string(5000 + id);
      n.alive = true;
      map_.nodes.push_back(n);
      map_.tags[id] = "tag" + std::to_string(id);
    }
  }
  ClusterMap& map() override { return map_; }
  void BroadcastMap() override {
    ++map_.epoch;
    // What every node does with it: the map must survive its wire form.
    layerps::pb::ClusterMap pb;
    MapToProto(map_, &pb);
    FUZZ_ASSERT(MapFromProto(pb).ok());
  }
  void Send(NodeId to, const layerps::pb::Control& c) override {
    FUZZ_ASSERT(map_.FindNode(to) != nullptr);
    std::string bytes;
    FUZZ_ASSERT(c.SerializeToString(&bytes));
  }
  bool complete() const override { return true; }

 private:
  ClusterMap map_;
};

// A clock that moves on with every message, so barrier deadlines and stall warnings are
// exercised without real time.
int64_t NextMillis() {
  static int64_t now = 0;
  return now += 250;
}

void HandleOne(NodeId from, const Message& msg, FakeState* state, TableDirectory* tables,
               Barriers* barriers) {
  layerps::pb::Control c;
  if (!ParseControl(msg, &c).ok()) return;
  switch (c.body_case()) {
    case layerps::pb::Control::kRegister: {
      // The scheduler reads these fields of a registration before deciding.
      const auto& r = c.register_();
      (void)r.session().size();
      (void)static_cast<Role>(r.role());
      (void)r.requested_rank();
      break;
    }
    case layerps::pb::Control::kMapAck:
      tables->OnMapAck(from, c.map_ack());
      break;
    case layerps::pb::Control::kDeclareTable:
      tables->HandleDeclare(from, c.declare_table());
      break;
    case layerps::pb::Control::kBarrier:
      barriers->HandleBarrier(from, c.barrier(), NextMillis());
      break;
    case layerps::pb::Control::kJoin:
      barriers->HandleJoin(from, c.join(), NextMillis());
      break;
    case layerps::pb::Control::kInstallPlacement:
      tables->HandleInstallPlacement(from, c.install_placement());
      break;
    case layerps::pb::Control::kLeave:
      barriers->Forget(from);
      tables->Resolve();
      break;
    case layerps::pb::Control::kRejoin: {
      // A restarted scheduler decodes the map, takes the barrier counts and rebuilds its
      // table directory (docs/recovery.md).
      const auto& r = c.rejoin();
      (void)MapFromProto(r.map());
      std::map<uint32_t, uint64_t> passed;
      for (const auto& b : r.barriers()) passed[b.group()] = std::max<uint64_t>(passed[b.group()], b.passed());
      barriers->Recover(passed);
      tables->Recover({{from, r.map().epoch()}});
      tables->Resolve();
      break;
    }
    case layerps::pb::Control::kMapUpdate:
      // Nodes decode this one (from the scheduler).
      (void)MapFromProto(c.map_update().map());
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace ps

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  FakeState state;
  TableDirectory tables(&state, 65536);
  Barriers barriers(&state, /*tolerate_departures=*/size % 2 == 1);
  size_t at = 0;
  while (at + 3 <= size) {
    const NodeId from = 1 + data[at] % 4;
    const size_t len = std::min<size_t>(data[at + 1] | (data[at + 2] << 8), size - at - 3);
    at += 3;
    Message msg;
    msg.header.type = static_cast<uint16_t>(MsgType::kControl);
    msg.header.sender = from;
    msg.frames.push_back(Frame::Copy(data + at, len));
    at += len;
    HandleOne(from, msg, &state, &tables, &barriers);
  }
  barriers.FailAll(Aborted("end of input"));
  return 0;
}
