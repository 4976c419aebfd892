// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The whole public API of LayerPS in one include.
#ifndef PS_PS_H_
#define PS_PS_H_

#include "ps/algorithm.h"
#include "ps/cluster_key.h"
#include "ps/collectives.h"
#include "ps/communicator.h"
#include "ps/element_types.h"
#include "ps/launcher.h"
#include "ps/logging.h"
#include "ps/options.h"
#include "ps/pinned_stage.h"
#include "ps/scheduler.h"
#include "ps/server.h"
#include "ps/sparse_exchange.h"
#include "ps/status.h"
#include "ps/types.h"
#include "ps/version.h"
#include "ps/worker.h"

#endif  // PS_PS_H_
