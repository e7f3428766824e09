#pragma once

// spec.worker, the small pod template of a TrainingJob (job_objects.h builds
// its pods from it), and what it may say: Pod Security's restricted profile
// for the fields a TrainingJob may set, and none of the volumes, labels,
// annotations or env variables the operator sets itself. Pure functions.

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace paci::op {

// The operator's own volumes in the pods it builds (job_objects.cc) are named
// with this prefix; spec.worker's may not be.
inline constexpr char kReservedVolumePrefix[] = "paci-";

// Checks what the CRD schema cannot: volume names unique and not the
// operator's, every mount naming a volume at an absolute path, no label,
// annotation or env variable the operator sets itself, and every Secret it
// names (a secret or projected volume, a CSI volume's nodePublishSecretRef,
// env[].valueFrom.secretKeyRef, envFrom[].secretRef) one of
// `allowed_secrets` (the operator's --worker_allowed_secrets; none by
// default). InvalidArgument naming the field: "spec.worker.volumeMounts[1].name:
// no volume named "data" in spec.worker.volumes".
absl::Status ValidateWorkerTemplate(const nlohmann::json& worker,
                                    const std::set<std::string>& allowed_secrets = {});

}  // namespace paci::op
