#include "worker/runtime/nccl_placement.h"

#include <string>

#include "absl/strings/match.h"
#include "common/job_spec.h"
#include "common/net_address.h"

namespace paci {
namespace {

// The stage's device, a bare "cuda" spelled out as the GPU it means.
std::string GpuOf(const v1::StageAssignment& assignment, int stage) {
  const std::string device = StageDevice(assignment.spec(), stage, assignment.replica());
  return device == "cuda" ? std::string("cuda:0") : device;
}

}  // namespace

bool NcclWithPeer(const v1::StageAssignment& assignment, int peer) {
  const int stage = assignment.stage();
  const int P = assignment.spec().pipeline().num_stages();
  if (peer < 0 || peer >= P || peer >= assignment.stage_addresses_size() ||
      stage >= assignment.stage_addresses_size()) {
    return false;
  }
  const std::string mine = GpuOf(assignment, stage), theirs = GpuOf(assignment, peer);
  return absl::StartsWith(mine, "cuda") && absl::StartsWith(theirs, "cuda") && mine != theirs &&
         HostOfAddress(assignment.stage_addresses(stage)) ==
             HostOfAddress(assignment.stage_addresses(peer));
}

}  // namespace paci
