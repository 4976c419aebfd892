// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/timeline.h"

#include <cstdio>

namespace ps {

std::string Timeline::FileName(const std::string& pattern, uint32_t rank, bool shared) {
  const std::string r = std::to_string(rank);
  const size_t at = pattern.find("%r");
  if (at != std::string::npos) return pattern.substr(0, at) + r + pattern.substr(at + 2);
  if (!shared) return pattern;
  const size_t slash = pattern.rfind('/');
  const size_t dot = pattern.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return pattern + "." + r;
  }
  return pattern.substr(0, dot) + "." + r + pattern.substr(dot);
}

namespace {

// A string as the contents of a JSON string (table names are the user's).
std::string JsonEscaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

Timeline::Timeline(std::string path, uint32_t rank, Clock::time_point origin, TableNames table_name)
    : path_(std::move(path)), rank_(rank), origin_(origin), table_name_(std::move(table_name)) {}

StatusOr<std::shared_ptr<Timeline>> Timeline::Open(const std::string& path, uint32_t rank,
                                                   TableNames table_name) {
  std::shared_ptr<Timeline> t(new Timeline(path, rank, Clock::now(), std::move(table_name)));
  MutexLock lock(&t->mu_);  // not shared yet; taken for the analysis' sake
  t->out_.open(path, std::ios::out | std::ios::trunc);
  if (!t->out_) return IoError("timeline: cannot create '" + path + "'");
  t->out_ << "[\n"
          << R"({"name": "process_name", "ph": "M", "pid": )" << rank
          << R"(, "tid": 0, "args": {"name": "LayerPS worker rank )" << rank << R"("}})";
  t->first_ = false;
  return t;
}

Timeline::~Timeline() { Close(); }

double Timeline::Micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Timeline::Request(const char* kind, TableId table, Ticket ticket, size_t parts,
                       Clock::time_point queued, Clock::time_point sent, Clock::time_point done,
                       bool ok) {
  {
    MutexLock lock(&mu_);
    if (closed_) return;  // (the worker that names the tables may be stopping)
  }
  char buf[1024];
  const double ts = Micros(queued);
  const double dur = std::max(0.0, Micros(done) - ts);
  const int tid = table == kInvalidTable ? 0 : static_cast<int>(table) + 1;
  // "push emb.weight"; a request of no table (a collective's peer tensors) by its kind.
  std::string name;
  if (table == kInvalidTable) {
    name = std::string(kind) == "peer" ? "collective" : kind;
  } else {
    std::string table_name = table_name_ ? table_name_(table) : std::string();
    if (table_name.size() > 200) table_name.resize(200);
    name = std::string(kind) + " " + (table_name.empty() ? "#" + std::to_string(table) : table_name);
  }
  name = JsonEscaped(name);
  int n = std::snprintf(
      buf, sizeof buf,
      ",\n{\"name\": \"%s\", \"cat\": \"request\", \"ph\": \"X\", \"pid\": %u, "
      "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"ticket\": %llu, \"table\": %u, "
      "\"parts\": %zu, \"queued_us\": %.3f, \"sent_us\": %.3f, \"answered_us\": %.3f, "
      "\"ok\": %s}}",
      name.c_str(), rank_, tid, ts, dur, static_cast<unsigned long long>(ticket), table, parts, ts,
      Micros(sent), Micros(done), ok ? "true" : "false");
  if (n < 0 || n >= static_cast<int>(sizeof buf)) return;
  if (sent > queued) {
    n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                       ",\n{\"name\": \"sent\", \"cat\": \"request\", \"ph\": \"i\", \"s\": \"t\", "
                       "\"pid\": %u, \"tid\": %d, \"ts\": %.3f, \"args\": {\"ticket\": %llu}}",
                       rank_, tid, Micros(sent), static_cast<unsigned long long>(ticket));
  }
  MutexLock lock(&mu_);
  if (closed_ || n <= 0) return;
  out_.write(buf, std::min<int>(n, static_cast<int>(sizeof buf) - 1));
}

void Timeline::Close() {
  MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  if (out_.is_open()) {
    out_ << "\n]\n";
    out_.close();
  }
}

}  // namespace ps
