// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "common/logging.h"

#include "ps/logging.h"

#include <glog/logging.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ps {
namespace {

// -1 when the variable is unset or not understood (then it is ignored, with a warning).
int LevelFromEnv(bool* bad) {
  const char* v = std::getenv("LAYERPS_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return -1;
  std::string t;
  for (const char* p = v; *p; ++p) t += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  if (t == "INFO" || t == "0") return 0;
  if (t == "WARNING" || t == "WARN" || t == "1") return 1;
  if (t == "ERROR" || t == "2") return 2;
  if (t == "FATAL" || t == "3") return 3;
  *bad = true;
  return -1;
}

std::atomic<bool> g_level_set{false};  // SetLogLevel was called: it wins over the variable

}  // namespace

void SetLogLevel(int level) {
  FLAGS_minloglevel = level < 0 ? 0 : level > 3 ? 3 : level;
  g_level_set = true;
}

void EnsureLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    bool bad = false;
    const int level = LevelFromEnv(&bad);
    if (level >= 0 && !g_level_set) FLAGS_minloglevel = level;
    if (!google::IsGoogleLoggingInitialized()) {
      // No log files in /tmp from a library: stderr only.
      FLAGS_logtostderr = true;
      google::InitGoogleLogging("layerps");
    }
    if (bad) {
      LOG(WARNING) << "LAYERPS_LOG_LEVEL='" << std::getenv("LAYERPS_LOG_LEVEL")
                   << "' is not INFO, WARNING, ERROR, FATAL or 0..3: ignored";
    }
  });
}

}  // namespace ps
