// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The receiving side of the ZeroMQ transport's same-host path (zmq_transport.cc): the
// segments that members' manifests name, opened, mapped and unlinked once per connection,
// and the received frames a manifest replaces by their bytes in shared memory. Manifests
// are acted on only when shared memory is on here and only from the connections the node
// runtime listed as members' (routing identities). The segments and mappings themselves:
// transport/shm_ring.h.
#ifndef PS_TRANSPORT_SHM_RECEIVER_H_
#define PS_TRANSPORT_SHM_RECEIVER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/buffer.h"
#include "common/mutex.h"
#include "ps/status.h"
#include "transport/shm_ring.h"

namespace ps {

class ShmReceiver {
 public:
  // enabled: Options::shared_memory (off: every manifest is refused).
  explicit ShmReceiver(bool enabled) : shm_enabled_(enabled) {}
  ShmReceiver(const ShmReceiver&) = delete;
  ShmReceiver& operator=(const ShmReceiver&) = delete;

  // The members' connections (routing identities) whose manifests are acted on; the
  // mappings of the others are dropped (Transport::SetSharedMemoryPeers).
  void SetPeers(std::vector<std::string> identities);

  // Replaces frames marked in the manifest (ParseShmManifest checked it against the
  // frames) by their bytes in shared memory. `frames` are the payload frames as received.
  Status Resolve(const void* manifest, size_t manifest_size, const std::string& identity,
                 std::vector<Frame>* frames);

 private:
  // Opens (or finds) the mapping of the segment a member's connection (`identity`)
  // names; an error if shared memory is off here, the connection is not a member's, the
  // name is not a LayerPS segment, or it cannot be mapped. A connection has one live
  // segment: when it sends from a new one (the sender reconnected), the old mapping is
  // dropped (frames handed out keep it alive). Receive thread only.
  StatusOr<std::shared_ptr<ShmMapping>> MapSegment(const std::string& name,
                                                   const std::string& identity);

  const bool shm_enabled_;
  struct Mapped {
    std::string name;  // the segment's name, as the manifests give it
    std::shared_ptr<ShmMapping> map;
  };
  Mutex mappings_mu_;
  // Members' connections whose manifests are acted on.
  std::unordered_set<std::string> shm_peers_ GUARDED_BY(mappings_mu_);
  // The live segment of each member's connection, by routing identity; frames handed out
  // keep their mapping alive on their own.
  std::unordered_map<std::string, Mapped> mappings_ GUARDED_BY(mappings_mu_);
};

}  // namespace ps

#endif  // PS_TRANSPORT_SHM_RECEIVER_H_
