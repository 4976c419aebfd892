// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/map_codec.h"

#include <algorithm>
#include <set>

#include "layerps.pb.h"

namespace ps {

void SpecToProto(const TableSpec& s, layerps::pb::TableSpec* pb) {
  pb->set_name(s.name);
  pb->set_kind(static_cast<uint32_t>(s.kind));
  pb->set_size(s.size);
  pb->set_dim(s.dim);
  pb->set_dtype(static_cast<uint32_t>(s.dtype));
  pb->set_rule(static_cast<uint32_t>(s.rule));
  pb->set_learning_rate(s.learning_rate);
  pb->set_init(static_cast<uint32_t>(s.init));
  pb->set_init_a(s.init_a);
  pb->set_init_b(s.init_b);
  pb->set_seed(s.seed);
  pb->set_layer(s.layer);
  pb->set_momentum(s.momentum);
  pb->set_beta1(s.beta1);
  pb->set_beta2(s.beta2);
  pb->set_epsilon(s.epsilon);
  pb->set_l1(s.l1);
  pb->set_l2(s.l2);
  pb->set_ftrl_beta(s.ftrl_beta);
  pb->set_sync(static_cast<uint32_t>(s.sync));
  pb->set_staleness(s.staleness);
  pb->set_elastic_alpha(s.elastic_alpha);
  pb->set_capacity(s.capacity);
  pb->set_eviction(static_cast<uint32_t>(s.eviction));
  pb->set_expiry_steps(s.expiry_steps);
  pb->set_admit_after(s.admit_after);
  pb->set_has_admit_probability(true);
  pb->set_admit_probability(s.admit_probability);
  pb->set_cold_tier(s.cold_tier);
  pb->set_cache_rows(s.cache_rows);
  pb->set_expiry_seconds(s.expiry_seconds);
  pb->set_capacity_bytes(s.capacity_bytes);
  pb->set_score_decay(s.score_decay);
  pb->set_cache_staleness(s.cache_staleness);
  pb->set_wire_dtype(static_cast<uint32_t>(s.wire_dtype));
}

TableSpec SpecFromProto(const layerps::pb::TableSpec& pb) {
  TableSpec s;
  s.name = pb.name();
  s.kind = static_cast<TableKind>(pb.kind());
  s.size = pb.size();
  s.dim = pb.dim();
  s.dtype = static_cast<DType>(pb.dtype());
  s.rule = static_cast<UpdateRule>(pb.rule());
  s.learning_rate = pb.learning_rate();
  s.init = static_cast<Initializer>(pb.init());
  s.init_a = pb.init_a();
  s.init_b = pb.init_b();
  s.seed = pb.seed();
  s.layer = pb.layer();
  s.momentum = pb.momentum();
  s.beta1 = pb.beta1();
  s.beta2 = pb.beta2();
  s.epsilon = pb.epsilon();
  s.l1 = pb.l1();
  s.l2 = pb.l2();
  s.ftrl_beta = pb.ftrl_beta();
  s.sync = static_cast<SyncMode>(pb.sync());
  s.staleness = pb.staleness();
  s.elastic_alpha = pb.elastic_alpha();
  s.capacity = pb.capacity();
  // Out-of-range enum values are kept as is: Validate (run on every decoded map) refuses them.
  s.eviction = static_cast<Eviction>(pb.eviction() > 1000 ? 1000 : pb.eviction());
  s.expiry_steps = pb.expiry_steps();
  s.admit_after = pb.admit_after();
  // proto3 floats default to 0, which is not "unbounded": a flag says the field was set.
  s.admit_probability = pb.has_admit_probability() ? pb.admit_probability() : 1.0f;
  s.cold_tier = pb.cold_tier();
  s.cache_rows = pb.cache_rows();
  s.expiry_seconds = pb.expiry_seconds();
  s.capacity_bytes = pb.capacity_bytes();
  s.score_decay = pb.score_decay() == 0.0f ? 0.99f : pb.score_decay();
  s.cache_staleness = pb.cache_staleness();
  s.wire_dtype = static_cast<WireDType>(pb.wire_dtype());
  return s;
}

StatusOr<std::shared_ptr<const ClusterMap>> MapFromProto(const layerps::pb::ClusterMap& pb) {
  auto m = std::make_shared<ClusterMap>();
  m->epoch = pb.epoch();
  m->replace_servers_ms = pb.replace_servers_ms();
  m->replication = pb.replication();
  if (pb.job().size() > 64) return ProtocolError("cluster map: job id over 64 bytes");
  m->job = pb.job();
  std::set<NodeId> ids;
  std::set<NodeId> servers;
  for (const auto& n : pb.nodes()) {
    if (n.role() < layerps::pb::SCHEDULER || n.role() > layerps::pb::WORKER) {
      return ProtocolError("cluster map: node with unknown role");
    }
    if (!ids.insert(n.id()).second) return ProtocolError("cluster map: duplicate node id");
    NodeInfo info;
    info.id = n.id();
    info.role = static_cast<Role>(n.role());
    info.rank = n.rank();
    info.endpoint = n.endpoint();
    info.hostname = n.hostname();
    info.alive = n.alive();
    if (info.role == Role::kServer) servers.insert(info.id);
    if (n.tag().size() > 64) return ProtocolError("cluster map: node tag longer than 64 bytes");
    if (!n.tag().empty()) m->tags[info.id] = n.tag();
    m->nodes.push_back(std::move(info));
  }
  std::sort(m->nodes.begin(), m->nodes.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  std::vector<LayerServers> placement;
  for (const auto& l : pb.placement()) {
    placement.push_back(
        LayerServers{l.layer(), {l.server_ranks().begin(), l.server_ranks().end()}});
  }
  Status placed = ClusterMap::CheckPlacement(placement, m->CountRole(Role::kServer));
  if (!placed.ok()) return ProtocolError("cluster map: " + placed.message());
  for (auto& l : placement) m->placement[l.layer] = std::move(l.servers);
  for (const auto& t : pb.tables()) {
    TableInfo info;
    info.id = t.id();
    info.spec = SpecFromProto(t.spec());
    info.chunk_elems = t.chunk_elems();
    Status valid = info.spec.Validate();
    if (!valid.ok()) return ProtocolError("cluster map: " + valid.message());
    if (info.dense() && (info.chunk_elems == 0 || info.chunk_elems > (uint64_t{1} << 30))) {
      return ProtocolError("cluster map: bad chunk size");
    }
    if (t.ranges_size() == 0) return ProtocolError("cluster map: table without ranges");
    uint64_t expect = 0;
    for (int i = 0; i < t.ranges_size(); ++i) {
      const auto& r = t.ranges(i);
      if (!servers.count(r.server())) return ProtocolError("cluster map: range on a non-server");
      if (r.begin() != expect) return ProtocolError("cluster map: ranges not contiguous");
      const bool last = i + 1 == t.ranges_size();
      if (info.dense()) {
        if (r.end() <= r.begin()) return ProtocolError("cluster map: empty range");
        if (last && r.end() != info.num_chunks())
          return ProtocolError("cluster map: ranges do not cover the table");
      } else {
        // Sparse: the last range ends at 2^64, written as 0.
        if (last ? r.end() != 0 : r.end() <= r.begin())
          return ProtocolError("cluster map: bad sparse range");
      }
      info.ranges.push_back(KeyRange{r.begin(), r.end(), r.server()});
      expect = r.end();
    }
    if (!m->tables.emplace(info.id, std::move(info)).second) {
      return ProtocolError("cluster map: duplicate table id");
    }
  }
  return std::shared_ptr<const ClusterMap>(std::move(m));
}

void MapToProto(const ClusterMap& map, layerps::pb::ClusterMap* pb) {
  pb->Clear();
  pb->set_epoch(map.epoch);
  pb->set_replace_servers_ms(map.replace_servers_ms);
  pb->set_replication(map.replication);
  pb->set_job(map.job);
  for (const auto& n : map.nodes) {
    auto* p = pb->add_nodes();
    p->set_id(n.id);
    p->set_role(static_cast<layerps::pb::Role>(n.role));
    p->set_rank(n.rank);
    p->set_endpoint(n.endpoint);
    p->set_hostname(n.hostname);
    p->set_alive(n.alive);
    auto tag = map.tags.find(n.id);
    if (tag != map.tags.end()) p->set_tag(tag->second);
  }
  for (const auto& kv : map.placement) {
    auto* l = pb->add_placement();
    l->set_layer(kv.first);
    for (uint32_t r : kv.second) l->add_server_ranks(r);
  }
  for (const auto& kv : map.tables) {
    auto* t = pb->add_tables();
    t->set_id(kv.second.id);
    SpecToProto(kv.second.spec, t->mutable_spec());
    t->set_chunk_elems(kv.second.chunk_elems);
    for (const auto& r : kv.second.ranges) {
      auto* pr = t->add_ranges();
      pr->set_begin(r.begin);
      pr->set_end(r.end);
      pr->set_server(r.server);
    }
  }
}

}  // namespace ps
