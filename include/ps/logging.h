// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// LayerPS logs through glog. A program that never calls google::InitGoogleLogging gets it
// initialized by the first node it builds (stderr only, no log files). The least severity
// printed comes from, in order: SetLogLevel, $LAYERPS_LOG_LEVEL (INFO, WARNING, ERROR,
// FATAL or 0..3), glog's $GLOG_minloglevel, INFO.
#ifndef PS_LOGGING_H_
#define PS_LOGGING_H_

#include "ps/export.h"

namespace ps {

// 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL (clamped). Takes effect at once, for the process.
LAYERPS_EXPORT void SetLogLevel(int level);

}  // namespace ps

#endif  // PS_LOGGING_H_
