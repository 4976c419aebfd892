// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "worker/peer_messages.h"

#include <glog/logging.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ps/element_types.h"

namespace ps {

Ticket PeerMessages::Send(NodeId peer, uint64_t tag, const float* data, size_t n, uint64_t epoch,
                          Worker::Callback cb, int64_t deadline_ms) {
  if (data == nullptr && n > 0)
    return tracker_->Failed(InvalidArgument("null buffer"), std::move(cb));
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  if (deadline_ms != 0) req->deadline_ms = deadline_ms;
  Part p;
  p.server = peer;
  p.table = kInvalidTable;  // not a table: traffic counters skip it
  p.offset = tag;
  p.count = n;
  req->parts.push_back(p);
  return tracker_->Submit(req, epoch, /*borrows=*/n > 0,
                          [&](size_t, const std::shared_ptr<const void>& borrow) {
                            std::vector<Frame> frames;
                            frames.push_back(Frame::Borrow(data, n * sizeof(float), borrow));
                            return frames;
                          });
}

Ticket PeerMessages::SendTyped(NodeId peer, uint64_t tag, const void* data, size_t bytes,
                               uint8_t dtype, std::shared_ptr<const void> owner, uint64_t epoch,
                               Worker::Callback cb, int64_t deadline_ms) {
  const size_t size = DataTypeSize(static_cast<DataType>(dtype));
  if (size == 0 || bytes % size != 0) {
    return tracker_->Failed(InvalidArgument("a peer tensor of " + std::to_string(bytes) +
                                            " bytes is no whole number of elements"),
                            std::move(cb));
  }
  if (data == nullptr && bytes > 0)
    return tracker_->Failed(InvalidArgument("null buffer"), std::move(cb));
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  if (deadline_ms != 0) req->deadline_ms = deadline_ms;
  Part p;
  p.server = peer;
  p.table = kInvalidTable;
  p.offset = tag;
  p.count = bytes / size;
  p.dtype = dtype;
  req->parts.push_back(p);
  // Without an owner the frame lends caller memory: the request waits for the transport.
  const bool lends = owner == nullptr && bytes > 0;
  return tracker_->Submit(req, epoch, lends,
                          [&](size_t, const std::shared_ptr<const void>& borrow) {
                            std::vector<Frame> frames;
                            frames.push_back(Frame::Borrow(data, bytes, lends ? borrow : owner));
                            return frames;
                          });
}

Ticket PeerMessages::RecvTyped(NodeId peer, uint64_t tag, uint8_t dtype, uint64_t bytes,
                               std::function<void(const void*, size_t)> sink, Worker::Callback cb,
                               int64_t deadline_ms) {
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  if (deadline_ms != 0) req->deadline_ms = deadline_ms;
  Part p;
  p.server = peer;          // its death fails the receive
  p.table = kInvalidTable;  // not a table: traffic counters skip it
  p.offset = tag;
  p.dtype = dtype;
  p.sink = std::move(sink);
  p.sink_bytes = bytes;
  req->parts.push_back(std::move(p));
  return PostReceive(peer, tag, req);
}

Ticket PeerMessages::Recv(NodeId peer, uint64_t tag, float* out, size_t n, Worker::Callback cb,
                          int64_t deadline_ms, bool accumulate) {
  if (out == nullptr && n > 0)
    return tracker_->Failed(InvalidArgument("null buffer"), std::move(cb));
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  if (deadline_ms != 0) req->deadline_ms = deadline_ms;
  Part p;
  p.server = peer;          // its death fails the receive
  p.table = kInvalidTable;  // not a table: traffic counters skip it
  p.offset = tag;
  p.count = n;
  p.dst = out;
  p.value_count = n;
  p.accumulate = accumulate;
  req->parts.push_back(p);
  return PostReceive(peer, tag, req);
}

Ticket PeerMessages::PostReceive(NodeId peer, uint64_t tag, const std::shared_ptr<Request>& req) {
  const Ticket ticket = req->ticket;
  // Registered before it is offered a tensor, so a quick delivery finds it. Taking a
  // tensor that arrived and posting the receive happen under one hold of mu_: a tensor
  // arriving in between would otherwise be buffered after we looked, and sit there
  // beside a posted receive that never sees it.
  tracker_->Expect(req);
  Frame waiting;
  uint8_t dtype = 0;
  bool have = false;
  {
    MutexLock lock(&mu_);
    auto it = arrived_.find({tag, peer});
    if (it != arrived_.end() && !it->second.empty()) {
      waiting = std::move(it->second.front().values);
      dtype = it->second.front().dtype;
      it->second.pop_front();
      if (it->second.empty()) arrived_.erase(it);
      buffered_ -= waiting.size();
      have = true;
    } else {
      posted_[{tag, peer}].push_back(ticket);
    }
  }
  if (have) {
    tracker_->Deliver(ticket, 0, Status::OK(), waiting.data(), waiting.size(), kUnassignedId, dtype);
  }
  return ticket;
}

Ticket PeerMessages::RecvAny(uint64_t tag, float* out, size_t n,
                             std::function<Status(NodeId)> on_source, Worker::Callback cb,
                             int64_t deadline_ms) {
  if (out == nullptr && n > 0)
    return tracker_->Failed(InvalidArgument("null buffer"), std::move(cb));
  auto req = tracker_->New(MsgType::kPeerTensor, kInvalidTable, std::move(cb));
  if (deadline_ms != 0) req->deadline_ms = deadline_ms;
  Part p;
  p.server = kUnassignedId;  // no peer: only the deadline, Stop or the scheduler fail it
  p.table = kInvalidTable;
  p.offset = tag;
  p.count = n;
  p.dst = out;
  p.value_count = n;
  req->parts.push_back(p);
  if (on_source) {
    req->finish = [on_source = std::move(on_source)](Request& r) { return on_source(r.source); };
  }
  const Ticket ticket = req->ticket;
  // As in Recv: looking for a kept tensor and posting happen under one hold of mu_.
  tracker_->Expect(req);
  Frame waiting;
  NodeId sender = kUnassignedId;
  uint8_t dtype = 0;
  bool have = false;
  {
    MutexLock lock(&mu_);
    have = TakeKept(tag, &waiting, &sender, &dtype);
    if (!have) posted_any_[tag].push_back(ticket);
  }
  if (have) tracker_->Deliver(ticket, 0, Status::OK(), waiting.data(), waiting.size(), sender, dtype);
  return ticket;
}

bool PeerMessages::TakeKept(uint64_t tag, Frame* out, NodeId* sender, uint8_t* dtype) {
  auto first = arrived_.end();
  for (auto it = arrived_.lower_bound({tag, 0}); it != arrived_.end() && it->first.first == tag;
       ++it) {
    if (it->second.empty()) continue;
    if (first == arrived_.end() || it->second.front().seq < first->second.front().seq) first = it;
  }
  if (first == arrived_.end()) return false;
  *out = std::move(first->second.front().values);
  *dtype = first->second.front().dtype;
  *sender = first->first.second;
  first->second.pop_front();
  if (first->second.empty()) arrived_.erase(first);
  buffered_ -= out->size();
  return true;
}

void PeerMessages::OnMessage(Message&& msg) {
  const Header& h = msg.header;
  Status valid = ValidateDataFrames(msg, ~uint64_t{0} / 8);
  if (!valid.ok()) {
    ++tracker_->stats().bad;
    LOG_EVERY_N(WARNING, 100) << "dropped a peer tensor from node " << h.sender << ": " << valid;
    Ack(h, valid);
    return;
  }
  const Frame& values = msg.frames[0];
  const Key key{h.offset, h.sender};
  for (;;) {
    Ticket ticket = 0;
    {
      MutexLock lock(&mu_);
      auto it = posted_.find(key);
      auto any = posted_any_.find(h.offset);
      if (it != posted_.end() && !it->second.empty()) {
        // A receive naming the sender comes first.
        ticket = it->second.front();
        it->second.pop_front();
        if (it->second.empty()) posted_.erase(it);
      } else if (any != posted_any_.end() && !any->second.empty()) {
        ticket = any->second.front();
        any->second.pop_front();
        if (any->second.empty()) posted_any_.erase(any);
      } else {
        // Nobody waits yet: keep a copy within the budget. (The frame itself may be the
        // sender's memory, in process or in a shared-memory ring: holding it would keep
        // the sender's request, or a ring slot, waiting for a receive that may come late.)
        if (buffered_ + values.size() > max_buffered_bytes_) break;
        buffered_ += values.size();
        arrived_[key].push_back(Kept{Frame::Copy(values.data(), values.size()), next_seq_++,
                                     static_cast<uint8_t>(h.dim)});
        Ack(h, Status::OK());
        return;
      }
    }
    // A receive that expired meanwhile declines; offer the tensor to the next one.
    if (tracker_->Deliver(ticket, 0, Status::OK(), values.data(), values.size(), h.sender,
                          static_cast<uint8_t>(h.dim))) {
      Ack(h, Status::OK());
      return;
    }
  }
  Ack(h, ResourceExhausted(
             "node " + std::to_string(h.sender) + "'s tensor does not fit: the receiver holds " +
             std::to_string(max_buffered_bytes_) + " bytes of tensors nobody received yet"));
}

void PeerMessages::Ack(const Header& h, const Status& status) {
  Message r;
  r.header = h;
  r.header.type = static_cast<uint16_t>(MsgType::kReply);
  r.header.dim = 0;  // a reply carries no values: the tensor's element type is not its
  r.header.status = static_cast<int32_t>(status.code());
  if (!status.ok()) {
    const std::string& text = status.message();
    r.frames.push_back(Frame::Copy(text.data(), std::min<size_t>(text.size(), 4096)));
  }
  Status s = send_(h.sender, std::move(r));
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 100) << "ack to node " << h.sender << " failed: " << s;
  }
}

uint64_t PeerMessages::buffered_bytes() const {
  MutexLock lock(&mu_);
  return buffered_;
}

}  // namespace ps
