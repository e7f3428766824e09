#pragma once

// spec.worker, the small pod template of a TrainingJob (job_objects.h builds
// its pods from it), and what it may say: Pod Security's restricted profile
// for the fields a TrainingJob may set, and none of the volumes, labels,
// annotations or env variables the operator sets itself. Pure functions.

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace paci::op {

// The operator's own volumes in the pods it builds (job_objects.cc) are named
// with this prefix; spec.worker's may not be.
inline constexpr char kReservedVolumePrefix[] = "paci-";

// Checks what the CRD schema cannot: volume names unique and not the
// operator's, every mount naming a volume at an absolute path, no label,
// annotation or env variable the operator sets itself. InvalidArgument naming
// the field: "spec.worker.volumeMounts[1].name: no volume named "data" in
// spec.worker.volumes".
absl::Status ValidateWorkerTemplate(const nlohmann::json& worker);

}  // namespace paci::op
