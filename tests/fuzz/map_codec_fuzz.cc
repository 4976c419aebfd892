// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The cluster map's wire form (map_codec: MapFromProto), which every server and worker
// decodes from the scheduler's MapUpdate: no input may crash it, and a map it accepts is
// well formed (ranges contiguous, covering, on servers), encodes and decodes back the same.
#include "fuzz_util.h"
#include "layerps.pb.h"
#include "transport/map_codec.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  layerps::pb::ClusterMap pb;
  if (!pb.ParseFromArray(data, static_cast<int>(size))) return 0;
  StatusOr<std::shared_ptr<const ClusterMap>> parsed = MapFromProto(pb);
  if (!parsed.ok()) return 0;
  const ClusterMap& map = **parsed;
  for (size_t i = 1; i < map.nodes.size(); ++i) FUZZ_ASSERT(map.nodes[i - 1].id < map.nodes[i].id);
  for (const auto& kv : map.tables) {
    const TableInfo& t = kv.second;
    FUZZ_ASSERT(t.spec.Validate().ok() && !t.ranges.empty());
    uint64_t expect = 0;
    for (const KeyRange& r : t.ranges) {
      FUZZ_ASSERT(r.begin == expect);
      const NodeInfo* n = map.FindNode(r.server);
      FUZZ_ASSERT(n != nullptr && n->role == Role::kServer);
      if (t.dense()) {
        // What a worker slices a dense request by.
        FUZZ_ASSERT(r.end > r.begin && r.end <= t.num_chunks());
        FUZZ_ASSERT(t.RangeFirstElem(r) < t.RangeEndElem(r) && t.RangeEndElem(r) <= t.spec.size);
      }
      expect = r.end;
    }
    if (t.dense()) FUZZ_ASSERT(expect == t.num_chunks());
    FUZZ_ASSERT(map.FindTableByName(t.spec.name) != nullptr);
  }
  for (const auto& kv : map.placement) (void)map.ServersForLayer(kv.first);
  (void)map.ServersForLayer("");
  // Round trip.
  layerps::pb::ClusterMap again;
  MapToProto(map, &again);
  StatusOr<std::shared_ptr<const ClusterMap>> back = MapFromProto(again);
  FUZZ_ASSERT(back.ok());
  FUZZ_ASSERT((*back)->epoch == map.epoch && (*back)->nodes.size() == map.nodes.size() &&
              (*back)->tables.size() == map.tables.size() && (*back)->placement == map.placement &&
              (*back)->tags == map.tags);
  return 0;
}
