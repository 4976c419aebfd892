// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "server/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include <glog/logging.h>

#include "common/hash.h"
#include "common/progress.h"
#include "layerps.pb.h"
#include "ps/version.h"
#include "server/store.h"
#include "transport/map_codec.h"

namespace ps {
namespace {

// File: "LPSCKPT1", the tables' data, the footer (protobuf), then the trailer: the
// footer's length (8 bytes), its checksum (8 bytes) and "LPSCKPT1" again. Numbers are in
// the host's byte order (little-endian on every platform LayerPS builds for).
constexpr char kMagic[8] = {'L', 'P', 'S', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kTrailerBytes = 24;
constexpr uint64_t kMaxFooterBytes = uint64_t{64} << 20;
constexpr size_t kIoChunk = size_t{4} << 20;
constexpr const char* kFilePrefix = "server-";
constexpr const char* kFileSuffix = ".lpsckpt";
constexpr const char* kSetPrefix = "ckpt-";

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// A 64-bit checksum of a byte stream, the same whatever pieces it is fed in: 8-byte
// words folded with a multiply and rotate, the tail and the length mixed in at the end.
class Checksum {
 public:
  void Update(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    length_ += n;
    while (n > 0 && fill_ > 0) {
      word_ |= uint64_t{*p++} << (8 * fill_);
      --n;
      if (++fill_ == 8) Fold();
    }
    while (n >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      word_ = w;
      Fold();
      p += 8;
      n -= 8;
    }
    while (n > 0) {
      word_ |= uint64_t{*p++} << (8 * fill_++);
      --n;
    }
  }
  uint64_t value() const { return MixKey(h_ ^ MixKey(word_ ^ (length_ << 3) ^ fill_)); }

 private:
  void Fold() {
    h_ = (h_ ^ word_) * 0x100000001B3ull;
    h_ = (h_ << 29) | (h_ >> 35);
    word_ = 0;
    fill_ = 0;
  }
  uint64_t h_ = 0x9E3779B97F4A7C15ull;
  uint64_t word_ = 0;
  unsigned fill_ = 0;
  uint64_t length_ = 0;
};

// A file written sequentially through a buffer, with the running offset and checksum.
class Writer {
 public:
  Writer(std::string path, TransferProgress* progress)
      : path_(std::move(path)), progress_(progress) {
    buf_.reserve(kIoChunk);
  }
  ~Writer() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError(Errno("cannot create", path_));
    return Status::OK();
  }
  Status Write(const void* data, size_t n) {
    sum_.Update(data, n);
    offset_ += n;
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const size_t take = std::min(n, kIoChunk - buf_.size());
      buf_.insert(buf_.end(), p, p + take);
      p += take;
      n -= take;
      if (buf_.size() == kIoChunk) PS_RETURN_IF_ERROR(Flush());
    }
    return Status::OK();
  }
  // Starts a new checksum (a table's data).
  void ResetSum() { sum_ = Checksum(); }
  uint64_t sum() const { return sum_.value(); }
  uint64_t offset() const { return offset_; }
  Status Flush() {
    size_t done = 0;
    while (done < buf_.size()) {
      const ssize_t w = ::write(fd_, buf_.data() + done, buf_.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return IoError(Errno("cannot write", path_));
      done += static_cast<size_t>(w);
    }
    if (progress_ != nullptr) progress_->Add(buf_.size());
    buf_.clear();
    return Status::OK();
  }
  Status Close() {
    PS_RETURN_IF_ERROR(Flush());
    if (::fsync(fd_) != 0) return IoError(Errno("cannot fsync", path_));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return IoError(Errno("cannot close", path_));
    return Status::OK();
  }

 private:
  std::string path_;
  TransferProgress* progress_;  // may be null
  int fd_ = -1;
  std::vector<char> buf_;
  uint64_t offset_ = 0;
  Checksum sum_;
};

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(Errno("cannot open directory", dir));
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) return IoError(Errno("cannot fsync directory", dir));
  return Status::OK();
}

Status MakeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::OK();
    return IoError("cannot use " + dir + ": not a directory");
  }
  return IoError(Errno("cannot create directory", dir));
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// "ckpt-<20 digits>" -> the set's number.
bool ParseSetName(const std::string& name, uint64_t* set) {
  const size_t p = std::strlen(kSetPrefix);
  if (name.size() != p + 20 || name.compare(0, p, kSetPrefix) != 0) return false;
  uint64_t v = 0;
  for (size_t i = p; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *set = v;
  return true;
}

std::string FileName(uint32_t rank) {
  return kFilePrefix + std::to_string(rank) + kFileSuffix;
}

// Floats per row of a sparse table's records: the entry's row_floats, or in a file
// written before it, dim * (1 + state_width).
uint64_t RowFloats(const layerps::pb::CheckpointTable& t) {
  if (t.row_floats() != 0) return t.row_floats();
  return uint64_t{t.spec().dim()} * (1 + uint64_t{t.state_width()});
}

// Writes one table's data; fills its footer entry (not the spec).
Status WriteTable(TableId id, const TableSpec& spec, Store* store, Writer* w,
                  layerps::pb::CheckpointTable* entry) {
  const uint32_t sw = store->StateWidth(id);
  entry->set_state_width(sw);
  entry->set_offset(w->offset());
  w->ResetSum();
  if (spec.kind == TableKind::kDense) {
    for (const Store::DenseView& d : store->DenseRanges(id)) {
      auto* span = entry->add_spans();
      span->set_first(d.first);
      span->set_size(d.size);
      span->set_offset(w->offset());
      PS_RETURN_IF_ERROR(w->Write(d.values, d.size * sizeof(float)));
      if (sw > 0) PS_RETURN_IF_ERROR(w->Write(d.state, d.size * sw * sizeof(float)));
    }
  } else {
    for (const auto& r : store->HashRanges(id)) {
      auto* h = entry->add_held();
      h->set_begin(r.first);
      h->set_end(r.second);
    }
    const uint32_t row_floats = store->RowWidth(id);
    entry->set_row_floats(row_floats);
    const size_t row_bytes = size_t{row_floats} * sizeof(float);
    uint64_t rows = 0;
    PS_RETURN_IF_ERROR(store->VisitRows(id, [&](Key key, const float* row) -> Status {
      ++rows;
      PS_RETURN_IF_ERROR(w->Write(&key, sizeof(key)));
      return w->Write(row, row_bytes);
    }));
    entry->set_rows(rows);
  }
  entry->set_bytes(w->offset() - entry->offset());
  entry->set_checksum(w->sum());
  return Status::OK();
}

// Deletes this server's files of the sets under `dir` older than the newest `keep`.
void Prune(const std::string& dir, uint32_t rank, int keep) {
  std::vector<uint64_t> sets;
  for (const std::string& name : ListDir(dir)) {
    uint64_t s = 0;
    if (ParseSetName(name, &s)) sets.push_back(s);
  }
  if (sets.size() <= static_cast<size_t>(keep)) return;
  std::sort(sets.begin(), sets.end());
  sets.resize(sets.size() - static_cast<size_t>(keep));
  for (uint64_t s : sets) {
    const std::string set_dir = CheckpointSetDir(dir, s);
    const std::string file = set_dir + "/" + FileName(rank);
    if (::unlink(file.c_str()) != 0 && errno != ENOENT) {
      LOG(WARNING) << Errno("cannot delete old checkpoint file", file);
    }
    ::unlink((file + ".tmp").c_str());  // left by a write that did not finish
    ::rmdir(set_dir.c_str());  // the last server to leave it empties it
  }
}

// WriteCheckpoint without the progress's start and finish.
StatusOr<std::string> WriteCheckpointFile(const std::string& dir, const CheckpointMeta& meta,
                                          int keep, Store* store, TransferProgress* progress);

}  // namespace

std::string CheckpointSetDir(const std::string& dir, uint64_t set) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%020" PRIu64, kSetPrefix, set);
  return dir + "/" + name;
}

StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                      int keep, Store* store, TransferProgress* progress) {
  if (progress == nullptr) return WriteCheckpointFile(dir, meta, keep, store, nullptr);
  progress->Start("checkpoint set " + std::to_string(meta.set) + " (server rank " +
                      std::to_string(meta.rank) + ")",
                  store->PayloadBytes());
  StatusOr<std::string> path = WriteCheckpointFile(dir, meta, keep, store, progress);
  progress->Finish(path.ok());
  return path;
}

namespace {

StatusOr<std::string> WriteCheckpointFile(const std::string& dir, const CheckpointMeta& meta,
                                          int keep, Store* store, TransferProgress* progress) {
  if (dir.empty()) return InvalidArgument("checkpoint: no directory given");
  PS_RETURN_IF_ERROR(MakeDir(dir));
  const std::string set_dir = CheckpointSetDir(dir, meta.set);
  PS_RETURN_IF_ERROR(MakeDir(set_dir));
  const std::string path = set_dir + "/" + FileName(meta.rank);
  const std::string tmp = path + ".tmp";
  layerps::pb::CheckpointFooter footer;
  footer.set_set(meta.set);
  footer.set_epoch(meta.epoch);
  footer.set_rank(meta.rank);
  footer.set_num_servers(meta.num_servers);
  footer.set_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());
  footer.set_version(Version());
  {
    Writer w(tmp, progress);
    PS_RETURN_IF_ERROR(w.Open());
    PS_RETURN_IF_ERROR(w.Write(kMagic, sizeof(kMagic)));
    for (TableId id : store->TableIds()) {
      const TableSpec* spec = store->Spec(id);
      if (spec == nullptr) continue;
      auto* entry = footer.add_tables();
      SpecToProto(*spec, entry->mutable_spec());
      Status s = WriteTable(id, *spec, store, &w, entry);
      if (!s.ok()) {
        ::unlink(tmp.c_str());
        return s.WithContext("checkpoint of table '" + spec->name + "'");
      }
    }
    std::string bytes;
    footer.SerializeToString(&bytes);
    Checksum fs;
    fs.Update(bytes.data(), bytes.size());
    const uint64_t len = bytes.size(), sum = fs.value();
    Status s = w.Write(bytes.data(), bytes.size());
    if (s.ok()) s = w.Write(&len, 8);
    if (s.ok()) s = w.Write(&sum, 8);
    if (s.ok()) s = w.Write(kMagic, sizeof(kMagic));
    if (s.ok()) s = w.Close();
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = IoError(Errno("cannot rename into", path));
    ::unlink(tmp.c_str());
    return s;
  }
  PS_RETURN_IF_ERROR(SyncDir(set_dir));
  PS_RETURN_IF_ERROR(SyncDir(dir));
  Prune(dir, meta.rank, keep);
  return path;
}

}  // namespace

// --- restore ------------------------------------------------------------------------

struct CheckpointSet::File {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  layerps::pb::CheckpointFooter footer;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  Status Read(uint64_t offset, void* out, size_t n) const {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return IoError(Errno("cannot read", path));
      if (r == 0) return IoError(path + ": truncated");
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return Status::OK();
  }
  // Opens the file and checks its trailer, footer and the footer's offsets.
  Status Load() {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IoError(Errno("cannot open", path));
    struct stat st;
    if (::fstat(fd, &st) != 0) return IoError(Errno("cannot stat", path));
    size = static_cast<uint64_t>(st.st_size);
    const std::string bad = path + " is not a complete LayerPS checkpoint file: ";
    if (size < sizeof(kMagic) + kTrailerBytes) return IoError(bad + "too short");
    char head[8], trailer[kTrailerBytes];
    PS_RETURN_IF_ERROR(Read(0, head, 8));
    PS_RETURN_IF_ERROR(Read(size - kTrailerBytes, trailer, kTrailerBytes));
    if (std::memcmp(head, kMagic, 8) != 0 || std::memcmp(trailer + 16, kMagic, 8) != 0)
      return IoError(bad + "bad magic");
    uint64_t len = 0, sum = 0;
    std::memcpy(&len, trailer, 8);
    std::memcpy(&sum, trailer + 8, 8);
    if (len > kMaxFooterBytes || len > size - sizeof(kMagic) - kTrailerBytes)
      return IoError(bad + "bad footer length");
    std::string bytes(len, '\0');
    PS_RETURN_IF_ERROR(Read(size - kTrailerBytes - len, bytes.data(), len));
    Checksum fs;
    fs.Update(bytes.data(), bytes.size());
    if (fs.value() != sum) return IoError(bad + "footer checksum mismatch");
    if (!footer.ParseFromString(bytes)) return IoError(bad + "unreadable footer");
    const uint64_t data_end = size - kTrailerBytes - len;
    for (const auto& t : footer.tables()) {
      const std::string& name = t.spec().name();
      if (t.offset() < sizeof(kMagic) || t.offset() > data_end || t.bytes() > data_end - t.offset())
        return IoError(bad + "table '" + name + "' lies outside the data");
      if (t.state_width() > 64) return IoError(bad + "table '" + name + "': bad state width");
      const uint64_t planes = 1 + uint64_t{t.state_width()};
      if (t.spec().kind() == static_cast<uint32_t>(TableKind::kDense)) {
        uint64_t expect = t.offset();
        for (const auto& sp : t.spans()) {
          if (sp.offset() != expect || sp.size() > (t.bytes() / 4) ||
              sp.first() > t.spec().size() || sp.size() > t.spec().size() - sp.first())
            return IoError(bad + "table '" + name + "': bad span");
          expect += sp.size() * planes * sizeof(float);
        }
        if (expect != t.offset() + t.bytes()) return IoError(bad + "table '" + name + "': bad size");
      } else {
        const uint64_t dim = t.spec().dim();
        if (dim == 0 || dim > (uint64_t{1} << 24)) return IoError(bad + "table '" + name + "': bad dim");
        const uint64_t row_floats = RowFloats(t);
        if (row_floats < dim || row_floats > dim * 65)
          return IoError(bad + "table '" + name + "': bad row width");
        const uint64_t record = 8 + row_floats * sizeof(float);
        if (t.rows() > t.bytes() / record || t.rows() * record != t.bytes())
          return IoError(bad + "table '" + name + "': bad row count");
      }
    }
    return Status::OK();
  }
};

CheckpointSet::~CheckpointSet() = default;

namespace {

bool IsSetDir(const std::string& dir) {
  for (const std::string& n : ListDir(dir)) {
    if (n.rfind(kFilePrefix, 0) == 0 && n.size() > std::strlen(kFileSuffix) &&
        n.compare(n.size() - std::strlen(kFileSuffix), std::string::npos, kFileSuffix) == 0)
      return true;
  }
  return false;
}

}  // namespace

StatusOr<std::unique_ptr<CheckpointSet>> CheckpointSet::Open(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("restore: no directory given");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return NotFound("restore: " + dir + " is not a directory");
  // The candidates, newest first: the directory itself, or its sets.
  std::vector<std::string> candidates;
  const bool one_set = IsSetDir(dir);
  if (one_set) {
    candidates.push_back(dir);
  } else {
    std::vector<uint64_t> sets;
    for (const std::string& n : ListDir(dir)) {
      uint64_t s = 0;
      if (ParseSetName(n, &s)) sets.push_back(s);
    }
    std::sort(sets.rbegin(), sets.rend());
    for (uint64_t s : sets) candidates.push_back(CheckpointSetDir(dir, s));
  }
  if (candidates.empty()) return NotFound("restore: " + dir + " holds no checkpoint set");
  std::string why_not;
  for (const std::string& cand : candidates) {
    std::unique_ptr<CheckpointSet> set(new CheckpointSet());
    set->path_ = cand;
    Status bad;
    auto file0 = std::make_unique<File>();
    file0->path = cand + "/" + FileName(0);
    bad = file0->Load();
    if (bad.ok()) {
      set->set_ = file0->footer.set();
      set->num_servers_ = file0->footer.num_servers();
      if (set->num_servers_ == 0 || set->num_servers_ > 4096 || file0->footer.rank() != 0)
        bad = IoError(file0->path + ": bad rank or server count");
      else
        set->files_.push_back(std::move(file0));
    }
    for (uint32_t r = 1; bad.ok() && r < set->num_servers_; ++r) {
      auto f = std::make_unique<File>();
      f->path = cand + "/" + FileName(r);
      bad = f->Load();
      if (bad.ok() && (f->footer.set() != set->set_ || f->footer.rank() != r ||
                       f->footer.num_servers() != set->num_servers_))
        bad = IoError(f->path + " belongs to another set (set " +
                      std::to_string(f->footer.set()) + ", rank " +
                      std::to_string(f->footer.rank()) + " of " +
                      std::to_string(f->footer.num_servers()) + ")");
      if (bad.ok()) set->files_.push_back(std::move(f));
    }
    if (bad.ok()) return set;
    if (one_set) return bad;
    LOG(WARNING) << "restore: skipping the incomplete set " << cand << ": " << bad;
    if (why_not.empty()) why_not = bad.message();
  }
  return NotFound("restore: " + dir + " holds no complete checkpoint set (newest: " + why_not +
                  ")");
}

std::vector<TableSpec> CheckpointSet::Specs() const {
  std::vector<TableSpec> specs;
  for (const auto& t : files_[0]->footer.tables()) specs.push_back(SpecFromProto(t.spec()));
  return specs;
}

namespace {

// sw: dense, the state floats per element; sparse, per row.
std::string Layout(TableKind kind, uint64_t size, uint32_t dim, uint32_t rule, uint64_t sw) {
  std::string s = kind == TableKind::kDense ? "dense, " + std::to_string(size) + " elements"
                                            : "sparse, dim " + std::to_string(dim);
  return s + ", rule " + UpdateRuleName(static_cast<UpdateRule>(rule)) + " (" +
         std::to_string(sw) + " state floats per " +
         (kind == TableKind::kDense ? "element)" : "row)");
}

// Mixed-hash ranges [begin, end) with end 0 = 2^64, as [begin, end] inclusive.
std::pair<uint64_t, uint64_t> Inclusive(uint64_t begin, uint64_t end) {
  return {begin, end == 0 ? ~uint64_t{0} : end - 1};
}

}  // namespace

Status CheckpointSet::Restore(TableId id, const TableSpec& spec, Store* store,
                              bool* restored) const {
  *restored = false;
  const uint32_t sw = store->StateWidth(id);
  const bool dense = spec.kind == TableKind::kDense;
  const uint32_t row_floats = store->RowWidth(id);  // sparse
  const std::string want = Layout(spec.kind, spec.size, spec.dim, static_cast<uint32_t>(spec.rule),
                                  dense ? sw : uint64_t{row_floats} - spec.dim);
  // The table's entry in each file (a server that held none of it has an empty one).
  std::vector<std::pair<const File*, const layerps::pb::CheckpointTable*>> parts;
  for (const auto& f : files_) {
    for (const auto& t : f->footer.tables()) {
      if (t.spec().name() != spec.name) continue;
      const TableKind kind = static_cast<TableKind>(t.spec().kind());
      const std::string have =
          Layout(kind, t.spec().size(), t.spec().dim(), t.spec().rule(),
                 kind == TableKind::kDense ? t.state_width() : RowFloats(t) - t.spec().dim());
      if (have != want) {
        return FailedPrecondition("checkpoint " + path_ + " holds table '" + spec.name +
                                  "' as " + have + ", but it is declared as " + want);
      }
      parts.emplace_back(f.get(), &t);
    }
  }
  if (parts.empty()) return Status::OK();
  const std::string where = "restore of table '" + spec.name + "' from " + path_;
  std::vector<char> buf;
  if (dense) {
    std::vector<Store::DenseView> held = store->DenseRanges(id);
    uint64_t want_elems = 0, copied = 0;
    for (const auto& h : held) want_elems += h.size;
    const uint64_t planes = 1 + uint64_t{sw};
    for (const auto& part : parts) {
      const File& f = *part.first;
      const auto& t = *part.second;
      Checksum sum;
      for (const auto& sp : t.spans()) {
        for (uint64_t p = 0; p < planes; ++p) {
          const uint64_t plane_at = sp.offset() + p * sp.size() * sizeof(float);
          for (uint64_t e = 0; e < sp.size();) {
            const uint64_t n = std::min<uint64_t>(sp.size() - e, kIoChunk / sizeof(float));
            buf.resize(n * sizeof(float));
            PS_RETURN_IF_ERROR(f.Read(plane_at + e * sizeof(float), buf.data(), buf.size()));
            sum.Update(buf.data(), buf.size());
            // Elements [a, b) of the table in this chunk.
            const uint64_t a = sp.first() + e, b = a + n;
            for (const Store::DenseView& h : held) {
              const uint64_t lo = std::max(a, h.first), hi = std::min(b, h.first + h.size);
              if (lo >= hi) continue;
              float* dst = p == 0 ? h.values : h.state + (p - 1) * h.size;
              std::memcpy(dst + (lo - h.first), buf.data() + (lo - a) * sizeof(float),
                          (hi - lo) * sizeof(float));
              if (p == 0) copied += hi - lo;
            }
            e += n;
          }
        }
      }
      if (sum.value() != t.checksum()) return IoError(where + ": " + f.path + ": checksum mismatch");
    }
    if (copied != want_elems) {
      return IoError(where + ": the set covers " + std::to_string(copied) + " of the " +
                     std::to_string(want_elems) + " elements this server holds");
    }
  } else {
    // Coverage: the files' held ranges must cover this server's.
    std::vector<std::pair<uint64_t, uint64_t>> have;
    for (const auto& part : parts) {
      for (const auto& h : part.second->held()) have.push_back(Inclusive(h.begin(), h.end()));
    }
    std::sort(have.begin(), have.end());
    for (const auto& mine : store->HashRanges(id)) {
      const auto need = Inclusive(mine.first, mine.second);
      uint64_t next = need.first;  // the first hash not yet covered
      bool done = false;
      for (const auto& r : have) {
        if (r.first > next) break;
        if (r.second >= next) {
          if (r.second >= need.second) {
            done = true;
            break;
          }
          next = r.second + 1;
        }
      }
      if (!done) return IoError(where + ": the set does not cover this server's ids");
    }
    if (store->Spec(id) != nullptr && store->Spec(id)->cold_tier)
      PS_RETURN_IF_ERROR(store->ClearColdTier(id).WithContext(where));
    // The layouts agree: the files' rows are row_floats wide, as this store's.
    const size_t record = 8 + size_t{row_floats} * sizeof(float);
    std::vector<float> row(row_floats);
    for (const auto& part : parts) {
      const File& f = *part.first;
      const auto& t = *part.second;
      Checksum sum;
      const uint64_t per_chunk = std::max<uint64_t>(1, kIoChunk / record);
      for (uint64_t r = 0; r < t.rows();) {
        const uint64_t n = std::min<uint64_t>(t.rows() - r, per_chunk);
        buf.resize(n * record);
        PS_RETURN_IF_ERROR(f.Read(t.offset() + r * record, buf.data(), buf.size()));
        sum.Update(buf.data(), buf.size());
        for (uint64_t i = 0; i < n; ++i) {
          const char* rec = buf.data() + i * record;
          Key key;
          std::memcpy(&key, rec, 8);
          std::memcpy(row.data(), rec + 8, record - 8);
          bool held = false;
          PS_RETURN_IF_ERROR(store->RestoreRow(id, key, row.data(), &held).WithContext(where));
        }
        r += n;
      }
      if (sum.value() != t.checksum()) return IoError(where + ": " + f.path + ": checksum mismatch");
    }
  }
  *restored = true;
  return Status::OK();
}

}  // namespace ps
