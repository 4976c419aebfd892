// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// SyncPolicy: where a synchronization model sits on a server, between a validated data
// request and the store. The server checks every request (server/request.h) and hands it
// to the policy of the request's table (TableSpec::sync), which applies it to the store
// now or later and answers it through `reply`, exactly once (or drops it, when its
// worker is gone):
//   async: apply_on_arrival.cc: every push applied as it arrives, every pull answered
//          at once (ASP); fused requests always go here (they never carry a bsp/ssp table);
//   bsp:   bsp_policy.cc: per key range, the pushes of step t from every live worker are
//          summed and the table's rule applied once; pulls wait for their step;
//   ssp:   ssp_policy.cc: pushes applied on arrival; a pull waits while its worker's
//          clock is more than `staleness` ahead of the slowest live worker's.
// Clocks, held requests and their limits: server/sync_state.h; docs/algorithms.md.
//
// Thread-safety: every member runs on the server's receive thread, one at a time, with
// the store readable (the server holds its store lock shared).
#ifndef PS_SERVER_SYNC_POLICY_H_
#define PS_SERVER_SYNC_POLICY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/cluster_map.h"
#include "server/request.h"
#include "server/store.h"

namespace ps {

class SyncPolicy {
 public:
  // Answers a request: its header, the outcome and (pulls) the values.
  using ReplyFn = std::function<void(const Header&, const Status&, std::vector<Frame>)>;

  virtual ~SyncPolicy() = default;
  virtual void Handle(DataRequest&& req, Store& store, const ReplyFn& reply) = 0;

  // A cluster map was installed: the policy learns the tables (and this server's ranges
  // of them) it is in charge of.
  virtual void OnMap(const ClusterMap& map, NodeId self) {}
  // The workers whose clocks count (the live ones) changed: held requests of the others
  // are dropped, the rest re-checked (a step may complete, the slowest clock may move).
  // Returns what the departure held up ("" when nothing waited on the workers that left),
  // for the server's log line.
  virtual std::string SetWorkers(const std::set<NodeId>& live, Store& store, const ReplyFn& reply) {
    return "";
  }
  // Called about every 50 ms: held requests past their deadline are answered with
  // kUnavailable (the worker's own deadline passes about then too).
  virtual void Tick(int64_t now_ms, Store& store, const ReplyFn& reply) {}
  // Requests held now (tests, stats).
  virtual size_t held() const { return 0; }
  // Stall warning: a held request waiting longer than `ms` (0: off) logs what it waits
  // for (once per request and ms); stall_warnings() counts those lines.
  virtual void SetStallWarning(int ms) {}
  virtual uint64_t stall_warnings() const { return 0; }
};

// Applies each request as it arrives and answers at once. A pushpull on an elastic table
// is answered with the values before its push is applied (the EASGD exchange).
std::unique_ptr<SyncPolicy> NewApplyOnArrival();
// Bulk-synchronous and stale-synchronous policies; a held request is answered with
// kUnavailable `hold_timeout_ms` after it arrived.
std::unique_ptr<SyncPolicy> NewBspPolicy(int hold_timeout_ms);
std::unique_ptr<SyncPolicy> NewSspPolicy(int hold_timeout_ms);

}  // namespace ps

#endif  // PS_SERVER_SYNC_POLICY_H_
