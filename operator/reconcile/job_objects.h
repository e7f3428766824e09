#pragma once

// The Kubernetes objects a TrainingJob owns: one worker pod per stage and the
// headless Service that names them. spec.worker is a small pod template (what
// Kubeflow users put in theirs: volumes and mounts, env and envFrom, labels and
// annotations, scheduling, pull secrets, security contexts); the operator's
// own parts of the pod (its labels, the worker's arguments and downward-API
// env, the restricted security defaults) are merged with it here. Pure
// functions: no network, no clock.

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "operator/reconcile/object_meta.h"

namespace paci::op {

struct ReconcilerOptions;

// Checks what the CRD schema cannot: volume names unique and not the
// operator's, every mount naming a volume at an absolute path, no label,
// annotation or env variable the operator sets itself. InvalidArgument naming
// the field: "spec.worker.volumeMounts[1].name: no volume named "data" in
// spec.worker.volumes".
absl::Status ValidateWorkerTemplate(const nlohmann::json& worker);

// The pod of stage `index`. Meets the `restricted` Pod Security level unless
// spec.worker overrides a security default: non-root uid 65532 with fsGroup
// 65532 (so claims and emptyDirs are writable), seccomp RuntimeDefault, no
// privilege escalation, all capabilities dropped, a read-only root file
// system with an emptyDir at /tmp. With options.worker_secret, that Secret is
// mounted at kWorkerSecretPath for the worker's TLS and token flags.
nlohmann::json WorkerPod(const nlohmann::json& job, int index, const ReconcilerOptions& options);

// The headless Service (WorkerServiceName) selecting the job's pods.
nlohmann::json WorkerService(const nlohmann::json& job, const ReconcilerOptions& options);

// The NetworkPolicy (named as the Service) that fences the job's pods: they
// take connections from each other on any port (stage links, the replicas'
// store and Gloo) and on the metrics port from anyone; nothing else reaches
// them where the network plugin enforces policies.
nlohmann::json WorkerNetworkPolicy(const nlohmann::json& job, const ReconcilerOptions& options);

// Where the worker Secret is mounted in worker pods.
inline constexpr char kWorkerSecretPath[] = "/etc/paci/coordinator";

}  // namespace paci::op
