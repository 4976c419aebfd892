// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The cluster map and table specs on the wire (protobuf). A map received from the network
// is checked here before any node uses it.
#ifndef PS_TRANSPORT_MAP_CODEC_H_
#define PS_TRANSPORT_MAP_CODEC_H_

#include <memory>

#include "common/cluster_map.h"
#include "ps/status.h"
#include "ps/types.h"

namespace layerps {
namespace pb {
class ClusterMap;
class TableSpec;
}  // namespace pb
}  // namespace layerps

namespace ps {

// Parses and checks a map that came over the network: ids unique, every table's spec
// valid and ranges well formed, every range's server a known server.
StatusOr<std::shared_ptr<const ClusterMap>> MapFromProto(const layerps::pb::ClusterMap& pb);
void MapToProto(const ClusterMap& map, layerps::pb::ClusterMap* pb);

void SpecToProto(const TableSpec& spec, layerps::pb::TableSpec* pb);
TableSpec SpecFromProto(const layerps::pb::TableSpec& pb);

}  // namespace ps

#endif  // PS_TRANSPORT_MAP_CODEC_H_
