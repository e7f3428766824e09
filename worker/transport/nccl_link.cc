#include "worker/transport/nccl_link.h"

#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"

#ifdef PACI_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace paci {

#ifdef PACI_HAVE_NCCL

static_assert(NCCL_UNIQUE_ID_BYTES == 128, "kIdsBytes assumes 128-byte NCCL unique ids");

namespace {

absl::Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status Nccl(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

ncclDataType_t ToNccl(NcclDType dtype) {
  switch (dtype) {
    case NcclDType::kBFloat16: return ncclBfloat16;
    case NcclDType::kFloat16: return ncclFloat16;
    default: return ncclFloat32;
  }
}

}  // namespace

struct NcclLink::State {
  int device = 0;
  int peer = 0;  // the peer's rank in both communicators
  ncclComm_t send_comm = nullptr, receive_comm = nullptr;
  cudaStream_t send_stream = nullptr, receive_stream = nullptr;
  std::deque<std::pair<uint64_t, cudaEvent_t>> sends;  // in flight, oldest first
  uint64_t next_ticket = 1;
};

bool NcclLink::Available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

absl::StatusOr<std::string> NcclLink::NewIds() {
  std::string ids(kIdsBytes, '\0');
  for (int i = 0; i < 2; ++i) {
    ncclUniqueId id;
    if (absl::Status s = Nccl(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
    std::memcpy(ids.data() + i * NCCL_UNIQUE_ID_BYTES, id.internal, NCCL_UNIQUE_ID_BYTES);
  }
  return ids;
}

absl::StatusOr<std::unique_ptr<NcclLink>> NcclLink::Connect(const std::string& ids, bool lower,
                                                            int cuda_device) {
  if (ids.size() != kIdsBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL ids have ", ids.size(), " bytes, expected ", kIdsBytes));
  }
  auto state = std::make_unique<State>();
  state->device = cuda_device;
  const int rank = lower ? 0 : 1;
  state->peer = 1 - rank;
  if (absl::Status s = Cuda(cudaSetDevice(cuda_device), "cudaSetDevice"); !s.ok()) return s;
  // Communicator 0 carries activations (lower -> upper), 1 gradients (upper -> lower).
  ncclComm_t comms[2];
  for (int i = 0; i < 2; ++i) {
    ncclUniqueId id;
    std::memcpy(id.internal, ids.data() + i * NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES);
    if (absl::Status s = Nccl(ncclCommInitRank(&comms[i], 2, id, rank), "ncclCommInitRank");
        !s.ok()) {
      if (i == 1) ncclCommDestroy(comms[0]);
      return s;
    }
  }
  state->send_comm = lower ? comms[0] : comms[1];
  state->receive_comm = lower ? comms[1] : comms[0];
  if (absl::Status s = Cuda(cudaStreamCreate(&state->send_stream), "cudaStreamCreate"); !s.ok()) {
    return s;
  }
  if (absl::Status s = Cuda(cudaStreamCreate(&state->receive_stream), "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<NcclLink>(new NcclLink(std::move(state)));
}

NcclLink::NcclLink(std::unique_ptr<State> state) : state_(std::move(state)) {}

NcclLink::~NcclLink() {
  if (!state_) return;
  cudaSetDevice(state_->device);
  for (auto& [ticket, event] : state_->sends) cudaEventDestroy(event);
  if (state_->send_stream) cudaStreamSynchronize(state_->send_stream);
  if (state_->receive_stream) cudaStreamSynchronize(state_->receive_stream);
  if (state_->send_comm) ncclCommDestroy(state_->send_comm);
  if (state_->receive_comm) ncclCommDestroy(state_->receive_comm);
  if (state_->send_stream) cudaStreamDestroy(state_->send_stream);
  if (state_->receive_stream) cudaStreamDestroy(state_->receive_stream);
}

absl::StatusOr<uint64_t> NcclLink::Send(const void* device_pointer, size_t count,
                                        NcclDType dtype) {
  if (absl::Status s = Cuda(cudaSetDevice(state_->device), "cudaSetDevice"); !s.ok()) return s;
  if (absl::Status s = Nccl(ncclSend(device_pointer, count, ToNccl(dtype), state_->peer,
                                     state_->send_comm, state_->send_stream),
                            "ncclSend");
      !s.ok()) {
    return s;
  }
  cudaEvent_t event;
  if (absl::Status s = Cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                            "cudaEventCreate");
      !s.ok()) {
    return s;
  }
  cudaEventRecord(event, state_->send_stream);
  const uint64_t ticket = state_->next_ticket++;
  state_->sends.emplace_back(ticket, event);
  return ticket;
}

absl::Status NcclLink::Receive(void* device_pointer, size_t count, NcclDType dtype) {
  if (absl::Status s = Cuda(cudaSetDevice(state_->device), "cudaSetDevice"); !s.ok()) return s;
  if (absl::Status s = Nccl(ncclRecv(device_pointer, count, ToNccl(dtype), state_->peer,
                                     state_->receive_comm, state_->receive_stream),
                            "ncclRecv");
      !s.ok()) {
    return s;
  }
  return Cuda(cudaStreamSynchronize(state_->receive_stream), "cudaStreamSynchronize");
}

bool NcclLink::Done(uint64_t ticket) {
  // Sends complete in order: retire finished ones from the front.
  while (!state_->sends.empty() && cudaEventQuery(state_->sends.front().second) == cudaSuccess) {
    cudaEventDestroy(state_->sends.front().second);
    state_->sends.pop_front();
  }
  return state_->sends.empty() || state_->sends.front().first > ticket;
}

#else  // built without NCCL

struct NcclLink::State {};

namespace {
absl::Status NoNccl() {
  return absl::FailedPreconditionError(
      "this worker was built without the CUDA toolkit and NCCL; stages exchange tensors over "
      "gRPC");
}
}  // namespace

bool NcclLink::Available() { return false; }
absl::StatusOr<std::string> NcclLink::NewIds() { return NoNccl(); }
absl::StatusOr<std::unique_ptr<NcclLink>> NcclLink::Connect(const std::string&, bool, int) {
  return NoNccl();
}
NcclLink::NcclLink(std::unique_ptr<State> state) : state_(std::move(state)) {}
NcclLink::~NcclLink() = default;
absl::StatusOr<uint64_t> NcclLink::Send(const void*, size_t, NcclDType) { return NoNccl(); }
absl::Status NcclLink::Receive(void*, size_t, NcclDType) { return NoNccl(); }
bool NcclLink::Done(uint64_t) { return true; }

#endif

}  // namespace paci
