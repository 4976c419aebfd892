// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Checkpoints of a server's shards (docs/checkpoints.md has the format and the promises).
//
// A checkpoint set is one directory, <dir>/ckpt-<set as 20 digits>, with one file per
// server, server-<rank>.lpsckpt, written atomically (a temporary file, fsync, rename,
// fsync of the directory). A file holds, per table the server holds, the table's spec,
// its dense ranges (values and the rule's state planes) or its sparse rows (id, values,
// state), then a footer (protobuf CheckpointFooter) with the byte offset and checksum of
// every table's data. A set is complete when every rank 0..num_servers-1 has a valid
// file of the same set.
//
// Restore reads every file of a set and takes what the restoring server holds in the
// new cluster's map: the new cluster may have another number of servers (a re-sharded
// restore), as long as the tables' layouts (kind, size, dim, rule) are the same.
//
// Nothing read from a file is trusted: lengths, offsets and counts are checked against
// the file's size, and the checksums against the bytes; a bad file is an error naming it.
#ifndef PS_SERVER_CHECKPOINT_H_
#define PS_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/status.h"
#include "ps/types.h"

namespace ps {

class Store;
class TransferProgress;

struct CheckpointMeta {
  uint64_t set = 0;          // the set's number (the scheduler's clock in ms: increasing)
  uint64_t epoch = 0;        // the cluster-map epoch the server has
  uint32_t rank = 0;         // this server's rank
  uint32_t num_servers = 0;  // servers in the cluster
};

// The directory of set `set` under `dir`.
std::string CheckpointSetDir(const std::string& dir, uint64_t set);

// Writes every table `store` holds as this server's file of the set, then deletes this
// server's files of the sets under `dir` older than the newest `keep` (and their
// directories once empty). Returns the path of the file written. The caller holds no
// request on the store (nothing changes while it runs). `progress` (may be null) is
// started with the store's size, counts the bytes as they are written and is finished.
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                      int keep, Store* store,
                                      TransferProgress* progress = nullptr);

// A complete checkpoint set, opened for restore.
class CheckpointSet {
 public:
  // `dir`: a set's directory, or a directory of sets (the newest complete one is taken).
  // kNotFound when there is no complete set, naming what is missing; kIoError for a
  // damaged file of the set asked for.
  static StatusOr<std::unique_ptr<CheckpointSet>> Open(const std::string& dir);
  ~CheckpointSet();

  const std::string& path() const { return path_; }
  uint64_t set() const { return set_; }
  uint32_t num_servers() const { return num_servers_; }
  // The specs of the tables the set holds (as the file of rank 0 records them).
  std::vector<TableSpec> Specs() const;

  // Fills table `id` of `store`, just installed under `spec`, with the set's values of
  // the ranges the store holds (and the rule's state). *restored: false when the set
  // has no table of that name (the table keeps its initial values). A different layout:
  // kFailedPrecondition naming both; a set that does not cover what the store holds, or a
  // damaged file: kIoError.
  Status Restore(TableId id, const TableSpec& spec, Store* store, bool* restored) const;

 private:
  struct File;
  CheckpointSet() = default;
  std::string path_;
  uint64_t set_ = 0;
  uint32_t num_servers_ = 0;
  std::vector<std::unique_ptr<File>> files_;  // by rank
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_H_
