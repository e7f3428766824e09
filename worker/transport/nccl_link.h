#pragma once

// Moves tensors between two neighbouring stages whose GPUs share a node, with
// NCCL send/recv instead of copies through the host and gRPC. The gRPC link
// still carries each frame (kind, micro-batch, shape, dtype) with no data and
// payload_on_nccl set; the bytes follow on NCCL in the same order.
//
// A link has two 2-rank communicators, one per direction (activations from
// the lower stage, gradients from the upper), each with its own CUDA stream:
// a send in one direction never waits behind a receive in the other, which
// would deadlock two stages that both send first. The streams are blocking
// streams, so they are ordered after the work already queued on the legacy
// default stream (where LibTorch computes) and before the work queued later.
//
// Free of Torch: device pointers and element counts. Compiled wherever the
// CUDA toolkit and NCCL are found (every development machine); without them
// every call is Unimplemented. Runs only where GPUs exist. Not thread-safe:
// owned by the stage's compute thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paci {

enum class NcclDType { kFloat32, kBFloat16, kFloat16 };

class NcclLink {
 public:
  // Bytes of the ids the lower stage sends the upper one (two unique ids).
  static constexpr size_t kIdsBytes = 2 * 128;

  // Whether this build has NCCL and this process sees at least one GPU.
  static bool Available();
  // Fresh ids for one link, made by the lower stage and sent to the upper.
  static absl::StatusOr<std::string> NewIds();
  // Joins the link: `lower` is the stage that made the ids. Blocks until the
  // peer joins too. FailedPrecondition when NCCL or the GPU is missing.
  static absl::StatusOr<std::unique_ptr<NcclLink>> Connect(const std::string& ids, bool lower,
                                                           int cuda_device);
  ~NcclLink();
  NcclLink(const NcclLink&) = delete;
  NcclLink& operator=(const NcclLink&) = delete;

  // Queues a send of `count` elements at `device_pointer` to the peer and
  // returns a ticket; the memory must stay alive until Done(ticket).
  absl::StatusOr<uint64_t> Send(const void* device_pointer, size_t count, NcclDType dtype);
  // Receives `count` elements into `device_pointer`; returns once they are there.
  absl::Status Receive(void* device_pointer, size_t count, NcclDType dtype);
  // True once the send of `ticket` has completed (does not block).
  bool Done(uint64_t ticket);

 private:
  struct State;
  explicit NcclLink(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace paci
