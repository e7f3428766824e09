#pragma once

#include <deque>
#include <optional>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/stage.pb.h"

namespace paci {

// Where the link handlers leave the frames a stage receives, and where a
// broken link is reported. Three bounded FIFO queues: from the previous stage
// (activations and control frames, in order), from the next stage
// (gradients), and the split head's frames (HEAD_INPUT, HEAD_PART,
// HEAD_SCALE, from whichever neighbour shares the head), which the stage takes
// before anything else and which a full queue of activations must not hold
// up. A full queue blocks the handler that pushes, so it stops reading its
// stream and gRPC's flow control holds the sender back. (The split head's
// protocol keeps at most two head frames waiting, so their queue never fills
// in a sound run.)
//
// Thread-safe: link handlers push, the stage's compute thread pops and waits.
class Inbox {
 public:
  enum class From { kPrevious, kNext, kHead };
  // HEAD_INPUT, HEAD_PART and HEAD_SCALE: pushed from either side, they go to kHead.
  static bool IsHeadFrame(v1::TensorFrame::Kind kind);

  explicit Inbox(size_t capacity);

  // Blocks while the queue is full. Returns false (and drops the frame) once
  // the inbox is closed.
  bool Push(From from, v1::TensorFrame frame);
  // The kind of the oldest frame from `from`, if any.
  std::optional<v1::TensorFrame::Kind> PeekKind(From from) const;
  std::optional<v1::TensorFrame> Pop(From from);

  // Waits up to `timeout` for a frame or a failure. Returns at once if either
  // is already there.
  void Wait(absl::Duration timeout) const;
  // The same for a frame from `from` only.
  void WaitFor(From from, absl::Duration timeout) const;

  // A link broke or a peer misbehaved: the first failure is kept and wakes
  // the compute thread. Ignored after Close().
  void Fail(absl::Status status);
  absl::Status failure() const;

  // The stage is finished: links that end from now on end normally, and
  // blocked pushers return.
  void Close();
  bool closed() const;

 private:
  std::deque<v1::TensorFrame>& Queue(From from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::deque<v1::TensorFrame>& Queue(From from) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<v1::TensorFrame> previous_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::TensorFrame> next_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::TensorFrame> head_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace paci
