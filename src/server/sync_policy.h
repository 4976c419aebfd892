// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// SyncPolicy: where a synchronization model sits on a server, between a validated data
// request and the store. The server checks every request (server/request.h) and hands it
// to the policy, which applies it to the store now or later and answers it through
// `reply`, exactly once. Today's policy applies every request on arrival (ASP, and what
// `sum` tables with worker barriers build BSP from); a BSP policy holds a step's pushes
// per key range until all N arrived and answers pulls by version, an SSP one consults
// the clocks: they plug in here without touching the server's receive path.
//
// Thread-safety: Handle runs on the server's receive thread, one request at a time.
#ifndef PS_SERVER_SYNC_POLICY_H_
#define PS_SERVER_SYNC_POLICY_H_

#include <functional>
#include <memory>
#include <vector>

#include "server/request.h"
#include "server/store.h"

namespace ps {

class SyncPolicy {
 public:
  // Answers a request: its header, the outcome and (pulls) the values.
  using ReplyFn = std::function<void(const Header&, const Status&, std::vector<Frame>)>;

  virtual ~SyncPolicy() = default;
  virtual void Handle(DataRequest&& req, Store& store, const ReplyFn& reply) = 0;
};

// Applies each request as it arrives and answers at once.
std::unique_ptr<SyncPolicy> NewApplyOnArrival();

}  // namespace ps

#endif  // PS_SERVER_SYNC_POLICY_H_
