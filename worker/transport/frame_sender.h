#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paci/v1/stage.pb.h"

namespace paci {

// The outgoing side of a stage's link to one neighbour, as the stage's
// compute thread uses it: a PeerSender (gRPC) in a worker, a fake in tests.
// Send and Close are called from one thread.
class FrameSender {
 public:
  virtual ~FrameSender() = default;

  // Queues a frame; may block (flow control). Returns false after a failure
  // (the frame is dropped).
  virtual bool Send(v1::TensorFrame frame) = 0;
  // Sends what is queued and ends the link, waiting at most `timeout` for the
  // peer. Returns the link's final status.
  virtual absl::Status Close(absl::Duration timeout) = 0;
};

}  // namespace paci
