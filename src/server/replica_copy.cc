// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/replica_copy.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "layerps.pb.h"
#include "transport/map_codec.h"

namespace ps {

namespace {
// About this many payload bytes per copy message: big enough to keep the per-message cost
// small, small enough to stay far below any max_message_bytes a cluster would use.
constexpr uint64_t kCopyMessageBytes = uint64_t{4} << 20;

Message CopyMessage(const ClusterMap& map, uint64_t copy_id, CopyPhase phase) {
  Message m;
  m.header.type = static_cast<uint16_t>(MsgType::kReplicaCopy);
  m.header.request_id = copy_id;
  m.header.part = static_cast<uint32_t>(phase);
  m.header.epoch = WireEpoch(map.epoch);
  return m;
}

// The frame's bytes as floats: in place when aligned, else copied into *buf.
const float* Floats(const Frame& f, std::vector<float>* buf) {
  if (reinterpret_cast<uintptr_t>(f.data()) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(f.data());
  }
  buf->resize(f.size() / sizeof(float));
  std::memcpy(buf->data(), f.data(), buf->size() * sizeof(float));
  return buf->data();
}
}  // namespace

RangeSet RangesOf(const ClusterMap& map, NodeId server) {
  RangeSet out;
  for (const auto& kv : map.tables) {
    std::vector<std::pair<Key, Key>>& mine = out[kv.first];
    for (const KeyRange& r : kv.second.ranges) {
      if (r.server == server) mine.emplace_back(r.begin, r.end);
    }
  }
  return out;
}

bool RangesChanged(const RangeSet& before, const RangeSet& after) {
  for (const auto& kv : before) {
    auto it = after.find(kv.first);
    if (it != after.end() && it->second != kv.second) return true;
  }
  return false;
}

StatusOr<uint64_t> SendStoreCopy(Store& store, const ClusterMap& map, uint64_t copy_id,
                                 const std::vector<UpdateRecord>& held,
                                 const std::function<Status(Message&&)>& send) {
  uint64_t bytes = 0;
  {
    layerps::pb::ClusterMap pb;
    MapToProto(map, &pb);
    std::string encoded;
    if (!pb.SerializeToString(&encoded)) return Internal("cannot encode the cluster map");
    Message begin = CopyMessage(map, copy_id, CopyPhase::kBegin);
    begin.frames.push_back(Frame::Copy(encoded.data(), encoded.size()));
    bytes += encoded.size();
    PS_RETURN_IF_ERROR(send(std::move(begin)));
  }
  for (TableId id : store.TableIds()) {
    const TableSpec* spec = store.Spec(id);
    if (spec == nullptr) continue;
    const uint32_t sw = store.StateWidth(id);
    if (spec->kind == TableKind::kDense) {
      const uint64_t per = std::max<uint64_t>(1, kCopyMessageBytes / (sizeof(float) * (1 + sw)));
      for (const Store::DenseView& v : store.DenseRanges(id)) {
        for (uint64_t at = 0; at < v.size; at += per) {
          const uint64_t n = std::min(per, v.size - at);
          Message m = CopyMessage(map, copy_id, CopyPhase::kDense);
          m.header.table = id;
          m.header.offset = v.first + at;
          m.header.count = n;
          m.frames.push_back(Frame::Copy(v.values + at, n * sizeof(float)));
          std::vector<char> state(n * sw * sizeof(float));
          for (uint32_t k = 0; k < sw; ++k) {
            std::memcpy(state.data() + k * n * sizeof(float), v.state + k * v.size + at,
                        n * sizeof(float));
          }
          m.frames.push_back(Frame::Adopt(std::move(state)));
          bytes += n * (1 + sw) * sizeof(float);
          PS_RETURN_IF_ERROR(send(std::move(m)));
        }
      }
      continue;
    }
    const uint64_t width = store.RowWidth(id);  // values, then the rule's state
    const uint64_t per = std::max<uint64_t>(1, kCopyMessageBytes / (width * sizeof(float) + sizeof(Key)));
    std::vector<char> keys, rows;
    uint64_t n = 0;
    const auto flush = [&]() -> Status {
      if (n == 0) return Status::OK();
      Message m = CopyMessage(map, copy_id, CopyPhase::kSparse);
      m.header.table = id;
      m.header.flags = kFlagSparse;
      m.header.count = n;
      m.header.dim = spec->dim;
      bytes += keys.size() + rows.size();
      m.frames.push_back(Frame::Adopt(std::move(keys)));
      m.frames.push_back(Frame::Adopt(std::move(rows)));
      keys.clear();
      rows.clear();
      n = 0;
      return send(std::move(m));
    };
    PS_RETURN_IF_ERROR(store.VisitRows(id, [&](Key key, const float* row) -> Status {
      const char* k = reinterpret_cast<const char*>(&key);
      keys.insert(keys.end(), k, k + sizeof(Key));
      const char* r = reinterpret_cast<const char*>(row);
      rows.insert(rows.end(), r, r + width * sizeof(float));
      return ++n >= per ? flush() : Status::OK();
    }));
    PS_RETURN_IF_ERROR(flush());
  }
  Message end = CopyMessage(map, copy_id, CopyPhase::kEnd);
  end.header.count = held.size();
  end.frames.push_back(Frame::Copy(held.data(), held.size() * sizeof(UpdateRecord)));
  PS_RETURN_IF_ERROR(send(std::move(end)));
  return bytes;
}

StatusOr<ReplicaStart> BeginReplica(NodeId primary, const Message& begin) {
  if (begin.frames.size() != 1) return ProtocolError("a copy's begin carries one frame, the map");
  layerps::pb::ClusterMap pb;
  if (!pb.ParseFromArray(begin.frames[0].data(), static_cast<int>(begin.frames[0].size()))) {
    return ProtocolError("a copy's map does not parse");
  }
  StatusOr<std::shared_ptr<const ClusterMap>> map = MapFromProto(pb);
  if (!map.ok()) return map.status().WithContext("a copy's map");
  ReplicaStart start;
  start.map = std::move(*map);
  start.store = std::make_unique<Store>(primary);
  for (const auto& kv : start.map->tables) {
    TableInfo info = kv.second;
    info.spec.cold_tier = false;  // the copy lives in memory
    Status s = start.store->Install(info);
    if (s.ok()) s = start.store->UpdateLearningRate(info);
    if (!s.ok()) return s.WithContext("the copy of table '" + info.spec.name + "'");
  }
  return start;
}

Status ApplyCopyChunk(Store* replica, const Message& msg) {
  const Header& h = msg.header;
  const TableSpec* spec = replica->Spec(h.table);
  if (spec == nullptr) return ProtocolError("a copy names table " + std::to_string(h.table) + ", not in its map");
  const uint64_t sw = replica->StateWidth(h.table);
  if (msg.frames.size() != 2) return ProtocolError("a copy's data message carries two frames");
  const auto phase = static_cast<CopyPhase>(h.part);
  if (phase == CopyPhase::kDense) {
    if (spec->kind != TableKind::kDense || h.sparse()) return ProtocolError("a dense copy of a sparse table");
    const uint64_t n = h.count;
    if (n == 0 || n > (uint64_t{1} << 40) || msg.frames[0].size() != n * sizeof(float) ||
        msg.frames[1].size() != n * sw * sizeof(float)) {
      return ProtocolError("a dense copy's frames do not match its count");
    }
    for (const Store::DenseView& v : replica->DenseRanges(h.table)) {
      if (h.offset < v.first || h.offset - v.first > v.size || n > v.size - (h.offset - v.first)) continue;
      const uint64_t at = h.offset - v.first;
      std::memcpy(v.values + at, msg.frames[0].data(), n * sizeof(float));
      for (uint64_t k = 0; k < sw; ++k) {
        std::memcpy(v.state + k * v.size + at, msg.frames[1].data() + k * n * sizeof(float),
                    n * sizeof(float));
      }
      return Status::OK();
    }
    return ProtocolError("a dense copy of elements [" + std::to_string(h.offset) + ", +" +
                         std::to_string(n) + ") outside the ranges copied");
  }
  if (phase != CopyPhase::kSparse) return ProtocolError("not a copy's data message");
  if (spec->kind != TableKind::kSparse || !h.sparse() || h.dim != spec->dim) {
    return ProtocolError("a sparse copy that does not match its table");
  }
  const uint64_t width = replica->RowWidth(h.table);  // values, then the rule's state
  const uint64_t n = h.count;
  if (n == 0 || n > (uint64_t{1} << 32) || msg.frames[0].size() != n * sizeof(Key) ||
      msg.frames[1].size() / sizeof(float) / width != n || msg.frames[1].size() != n * width * sizeof(float)) {
    return ProtocolError("a sparse copy's frames do not match its count");
  }
  std::vector<float> buf;
  const float* rows = Floats(msg.frames[1], &buf);
  for (uint64_t i = 0; i < n; ++i) {
    Key key;
    std::memcpy(&key, msg.frames[0].data() + i * sizeof(Key), sizeof(Key));
    bool held = false;
    PS_RETURN_IF_ERROR(replica->RestoreRow(h.table, key, rows + i * width, &held));
    if (!held) return ProtocolError("a copied row routes to no range of the copy");
  }
  return Status::OK();
}

StatusOr<std::vector<UpdateRecord>> CopyHeldUpdates(const Message& end) {
  if (end.frames.size() != 1 || end.frames[0].size() % sizeof(UpdateRecord) != 0 ||
      end.frames[0].size() / sizeof(UpdateRecord) != end.header.count) {
    return ProtocolError("a copy's end does not list whole updates");
  }
  std::vector<UpdateRecord> out(end.header.count);
  if (!out.empty()) std::memcpy(out.data(), end.frames[0].data(), end.frames[0].size());
  return out;
}

}  // namespace ps
