// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// PeerMessages: tensors sent from one worker to another under a tag (Worker::SendTo and
// Worker::RecvFrom), the primitive under collectives, gossip, pairwise averaging and the
// activations of layer placement.
//
// A send is a one-part request to the peer: its values go in place (zero-copy, as pushes)
// and it completes when the peer acknowledged them. A receive is a posted request
// (RequestTracker::Expect) that the matching tensor completes. Tensors from one peer under
// one tag match receives in the order both were issued. A tensor that arrives before its
// receive is copied and kept until one is posted, within a byte budget;
// past it the sender's request fails with kResourceExhausted. Both sides fail when the
// other dies (kUnavailable) or at request_timeout_ms.
//
// A receive from any peer (RecvAny, Worker::RecvFromAny) names a tag only. An arriving
// tensor (sender s, tag t) goes to the oldest receive posted for (s, t) if there is one,
// else to the oldest receive from any peer posted for t, else it is kept; a receive for
// (s, t) takes the oldest tensor kept from s under t, a receive from any peer the one kept
// first under t, whoever sent it. Either way the tensors of one sender under one tag are
// received in the order they were sent. A receive from any peer fails only at its deadline,
// on Stop, or when the scheduler is lost: no single peer's death concerns it.
//
// Thread-safety: every member may be called from any thread; OnMessage runs on the
// receive thread.
#ifndef PS_WORKER_PEER_MESSAGES_H_
#define PS_WORKER_PEER_MESSAGES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "common/mutex.h"
#include "ps/worker.h"
#include "worker/request_tracker.h"

namespace ps {

class PeerMessages {
 public:
  // Sends a message to a node (the node runtime's Send).
  using SendFn = std::function<Status(NodeId, Message&&)>;

  PeerMessages(RequestTracker* tracker, SendFn send, uint64_t max_buffered_bytes)
      : tracker_(tracker), send_(std::move(send)), max_buffered_bytes_(max_buffered_bytes) {}

  // deadline_ms: when the request fails if still open (steady-clock ms, as the tracker's
  // Request::deadline_ms); 0 = request_timeout_ms from now. accumulate: the received
  // values are added to `out` instead of copied into it.
  Ticket Send(NodeId peer, uint64_t tag, const float* data, size_t n, uint64_t epoch,
              Worker::Callback cb, int64_t deadline_ms = 0);
  Ticket Recv(NodeId peer, uint64_t tag, float* out, size_t n, Worker::Callback cb,
              int64_t deadline_ms = 0, bool accumulate = false);
  // Typed forms (the collectives): `count` elements of DataType `dtype` (header.dim).
  // SendTyped sends `frame` as it is: a frame lending caller memory (Frame::Borrow with
  // `lend` true) makes the request wait for the transport to let go of it, as Send does;
  // a frame owning its bytes does not. RecvTyped hands the payload of the matching tensor
  // to `sink` once its type (and, unless `bytes` is kAnyBytes, its size) was checked.
  Ticket SendTyped(NodeId peer, uint64_t tag, const void* data, size_t bytes, uint8_t dtype,
                   std::shared_ptr<const void> owner, uint64_t epoch, Worker::Callback cb,
                   int64_t deadline_ms);
  Ticket RecvTyped(NodeId peer, uint64_t tag, uint8_t dtype, uint64_t bytes,
                   std::function<void(const void*, size_t)> sink, Worker::Callback cb,
                   int64_t deadline_ms);
  // A receive of the first tensor under `tag` from any peer. `on_source` runs once the
  // tensor is in `out`, before the request completes, with the sender's node id; its error
  // becomes the request's.
  Ticket RecvAny(uint64_t tag, float* out, size_t n, std::function<Status(NodeId)> on_source,
                 Worker::Callback cb, int64_t deadline_ms = 0);

  // A kPeerTensor message from a live member (receive thread).
  void OnMessage(Message&& msg);

  // Bytes of tensors received and not yet claimed by a receive.
  uint64_t buffered_bytes() const;

 private:
  // (tag, sender): the tensors kept under one tag are adjacent in `arrived_`.
  using Key = std::pair<uint64_t, NodeId>;
  struct Kept {
    Frame values;
    uint64_t seq = 0;   // arrival order, across senders
    uint8_t dtype = 0;  // its element type (a DataType value)
  };
  // Posts a receive whose part is filled in (Recv, RecvTyped).
  Ticket PostReceive(NodeId peer, uint64_t tag, const std::shared_ptr<Request>& req);
  void Ack(const Header& h, const Status& status);
  // Takes the tensor kept first under `tag` (any sender) into *out and its sender into
  // *sender; false if none.
  bool TakeKept(uint64_t tag, Frame* out, NodeId* sender, uint8_t* dtype) REQUIRES(mu_);

  RequestTracker* const tracker_;
  const SendFn send_;
  const uint64_t max_buffered_bytes_;
  mutable Mutex mu_;
  std::map<Key, std::deque<Ticket>> posted_ GUARDED_BY(mu_);  // receives waiting
  std::map<uint64_t, std::deque<Ticket>> posted_any_ GUARDED_BY(mu_);  // by tag
  std::map<Key, std::deque<Kept>> arrived_ GUARDED_BY(mu_);  // tensors waiting
  uint64_t buffered_ GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
};

}  // namespace ps

#endif  // PS_WORKER_PEER_MESSAGES_H_
