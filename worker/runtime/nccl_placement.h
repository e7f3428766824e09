#pragma once

#include "paci/v1/coordinator.pb.h"

namespace paci {

// The NCCL placement policy: whether the assigned stage and its neighbouring
// stage `peer` exchange tensors over NCCL rather than through the host. They
// do when both run on CUDA devices, not on the same one (NCCL refuses two
// ranks on one GPU), and on one machine: their link addresses in the
// assignment name the same host. A bare "cuda" is cuda:0. False when `peer`
// is not a stage of the job.
bool NcclWithPeer(const v1::StageAssignment& assignment, int peer);

}  // namespace paci
