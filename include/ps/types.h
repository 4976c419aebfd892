// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Value types shared by the public API: ids, table specifications, node descriptions.
#ifndef PS_TYPES_H_
#define PS_TYPES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {

// A node's id inside one cluster. The scheduler is always kSchedulerId; servers and
// workers get ids in registration order.
using NodeId = uint32_t;
constexpr NodeId kSchedulerId = 0;
constexpr NodeId kUnassignedId = 0xFFFFFFFFu;

// A table's id, agreed by the scheduler when the table is first declared.
using TableId = uint32_t;
constexpr TableId kInvalidTable = 0xFFFFFFFFu;

// Keys: a dense table's chunk index, or a sparse table's row id (any 64-bit value).
using Key = uint64_t;

// Identifies one asynchronous request of a Worker; pass it to Worker::Wait.
using Ticket = uint64_t;

enum class Role : int { kScheduler = 1, kServer = 2, kWorker = 3 };
const char* RoleName(Role role);

enum class TableKind : int { kDense = 0, kSparse = 1 };

// How a table's values are stored on the servers (float32 only).
enum class DType : int { kFloat32 = 0 };

// How a table's values travel between workers and servers (TableSpec::wire_dtype):
// as float32, or narrowed to IEEE half (fp16) or bfloat16 on the wire to halve the bytes.
// The servers always store float32 and apply every update rule in float32: pushes are
// widened on arrival, pulled values narrowed for the reply (round to nearest even).
enum class WireDType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
// "fp32", "fp16", "bf16"; ParseWireDType is its inverse (it also takes "float32",
// "float16", "bfloat16", "half").
const char* WireDTypeName(WireDType type);
StatusOr<WireDType> ParseWireDType(const std::string& name);

// What a server does with a pushed gradient g.
// The stateful rules keep their state beside every value on the servers (sparse: beside
// every row, created with it; only the rows a push touches are updated: lazy updates).
// Formulas in docs/algorithms.md; dense tables match torch.optim's.
enum class UpdateRule : int {
  kSum = 0,       // aggregate: x += g; a pull returns the running sum
  kSgd = 1,       // x -= learning_rate * g
  kMomentum = 2,  // b = momentum * b + g; x -= learning_rate * b (torch SGD(momentum))
  kNesterov = 3,  // b = momentum * b + g; x -= learning_rate * (g + momentum * b)
  kAdagrad = 4,   // s += g^2; x -= learning_rate * g / (sqrt(s) + epsilon)
  kAdam = 5,      // bias-corrected moments (beta1, beta2, epsilon), per-element step count
  kFtrl = 6,      // FTRL-proximal: alpha = learning_rate, beta = ftrl_beta, l1, l2
  kElastic = 7,   // EASGD's centre: the pushed values are a worker's parameters x_i;
                  // x += elastic_alpha * (x_i - x), and a pushpull returns x BEFORE it
  // Sparse tables only (FBGEMM's exact row-wise Adagrad): one accumulator per row,
  // s += mean_j(g_j^2); x_j -= learning_rate * g_j / (sqrt(s) + epsilon) for every j.
  kRowwiseAdagrad = 8,
};
// The rule's name ("sum", "sgd", "momentum", ...); ParseUpdateRule is its inverse.
const char* UpdateRuleName(UpdateRule rule);
StatusOr<UpdateRule> ParseUpdateRule(const std::string& name);

// How the servers order the pushes and pulls of a table's workers (docs/algorithms.md,
// "Synchronization on the servers"). Every worker counts its own pushes to a bsp/ssp table
// (its clock); requests carry it.
enum class SyncMode : int {
  kAsync = 0,  // every push applied on arrival, every pull answered at once (ASP)
  kBsp = 1,    // per key range: the pushes of step t from every live worker are summed and
               // the rule applied once; a pull after t pushes waits until step t-1 is applied
  kSsp = 2,    // pushes applied on arrival; a pull from a worker with c pushes waits while
               // c - (fewest pushes of any live worker) > staleness
};
// "async", "bsp", "ssp"; ParseSyncMode is its inverse.
const char* SyncModeName(SyncMode mode);
StatusOr<SyncMode> ParseSyncMode(const std::string& name);

// How a server fills a value the first time it is touched. Seeded initializers depend
// only on (seed, table name, key, column): every run and every server agrees.
enum class Initializer : int {
  kZeros = 0,
  kUniform = 1,  // uniform in [init_a, init_b)
  kNormal = 2,   // normal with mean init_a and standard deviation init_b
};

// Which row a full bounded sparse table drops to make room for a new one (docs/sparse.md).
enum class Eviction : int {
  kNone = 0,  // no eviction (a table with a capacity needs one of the others)
  kLru = 1,   // the least recently touched row (a push or a pull touches a row)
  kLfu = 2,   // the row touched the fewest times; ties: the least recently touched
  // The row with the lowest decayed push count ("show count"): each push of a row adds 1
  // to its score, and every score loses the factor score_decay per push the server
  // applies to the table. Pulls do not count; a row no push touched yet scores 0.
  kDecayed = 3,
};
// "none", "lru", "lfu", "decayed"; ParseEviction is its inverse.
const char* EvictionName(Eviction eviction);
StatusOr<Eviction> ParseEviction(const std::string& name);

// One named parameter tensor: a layer's weight or bias, or an embedding.
struct TableSpec {
  std::string name;  // required, unique in the cluster, <= 256 bytes
  TableKind kind = TableKind::kDense;
  uint64_t size = 0;  // dense: number of elements (>= 1)
  uint32_t dim = 0;   // sparse: row width (>= 1); ignored for dense
  DType dtype = DType::kFloat32;
  UpdateRule rule = UpdateRule::kSum;
  float learning_rate = 0.01f;  // every rule but kSum; must be finite and > 0
  // Hyperparameters of the stateful rules (ignored by the others; checked when used).
  float momentum = 0.9f;   // kMomentum, kNesterov: [0, 1)
  float beta1 = 0.9f;      // kAdam: [0, 1)
  float beta2 = 0.999f;    // kAdam: [0, 1)
  float epsilon = 1e-8f;   // kAdam, kAdagrad, kRowwiseAdagrad: > 0 (torch's Adagrad uses 1e-10)
  float l1 = 0.0f;         // kFtrl: >= 0
  float l2 = 0.0f;         // kFtrl: >= 0
  float ftrl_beta = 1.0f;  // kFtrl: >= 0
  float elastic_alpha = 0.5f;  // kElastic: in (0, 1)
  // Synchronization of the table's workers; declaring one name with another sync or
  // staleness is refused (kAlreadyExists), as any differing field.
  SyncMode sync = SyncMode::kAsync;
  int32_t staleness = 0;  // kSsp: s >= 0 (0 behaves as kBsp); must be 0 for the others
  Initializer init = Initializer::kZeros;
  float init_a = 0.0f;
  float init_b = 0.0f;
  uint64_t seed = 0;
  std::string layer;  // optional: the model layer this table belongs to
  // Bounded sparse tables (docs/sparse.md); sparse only, the defaults keep a table
  // unbounded (every row created on first touch and kept for ever).
  // Most rows one server holds (0: unbounded); needs an eviction.
  uint64_t capacity = 0;
  // Or the most bytes one server's rows may take (instead of capacity, not with it):
  // converted to rows when the server sets the table up, at the row's values, rule state,
  // policy metadata and its share of the index (Server::table_stats says the rows).
  uint64_t capacity_bytes = 0;
  // Which row a full server drops; needs capacity or capacity_bytes > 0.
  Eviction eviction = Eviction::kNone;
  // eviction "decayed": the factor a row's score keeps per push the server applies to the
  // table, in (0, 1] (1: a plain push count).
  float score_decay = 0.99f;
  // > 0: a row in none of the last N pushes this server applied to the table is dropped.
  uint64_t expiry_steps = 0;
  // > 0: a row no push updated for this many seconds is dropped (at the next push this
  // server applies to the table). At most 10 years.
  uint64_t expiry_seconds = 0;
  // > 1: a new id gets a row at its k-th push (counted in a count-min sketch).
  uint32_t admit_after = 0;
  // In (0, 1]: only ids with hash(seed, name, id) < p ever get rows.
  float admit_probability = 1.0f;
  // Rows evicted from memory (capacity) are written to a RocksDB store on the server
  // (<cold_dir>/<table name>) and read back, values and rule state, on the next touch;
  // needs capacity > 0 and a server cold_dir (docs/sparse.md "Cold tier").
  bool cold_tier = false;
  // Worker-side hot-row cache (docs/sparse.md "Worker cache"; sparse async tables only):
  // each worker keeps up to cache_rows pulled rows (LRU) and answers a pull of a cached id
  // from it while the row was fetched fewer than cache_staleness of this worker's pushes
  // to the table ago. Both 0 (default): no cache; both > 0 or neither.
  uint64_t cache_rows = 0;
  uint32_t cache_staleness = 0;
  // True when any of the fields above bounds the table.
  bool bounded() const {
    return capacity > 0 || capacity_bytes > 0 || expiry_steps > 0 || expiry_seconds > 0 || admit_after > 1 ||
           admit_probability < 1.0f;
  }
  // How the values travel (pushes and pulls, dense and sparse); the servers keep float32.
  WireDType wire_dtype = WireDType::kFloat32;

  static TableSpec Dense(std::string name, uint64_t size, UpdateRule rule = UpdateRule::kSum);
  static TableSpec Sparse(std::string name, uint32_t dim, UpdateRule rule = UpdateRule::kSum);

  // Checks every field; the message names the first bad one.
  Status Validate() const;
  // True when both describe the same table (every field equal).
  bool SameAs(const TableSpec& other) const;
  // The first field that differs, as "size: 100 declared, 200 asked" (this spec first);
  // empty when SameAs.
  std::string Difference(const TableSpec& other) const;
  // Bytes per element as stored (4 for float32).
  size_t ElementBytes() const { return 4; }
  // Bytes per element on the wire (4 for fp32, 2 for fp16 and bf16).
  size_t WireElementBytes() const { return wire_dtype == WireDType::kFloat32 ? 4 : 2; }
};

// A member of the cluster, as the scheduler announced it.
struct NodeInfo {
  NodeId id = kUnassignedId;
  Role role = Role::kWorker;
  uint32_t rank = 0;     // index among the nodes of the same role, from 0
  std::string endpoint;  // where its receive socket listens (e.g. tcp://10.0.0.2:41234)
  std::string hostname;
  bool alive = true;
};

// A range of one table's key space held by one server.
struct KeyRange {
  Key begin = 0;  // inclusive
  Key end = 0;    // exclusive
  NodeId server = kUnassignedId;
};

// One dense tensor of a multi-tensor request (Worker::PushMany): `size` elements at
// `data` for table `table`. DenseOut is the same for where pulled values go.
struct DenseRef {
  TableId table = kInvalidTable;
  const float* data = nullptr;
  size_t size = 0;
};
struct DenseOut {
  TableId table = kInvalidTable;
  float* data = nullptr;
  size_t size = 0;
};

// One sparse table's share of a multi-table request (Worker::PushSparseMany): num_keys ids
// at `keys` and their rows at `rows` (num_keys x the table's dim floats, row-major;
// rows_len must be num_keys * dim). SparseOut is the same for a pull
// (Worker::PullSparseMany): row i of `rows` receives the value of keys[i]. Borrowed: the
// memory must stay valid until the request completes.
struct SparseRef {
  TableId table = kInvalidTable;
  const Key* keys = nullptr;
  size_t num_keys = 0;
  const float* rows = nullptr;
  size_t rows_len = 0;
};
struct SparseOut {
  TableId table = kInvalidTable;
  const Key* keys = nullptr;
  size_t num_keys = 0;
  float* rows = nullptr;
  size_t rows_len = 0;
};

// A placement directive: the tables of `layer` (TableSpec::layer) live on these server
// ranks only. Layers without one are spread over every server. A placement plan
// (ps/placement.h, TablePlacementOf) gives one per layer.
struct LayerServers {
  std::string layer;
  std::vector<uint32_t> servers;  // server ranks, 0..num_servers-1, no duplicates
};

// What one node exchanged with one peer: every message counted, header (64 bytes) and
// payload frames, control messages included. Logical bytes: a frame that travelled through
// shared memory counts as if it had crossed the socket.
struct PeerTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
};
// The payload bytes of one table's data messages (requests and replies; no headers).
struct TableTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};
// A node's traffic since it started: per peer (by node id) and per table.
struct TrafficStats {
  std::map<NodeId, PeerTraffic> peers;
  std::map<TableId, TableTraffic> tables;

  uint64_t bytes_sent() const;      // over every peer
  uint64_t bytes_received() const;  // over every peer
  // One line per peer and per table, for logs.
  std::string ToString() const;
};

// Which nodes a barrier waits for.
enum class Group : int { kWorkers = 1, kServers = 2, kAll = 3 };

}  // namespace ps

#endif  // PS_TYPES_H_
