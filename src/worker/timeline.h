// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Timeline: a Chrome trace (Trace Event Format, JSON array; opens in Perfetto and
// chrome://tracing) of one worker's requests, written as they complete
// (Options::timeline, LAYERPS_TIMELINE; docs/observability.md). Each request is one
// complete event ("ph": "X") from the moment it was queued to the moment it was answered,
// named after its kind and table, on a track per table, with instant events ("ph": "i")
// when its messages were sent. Memory stays bounded: events go to the file as they come
// (through the stream's buffer); the closing bracket is written by Close().
//
// Thread-safety: every method may be called from any thread.
#ifndef PS_WORKER_TIMELINE_H_
#define PS_WORKER_TIMELINE_H_

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "ps/status.h"
#include "ps/types.h"

namespace ps {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // `pattern` with "%r" replaced by `rank` (without "%r", ".<rank>" goes before the
  // extension when `shared` is true: several workers write in one directory).
  static std::string FileName(const std::string& pattern, uint32_t rank, bool shared);
  // kIoError when the file cannot be created. `table_name` (id -> name; "" when unknown)
  // names the events and tracks after the tables (requests of no table, the collectives'
  // peer tensors, are named after their kind alone).
  using TableNames = std::function<std::string(TableId)>;
  static StatusOr<std::shared_ptr<Timeline>> Open(const std::string& path, uint32_t rank,
                                                  TableNames table_name = nullptr);
  ~Timeline();  // Close()

  // One request: queued at `queued`, its messages sent at `sent`, answered at `done`.
  void Request(const char* kind, TableId table, Ticket ticket, size_t parts, Clock::time_point queued,
               Clock::time_point sent, Clock::time_point done, bool ok);
  // Writes the closing bracket; later events are dropped. Idempotent.
  void Close();
  const std::string& path() const { return path_; }

 private:
  Timeline(std::string path, uint32_t rank, Clock::time_point origin, TableNames table_name);
  double Micros(Clock::time_point t) const;

  const std::string path_;
  const uint32_t rank_;
  const Clock::time_point origin_;
  const TableNames table_name_;
  Mutex mu_;
  std::ofstream out_ GUARDED_BY(mu_);
  bool first_ GUARDED_BY(mu_) = true;
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // PS_WORKER_TIMELINE_H_
