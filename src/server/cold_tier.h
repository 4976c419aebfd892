// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// ColdTier: the RocksDB store of one bounded sparse table with TableSpec::cold_tier
// (docs/sparse.md, "Cold tier"): rows evicted from memory are written here and read back
// on their next touch. Keys are the ids as 8 big-endian bytes (RocksDB's order is the ids'
// order); values the whole row (values, then the rule's state), `width` raw floats in the
// host's byte order. Thread-safe (RocksDB's own locking); a build without RocksDB refuses
// to open one.
#ifndef PS_SERVER_COLD_TIER_H_
#define PS_SERVER_COLD_TIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ps/status.h"
#include "ps/types.h"

namespace ps {

class ColdTier {
 public:
  // Opens (creating it) <cold_dir>/<table>. FailedPrecondition without RocksDB or without
  // a cold_dir; InvalidArgument for a table name that is not a file name.
  static StatusOr<std::shared_ptr<ColdTier>> Open(const std::string& cold_dir,
                                                  const std::string& table);
  ~ColdTier();
  ColdTier(const ColdTier&) = delete;
  ColdTier& operator=(const ColdTier&) = delete;

  const std::string& path() const { return path_; }
  Status Put(Key key, const float* row, uint32_t width);
  // *found false: no row stored for the key.
  Status Get(Key key, float* row, uint32_t width, bool* found);
  // fn(id, row) for every stored row, in id order; stops at fn's first error.
  Status ForEach(uint32_t width, const std::function<Status(Key, const float*)>& fn);
  // Deletes every stored row.
  Status Clear();
  Status Delete(Key key);
  // Syncs the write-ahead log and closes (a clean shutdown: a store opened later on the
  // same directory finds every row written). Not after a failed write (RocksDB refuses
  // further writes then, and syncing again would abort inside it).
  Status Close();

 private:
  struct Db;  // RocksDB's handle and options (cold_tier.cc)
  explicit ColdTier(std::string path);
  Status Error(const char* what, const std::string& detail) const;

  const std::string path_;
  std::atomic<bool> write_failed_{false};
  std::unique_ptr<Db> db_;
};

}  // namespace ps

#endif  // PS_SERVER_COLD_TIER_H_
