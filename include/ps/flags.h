// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// gflags for the daemons and tools (library layerps::flags). Linking it defines the
// flags --scheduler, --bind, --advertise_host, --num_servers, --num_workers, --token,
// --heartbeat_interval_ms, --heartbeat_timeout_ms, --connect_timeout_ms,
// --request_timeout_ms, --dense_chunk_elems, --io_threads. Flags left at their default
// fall back to the LAYERPS_* environment variables, then to Options' defaults.
#ifndef PS_FLAGS_H_
#define PS_FLAGS_H_

#include "ps/options.h"
#include "ps/status.h"

namespace ps {

// Builds Options from the parsed flags (call gflags::ParseCommandLineFlags first).
StatusOr<Options> OptionsFromFlags();

}  // namespace ps

#endif  // PS_FLAGS_H_
