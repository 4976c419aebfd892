// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/cold_tier.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#ifdef LAYERPS_HAVE_ROCKSDB
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#endif
#include <glog/logging.h>

namespace ps {

#ifdef LAYERPS_HAVE_ROCKSDB
namespace {

void EncodeKey(Key key, char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(key >> (56 - 8 * i));
}

// RocksDB's own log goes to glog (warnings and errors, at most one line in 10 s per
// process), not to a LOG file beside the data: on a full disk, writing that file after a
// failed write aborted the process inside RocksDB (Debian's build keeps its assertions).
class GlogRocksLogger final : public rocksdb::Logger {
 public:
  GlogRocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::WARN_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char line[512];
    std::vsnprintf(line, sizeof(line), format, ap);
    LOG_EVERY_T(WARNING, 10) << "RocksDB (cold tier): " << line;
  }
};

}  // namespace

struct ColdTier::Db {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions write;  // WAL on, no fsync per write (docs/sparse.md)
  rocksdb::ReadOptions read;
};
#else
struct ColdTier::Db {};
#endif

ColdTier::ColdTier(std::string path) : path_(std::move(path)) {}
ColdTier::~ColdTier() = default;

Status ColdTier::Error(const char* what, const std::string& detail) const {
  return IoError(std::string("cold tier ") + path_ + ": " + what + ": " + detail);
}

StatusOr<std::shared_ptr<ColdTier>> ColdTier::Open(const std::string& cold_dir,
                                                   const std::string& name) {
#ifndef LAYERPS_HAVE_ROCKSDB
  (void)cold_dir;
  return FailedPrecondition("table '" + name +
                            "': cold_tier needs RocksDB, and this LayerPS was built without it "
                            "(install librocksdb-dev and rebuild)");
#else
  if (cold_dir.empty()) {
    return FailedPrecondition("table '" + name +
                              "': cold_tier needs the server's cold_dir (--cold_dir, "
                              "LAYERPS_COLD_DIR)");
  }
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgument("table '" + name + "': a cold-tier table's name must be a file name");
  }
  std::shared_ptr<ColdTier> cold(new ColdTier(cold_dir + "/" + name));
  std::error_code ec;
  std::filesystem::create_directories(cold->path_, ec);
  if (ec) return cold->Error("cannot create the directory", ec.message());
  rocksdb::Options o;
  o.create_if_missing = true;
  o.info_log = std::make_shared<GlogRocksLogger>();
  rocksdb::BlockBasedTableOptions bo;
  bo.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));  // misses skip the files
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(bo));
  rocksdb::DB* db = nullptr;
  rocksdb::Status st = rocksdb::DB::Open(o, cold->path_, &db);
  if (!st.ok()) return cold->Error("cannot open", st.ToString());
  cold->db_ = std::make_unique<Db>();
  cold->db_->db.reset(db);
  return cold;
#endif
}

Status ColdTier::Put(Key key, const float* row, uint32_t width) {
#ifdef LAYERPS_HAVE_ROCKSDB
  char k[8];
  EncodeKey(key, k);
  rocksdb::Status st =
      db_->db->Put(db_->write, rocksdb::Slice(k, 8),
                   rocksdb::Slice(reinterpret_cast<const char*>(row), size_t{width} * sizeof(float)));
  if (!st.ok()) {
    write_failed_ = true;
    return Error("write", st.ToString());
  }
  return Status::OK();
#else
  (void)key, (void)row, (void)width;
  return FailedPrecondition("built without RocksDB");
#endif
}

Status ColdTier::Get(Key key, float* row, uint32_t width, bool* found) {
  *found = false;
#ifdef LAYERPS_HAVE_ROCKSDB
  char k[8];
  EncodeKey(key, k);
  thread_local std::string v;
  rocksdb::Status st = db_->db->Get(db_->read, rocksdb::Slice(k, 8), &v);
  if (st.IsNotFound()) return Status::OK();
  if (!st.ok()) return Error("read", st.ToString());
  if (v.size() != size_t{width} * sizeof(float)) {
    return Error("read", "row of id " + std::to_string(key) + " has " + std::to_string(v.size()) +
                             " bytes, expected " + std::to_string(size_t{width} * sizeof(float)) +
                             " (corrupt)");
  }
  std::memcpy(row, v.data(), v.size());
  *found = true;
  return Status::OK();
#else
  (void)key, (void)row, (void)width;
  return FailedPrecondition("built without RocksDB");
#endif
}

Status ColdTier::ForEach(uint32_t width, const std::function<Status(Key, const float*)>& fn) {
#ifdef LAYERPS_HAVE_ROCKSDB
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(db_->read));
  std::vector<float> row(width);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    if (k.size() != 8 || v.size() != size_t{width} * sizeof(float)) {
      return Error("read", "a record of " + std::to_string(v.size()) + " bytes, expected " +
                               std::to_string(size_t{width} * sizeof(float)) + " (corrupt)");
    }
    Key key = 0;
    for (int i = 0; i < 8; ++i) key = (key << 8) | static_cast<unsigned char>(k.data()[i]);
    std::memcpy(row.data(), v.data(), v.size());
    PS_RETURN_IF_ERROR(fn(key, row.data()));
  }
  if (!it->status().ok()) return Error("scan", it->status().ToString());
  return Status::OK();
#else
  (void)width, (void)fn;
  return FailedPrecondition("built without RocksDB");
#endif
}

Status ColdTier::Clear() {
#ifdef LAYERPS_HAVE_ROCKSDB
  const std::string from(8, '\0'), to(9, '\xff');
  rocksdb::Status st = db_->db->DeleteRange(db_->write, db_->db->DefaultColumnFamily(), from, to);
  if (!st.ok()) return Error("clear", st.ToString());
  return Status::OK();
#else
  return FailedPrecondition("built without RocksDB");
#endif
}

Status ColdTier::Delete(Key key) {
#ifdef LAYERPS_HAVE_ROCKSDB
  char k[8];
  EncodeKey(key, k);
  rocksdb::Status st = db_->db->Delete(db_->write, rocksdb::Slice(k, 8));
  if (!st.ok()) return Error("delete", st.ToString());
  return Status::OK();
#else
  (void)key;
  return FailedPrecondition("built without RocksDB");
#endif
}

Status ColdTier::Close() {
#ifdef LAYERPS_HAVE_ROCKSDB
  if (!db_ || !db_->db) return Status::OK();
  rocksdb::Status st = write_failed_ ? rocksdb::Status::IOError("an earlier write failed")
                                     : db_->db->FlushWAL(/*sync=*/true);
  if (st.ok()) st = db_->db->Close();
  if (!st.ok()) return Error("close", st.ToString());
#endif
  return Status::OK();
}

}  // namespace ps
