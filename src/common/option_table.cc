// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The option table (ps/options.h): one row per field of Options, with how to read and
// write it as text. Adding a field to Options means adding its row here; the tests check
// that every row round-trips through the environment, the flags and Python.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ps/options.h"

namespace ps {
namespace {

struct Row {
  OptionInfo info;
  std::function<std::string(const Options&)> get;
  std::function<Status(Options*, const std::string&, const std::string&)> set;
};

Status ParseInt64(const std::string& text, const std::string& what, int64_t lo, int64_t hi,
                  int64_t* out) {
  if (text.empty()) return InvalidArgument(what + " is empty");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    return InvalidArgument(what + "='" + text + "' is not an integer");
  }
  if (v < lo || v > hi) {
    return InvalidArgument(what + "=" + text + " is outside [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  }
  *out = v;
  return Status::OK();
}

template <typename T, typename C>
Row IntRow(OptionInfo info, T C::*field, int64_t lo, int64_t hi) {
  info.type = "int";
  Row r{std::move(info), nullptr, nullptr};
  r.get = [field](const Options& o) { return std::to_string(o.*field); };
  r.set = [field, lo, hi](Options* o, const std::string& text, const std::string& what) {
    int64_t v = 0;
    PS_RETURN_IF_ERROR(ParseInt64(text, what, lo, hi, &v));
    o->*field = static_cast<T>(v);
    return Status::OK();
  };
  return r;
}

template <typename C>
Row StringRow(OptionInfo info, std::string C::*field) {
  info.type = "string";
  Row r{std::move(info), nullptr, nullptr};
  r.get = [field](const Options& o) { return o.*field; };
  r.set = [field](Options* o, const std::string& text, const std::string&) {
    o->*field = text;
    return Status::OK();
  };
  return r;
}

// A tcp:// address given without a port ("tcp://0.0.0.0") means any free port: ":0" is
// added (the scheduler prints the one it bound). Other addresses are kept as they are.
template <typename C>
Row AddressRow(OptionInfo info, std::string C::*field) {
  Row r = StringRow(std::move(info), field);
  r.set = [field](Options* o, const std::string& text, const std::string&) {
    std::string a = text;
    if (a.rfind("tcp://", 0) == 0) {
      const std::string host = a.substr(6);
      const bool bracketed = !host.empty() && host[0] == '[';  // [::1]:port
      const size_t colon = host.rfind(':');
      const bool has_port = colon != std::string::npos && (!bracketed || colon > host.find(']'));
      if (!host.empty() && !has_port) a += ":0";
    }
    o->*field = a;
    return Status::OK();
  };
  return r;
}

template <typename C>
Row BoolRow(OptionInfo info, bool C::*field) {
  info.type = "bool";
  Row r{std::move(info), nullptr, nullptr};
  r.get = [field](const Options& o) { return std::string(o.*field ? "true" : "false"); };
  r.set = [field](Options* o, const std::string& text, const std::string& what) {
    bool v = false;
    PS_RETURN_IF_ERROR(ParseBool(text, what, &v));
    o->*field = v;
    return Status::OK();
  };
  return r;
}

OptionInfo Info(const char* name, const char* field, const char* env, const char* roles, const char* help,
                bool per_node = false) {
  OptionInfo i;
  i.name = name;
  i.field = field;
  i.env = env;
  i.help = help;
  const std::string r = roles;  // "S" scheduler, "s" server, "w" worker
  i.scheduler = r.find('S') != std::string::npos;
  i.server = r.find('s') != std::string::npos;
  i.worker = r.find('w') != std::string::npos;
  i.per_node = per_node;
  return i;
}

const std::vector<Row>& Rows() {
  static const std::vector<Row> kRows = {
      AddressRow(Info("scheduler", "scheduler_address", "LAYERPS_SCHEDULER", "Ssw",
                     "Scheduler address (tcp://HOST:PORT, ipc://PATH). The scheduler binds it "
                     "(port 0 = any free one); the others reach it there",
                     /*per_node=*/true),
                &Options::scheduler_address),
      AddressRow(Info("bind", "bind_address", "LAYERPS_BIND", "sw",
                     "Where this node's receive socket binds, e.g. tcp://0.0.0.0:0 (empty: "
                     "derived from the scheduler's scheme)"),
                &Options::bind_address),
      StringRow(Info("advertise_host", "advertise_host", "LAYERPS_ADVERTISE_HOST", "Ssw",
                     "Host the others use to reach this node when it binds a wildcard "
                     "(empty: the hostname)"),
                &Options::advertise_host),
      StringRow(Info("token", "token", "LAYERPS_TOKEN", "Ssw",
                     "Cluster secret; nodes with another token are refused"),
                &Options::token),
      StringRow(Info("curve_key_file", "curve_key_file", "LAYERPS_CURVE_KEY_FILE", "Ssw",
                     "Encrypt and authenticate every connection with CURVE, with the cluster's "
                     "key in this file (layerps-keygen makes one; mode 0600); empty: plaintext"),
                &Options::curve_key_file),
      StringRow(Info("cold_dir", "cold_dir", "LAYERPS_COLD_DIR", "s",
                     "Directory of the RocksDB cold tiers of sparse tables declared with "
                     "cold_tier (<cold_dir>/<table name>; empty: none)"),
                &Options::cold_dir),
      StringRow(Info("restore", "restore_dir", "LAYERPS_RESTORE", "s",
                     "Restore the tables from the checkpoints in this directory (a set, or "
                     "a directory of sets: the newest complete one)"),
                &Options::restore_dir),
      IntRow(Info("checkpoint_keep", "checkpoint_keep", "LAYERPS_CHECKPOINT_KEEP", "s",
                  "Checkpoint sets kept per directory (older ones deleted), 1..1000"),
             &Options::checkpoint_keep, 1, 1000),
      IntRow(Info("apply_threads", "apply_threads", "LAYERPS_APPLY_THREADS", "s",
                  "Threads that apply dense requests of async tables beside the receive "
                  "thread, per 64 KiB span in arrival order (0: none; -1: a quarter of the "
                  "cores, at most 8)"),
             &Options::apply_threads, -1, 64),
      StringRow(Info("checkpoint_dir", "checkpoint_dir", "LAYERPS_CHECKPOINT_DIR", "S",
                     "Where servers write checkpoints (periodic ones, and a worker's "
                     "Checkpoint without a directory); a path on the servers' hosts"),
                &Options::checkpoint_dir),
      IntRow(Info("checkpoint_every_s", "checkpoint_every_s", "LAYERPS_CHECKPOINT_EVERY_S", "S",
                  "Have every server write a checkpoint every this many seconds (0: never; "
                  "needs checkpoint_dir)"),
             &Options::checkpoint_every_s, 0, 604800),
      IntRow(Info("replace_servers_ms", "replace_servers_ms", "LAYERPS_REPLACE_SERVERS_MS", "S",
                  "Wait this long (ms) for a new server to take a dead server's place "
                  "(0: a dead server fails the job; 0..86400000)"),
             &Options::replace_servers_ms, 0, 86400000),
      IntRow(Info("num_servers", "num_servers", "LAYERPS_NUM_SERVERS", "S",
                  "Servers in the cluster, 0..4096 (0: collectives only, no tables)"),
             &Options::num_servers, 0, 4096),
      IntRow(Info("num_workers", "num_workers", "LAYERPS_NUM_WORKERS", "S", "Workers in the cluster, 1..4096"),
             &Options::num_workers, 1, 4096),
      IntRow(Info("max_workers", "max_workers", "LAYERPS_MAX_WORKERS", "S",
                  "Workers live at once at most; above num_workers the job is elastic "
                  "(workers join a running job; 0: num_workers)"),
             &Options::max_workers, 0, 4096),
      IntRow(Info("min_workers", "min_workers", "LAYERPS_MIN_WORKERS", "S",
                  "Fewer live workers than this end a running job with an error "
                  "(0: no floor; 0..num_workers)"),
             &Options::min_workers, 0, 4096),
      IntRow(Info("rank", "rank", "LAYERPS_RANK", "sw",
                  "The rank to ask for within the role, or -1 for the lowest free one",
                  /*per_node=*/true),
             &Options::rank, -1, 4095),
      IntRow(Info("heartbeat_interval_ms", "heartbeat_interval_ms", "LAYERPS_HEARTBEAT_INTERVAL_MS", "Ssw",
                  "Heartbeat period (ms), 10..60000"),
             &Options::heartbeat_interval_ms, 10, 60000),
      IntRow(Info("heartbeat_timeout_ms", "heartbeat_timeout_ms", "LAYERPS_HEARTBEAT_TIMEOUT_MS", "Ssw",
                  "Silence (ms) after which a node is dead; > 2x the interval"),
             &Options::heartbeat_timeout_ms, 20, 3600000),
      IntRow(Info("scheduler_recovery_ms", "scheduler_recovery_ms", "LAYERPS_SCHEDULER_RECOVERY_MS", "Ssw",
                  "A node that lost the scheduler waits this long (ms) for a restarted one to "
                  "take the cluster over; 0: a lost scheduler ends the node"),
             &Options::scheduler_recovery_ms, 0, 86400000),
      IntRow(Info("stall_warning_ms", "stall_warning_ms", "LAYERPS_STALL_WARNING_MS", "Ss",
                  "A barrier, join or synchronous step waiting longer (ms) logs the ranks it "
                  "waits for, then keeps waiting; 0: off"),
             &Options::stall_warning_ms, 0, 86400000),
      IntRow(Info("metrics_port", "metrics_port", "LAYERPS_METRICS_PORT", "Ssw",
                  "Serve Prometheus metrics on this port (GET /metrics; 0: none)",
                  /*per_node=*/true),
             &Options::metrics_port, 0, 65535),
      StringRow(Info("metrics_host", "metrics_host", "LAYERPS_METRICS_HOST", "Ssw",
                     "Address the metrics endpoint listens on (127.0.0.1: this host only)"),
                &Options::metrics_host),
      StringRow(Info("timeline", "timeline", "LAYERPS_TIMELINE", "w",
                     "Write a Chrome trace of this worker's pushes and pulls to this file "
                     "(%r: the rank)"),
                &Options::timeline),
      IntRow(Info("connect_timeout_ms", "connect_timeout_ms", "LAYERPS_CONNECT_TIMEOUT_MS", "sw",
                  "How long Start() waits for the cluster (ms), 1..3600000"),
             &Options::connect_timeout_ms, 1, 3600000),
      IntRow(Info("request_timeout_ms", "request_timeout_ms", "LAYERPS_REQUEST_TIMEOUT_MS", "sw",
                  "How long a request may wait for its reply (ms), 1..3600000"),
             &Options::request_timeout_ms, 1, 3600000),
      IntRow(Info("part_bytes", "part_bytes", "LAYERPS_PART_BYTES", "w",
                  "A dense request's share for one server above this many bytes goes as "
                  "several messages in flight at once (0: never split; 4 KiB..1 GiB)"),
             &Options::part_bytes, 0, int64_t{1} << 30),
      IntRow(Info("wait_receive_us", "wait_receive_us", "LAYERPS_WAIT_RECEIVE_US", "w",
                  "A thread waiting for a small request takes the receive socket for up to "
                  "this many microseconds and handles its reply itself (0: off; 0..1000000)"),
             &Options::wait_receive_us, 0, 1000000),
      IntRow(Info("dense_chunk_elems", "dense_chunk_elems", "LAYERPS_DENSE_CHUNK_ELEMS", "S",
                  "Elements per dense chunk (the unit tables are spread in), 1..2^30"),
             &Options::dense_chunk_elems, 1, int64_t{1} << 30),
      BoolRow(Info("tolerate_worker_loss", "tolerate_worker_loss", "LAYERPS_TOLERATE_WORKER_LOSS", "S",
                   "Let a job go on when a worker dies (otherwise the scheduler ends it with "
                   "Unavailable: a synchronous job cannot finish without it)"),
              &Options::tolerate_worker_loss),
      BoolRow(Info("replication", "replication", "LAYERPS_REPLICATION", "S",
                   "Every server backs up the ranges of the rank before it; an update is "
                   "acknowledged once both applied it; a dead server's backup takes over"),
              &Options::replication),
      IntRow(Info("io_threads", "io_threads", "LAYERPS_IO_THREADS", "Ssw",
                  "ZeroMQ I/O threads (0: one per stream; 1..64)"),
             &Options::io_threads, 0, 64),
      IntRow(Info("streams", "streams", "LAYERPS_STREAMS", "sw",
                  "Connections to each peer over tcp://, requests striped over them by the "
                  "range they touch (0: from the core count; 1..16)"),
             &Options::streams, 0, 16),
      BoolRow(Info("shared_memory", "shared_memory", "LAYERPS_SHARED_MEMORY", "Ssw",
                   "Send large frames to ipc:// peers through shared memory (the same on "
                   "every node of a host)"),
              &Options::shared_memory),
      IntRow(Info("max_message_bytes", "max_message_bytes", "LAYERPS_MAX_MESSAGE_BYTES", "sw",
                  "Largest message part a server or worker accepts (bytes, 1 KiB..16 GiB); "
                  "also the largest share of a table per server one push can carry"),
             &Options::max_message_bytes, int64_t{1} << 10, int64_t{16} << 30),
      IntRow(Info("scheduler_max_message_bytes", "scheduler_max_message_bytes", "LAYERPS_SCHEDULER_MAX_MESSAGE_BYTES", "S",
                  "Largest control message the scheduler accepts (bytes, 4 KiB..1 GiB)"),
             &Options::scheduler_max_message_bytes, int64_t{4} << 10, int64_t{1} << 30),
  };
  return kRows;
}

const Row* FindRow(const std::string& name) {
  for (const Row& r : Rows()) {
    if (r.info.name == name) return &r;
  }
  return nullptr;
}

}  // namespace

const std::vector<OptionInfo>& OptionTable() {
  static const std::vector<OptionInfo> kTable = [] {
    std::vector<OptionInfo> t;
    for (const Row& r : Rows()) t.push_back(r.info);
    return t;
  }();
  return kTable;
}

std::string OptionValue(const Options& options, const std::string& name) {
  const Row* r = FindRow(name);
  return r ? r->get(options) : std::string();
}

Status SetOption(Options* options, const std::string& name, const std::string& value,
                 const std::string& what) {
  const Row* r = FindRow(name);
  if (r == nullptr) return NotFound("unknown option '" + name + "'");
  return r->set(options, value, what.empty() ? name : what);
}

Status ParseBool(const std::string& text, const std::string& what, bool* out) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "1" || t == "true" || t == "yes" || t == "on") {
    *out = true;
  } else if (t == "0" || t == "false" || t == "no" || t == "off") {
    *out = false;
  } else {
    return InvalidArgument(what + "='" + text + "' is not a boolean (1/0, true/false, yes/no, on/off)");
  }
  return Status::OK();
}

}  // namespace ps
