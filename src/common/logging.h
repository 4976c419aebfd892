// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Logging set-up for library users who never called google::InitGoogleLogging: every node
// constructor calls EnsureLogging(), which initializes glog once (to stderr, no log
// files) unless the application did it first, so nothing prints "Logging before
// InitGoogleLogging()". LAYERPS_LOG_LEVEL (INFO, WARNING, ERROR, FATAL or 0..3) sets the
// least severity printed; glog's own GLOG_* variables keep working when it is not set.
//
// Thread-safety: EnsureLogging may be called from several threads at once.
#ifndef PS_COMMON_LOGGING_H_
#define PS_COMMON_LOGGING_H_

namespace ps {

void EnsureLogging();

}  // namespace ps

#endif  // PS_COMMON_LOGGING_H_
