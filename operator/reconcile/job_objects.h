#pragma once

// The Kubernetes objects a TrainingJob owns: one worker pod per stage and the
// headless Service that names them. spec.worker is a small pod template (what
// Kubeflow users put in theirs: volumes and mounts, env and envFrom, labels and
// annotations, scheduling, pull secrets, security contexts); the operator's
// own parts of the pod (its labels, the worker's arguments and downward-API
// env, the restricted security defaults) are merged with it here. The
// template is checked first by ValidateWorkerTemplate (worker_template.h,
// included here for the callers). Pure functions: no network, no clock.

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/api/worker_template.h"

namespace paci::op {

struct ReconcilerOptions;

// The pod of stage `index`. Meets the `restricted` Pod Security level unless
// spec.worker overrides a security default: non-root uid 65532 with fsGroup
// 65532 (so claims and emptyDirs are writable), seccomp RuntimeDefault, no
// privilege escalation, all capabilities dropped, a read-only root file
// system with an emptyDir at /tmp. With options.worker_secret, that Secret is
// mounted at kWorkerSecretPath for the worker's TLS and token flags. Behind
// the gang gate (gang.h) unless the job is elastic (spec.pipeline.elastic).
nlohmann::json WorkerPod(const TrainingJob& job, int index, const ReconcilerOptions& options);

// The dataset initializer's pod (DatasetPodName): `pacictl prepare-data` of
// spec.initializer.dataset's source into spec.data.dataset with --reuse (a
// finished dataset of the same request is kept), in the worker's image with
// its volumes, resources and security, run once (restartPolicy Never); its
// closing line or error is its termination message. Annotated with the
// job's generation (kGenerationAnnotation).
nlohmann::json DatasetPod(const TrainingJob& job, const ReconcilerOptions& options);

// The Secret (WorkerTokenSecretName) holding the job's worker token,
// JobToken(options.worker_token_key, the job's uid), under the key "token";
// only the job's worker pods mount it, at kJobTokenPath.
nlohmann::json WorkerTokenSecret(const TrainingJob& job, const ReconcilerOptions& options);

// The headless Service (WorkerServiceName) selecting the job's pods.
nlohmann::json WorkerService(const TrainingJob& job, const ReconcilerOptions& options);

// The NetworkPolicy (named as the Service) that fences the job's pods: they
// take connections from each other on any port (stage links, the replicas'
// store and Gloo) and on the metrics port from anyone; nothing else reaches
// them where the network plugin enforces policies.
nlohmann::json WorkerNetworkPolicy(const TrainingJob& job, const ReconcilerOptions& options);

// The metadata of an object the job owns besides its pods (its Service,
// NetworkPolicy, Workload): `name`, the job's namespace, the labels the owned
// informers select by (WorkerLabels), the job as its controlling owner.
nlohmann::json OwnedMetadata(const ObjectMeta& job, const std::string& name);

// Where the dataset pod writes its termination message.
inline constexpr char kTerminationMessagePath[] = "/dev/termination-log";

// Where the worker Secret is mounted in worker pods.
inline constexpr char kWorkerSecretPath[] = "/etc/paci/coordinator";
// The DNS name the workers of `ns` carry in their certificate and check each
// other's for on the stage links (ReconcilerOptions::worker_link_tls):
// "paci-worker.<namespace>".
std::string WorkerLinkServerName(const std::string& ns);

// Where a worker pod's job token Secret is mounted (--job_token_file=<it>/token).
inline constexpr char kJobTokenPath[] = "/etc/paci/job-token";

}  // namespace paci::op
