// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// gflags for the daemons and tools (library layerps::flags). Linking it defines the
// flags --scheduler, --bind, --advertise_host, --num_servers, --num_workers, --rank,
// --token, --heartbeat_interval_ms, --heartbeat_timeout_ms, --connect_timeout_ms,
// --request_timeout_ms, --dense_chunk_elems, --io_threads, --shared_memory. A flag given
// on the command line wins; otherwise the LAYERPS_* environment variable read by
// Options::FromEnv (where there is one), then Options' default.
#ifndef PS_FLAGS_H_
#define PS_FLAGS_H_

#include "ps/options.h"
#include "ps/status.h"

namespace ps {

// Builds Options from the parsed flags (call gflags::ParseCommandLineFlags first).
StatusOr<Options> OptionsFromFlags();

}  // namespace ps

#endif  // PS_FLAGS_H_
