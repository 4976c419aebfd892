// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The cluster's CURVE key file (CommonOptions::curve_key_file; docs/THREAT_MODEL.md).
#ifndef PS_CLUSTER_KEY_H_
#define PS_CLUSTER_KEY_H_

#include <string>

#include "ps/export.h"
#include "ps/status.h"

namespace ps {

// Writes a new cluster key file for CommonOptions::curve_key_file at `path`: a fresh CURVE
// secret key, the file created with mode 0600 (an existing file is refused with
// kAlreadyExists). kFailedPrecondition when libzmq has no CURVE. (layerps-keygen.)
LAYERPS_EXPORT Status WriteClusterKeyFile(const std::string& path);

}  // namespace ps

#endif  // PS_CLUSTER_KEY_H_
