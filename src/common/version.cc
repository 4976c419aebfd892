// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/version.h"

// Both come from CMake (the project() version and `git describe` at configure time).
#ifndef LAYERPS_VERSION
#error "LAYERPS_VERSION must be defined by the build"
#endif
#ifndef LAYERPS_COMMIT
#define LAYERPS_COMMIT "unknown"
#endif

namespace ps {

const char* Version() { return LAYERPS_VERSION; }

const char* BuildCommit() { return LAYERPS_COMMIT; }

}  // namespace ps
