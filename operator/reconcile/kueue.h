#pragma once

// A TrainingJob queued by Kueue (sigs.k8s.io/kueue, kueue.x-k8s.io/v1beta2):
// the Workload the operator owns for it and how Kueue's answer reads. A job
// labelled kueue.x-k8s.io/queue-name gets one Workload with one pod set of
// P x R pods (the worker pod's requests), so Kueue admits all of its workers
// or none; nothing of the job runs until the Workload is Admitted. When Kueue
// evicts it (preemption by a higher priority, a stopped queue), the operator
// stops the job, and once its pods are gone gives the quota back as Kueue's
// own job integrations do (ReleaseQuota); it runs again, from its last
// checkpoint, when Kueue admits it again. A finished job's Workload is marked
// Finished. Pure functions: no network, no clock.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "operator/api/training_job.h"

namespace paci::op {

// The labels a user puts on a TrainingJob, as on Kubeflow's jobs.
inline constexpr char kQueueNameLabel[] = "kueue.x-k8s.io/queue-name";
inline constexpr char kPriorityClassLabel[] = "kueue.x-k8s.io/priority-class";

// The TrainingJob's kQueueNameLabel; "" when it is not queued.
std::string QueueName(const ObjectMeta& job);
// Its kPriorityClassLabel (a WorkloadPriorityClass); "" for none.
std::string PriorityClassName(const ObjectMeta& job);

// The Workload of a TrainingJob: "<name>-<first 8 of its uid>", so a job
// made again under the same name never takes the old one's. The workload
// slices that replace it as an elastic job grows (WorkloadSlice) are
// "<name>-<first 8 of its uid>-<n>", n = 2, 3, ...
std::string WorkloadName(const ObjectMeta& job);

// The Workload the job has now: the one its status.workload names (a slice
// after it grew), else WorkloadName.
std::string CurrentWorkloadName(const ObjectMeta& job, const std::string& status_workload);

// The name of the slice that would replace Workload `current` of the job.
std::string NextWorkloadName(const ObjectMeta& job, const std::string& current);

// Kueue's elastic workloads (the ElasticJobsViaWorkloadSlices feature, alpha
// in v0.17): a Workload of `job` (owned and labelled as its other objects)
// that replaces `workload` once admitted, asking for
// `workers` pods (no minCount: the whole of the larger shape, or nothing),
// named `name` and annotated kueue.x-k8s.io/workload-slice-replacement-for.
// Kueue admits it when the pods beyond the old slice's fit, and marks the old
// one Finished (reason WorkloadSliceReplaced) as it does.
nlohmann::json WorkloadSlice(const TrainingJob& job, const nlohmann::json& workload,
                             const std::string& name, int workers);

// Whether Kueue finished `workload` because a slice replaced it.
bool ReplacedBySlice(const nlohmann::json& workload);

// Whether `workload` is a slice (WorkloadSlice made it).
bool IsWorkloadSlice(const nlohmann::json& workload);

// The pods a Workload asks for: `most`, and for an elastic job
// (spec.pipeline.elastic) the `fewest` it can run with, its smallest shape's.
struct WorkerCount {
  int most = 1;
  int fewest = 1;
};

// The Workload `name` for `job`: owned by it (garbage-collected with it), labelled
// as its other objects, queued in its LocalQueue, one pod set "workers" of
// `workers.most` pods shaped as `worker_pod`. When `workers.fewest` is fewer,
// the pod set's minCount says so: Kueue's partial admission (the
// PartialAdmission feature, on by default since v0.5) then admits any count
// from it up to the most when the most does not fit, and the job runs at the
// largest shape the admitted count allows. Its priority is the priority
// class' value (`priority_class`, the WorkloadPriorityClass read from the
// cluster) when the job names one, else spec.runPolicy.priority.
nlohmann::json JobWorkload(const TrainingJob& job, const std::string& name, WorkerCount workers,
                           const nlohmann::json& worker_pod,
                           const std::optional<nlohmann::json>& priority_class);

// Where Kueue has the Workload.
struct Admission {
  enum State {
    kPending,   // waiting for quota (or for a LocalQueue that does not exist)
    kAdmitted,  // quota reserved and every admission check passed: it may run
    kEvicted,   // evicted while admitted: stop it, then ReleaseQuota
    kFinished,  // marked Finished (by MarkFinished)
    kReplaced,  // Finished as a slice that replaces it is admitted (Kueue
                // finishes the old slice just before it admits the new one)
  };
  State state = kPending;
  // Kueue's reason and message: QuotaReserved's while pending ("Pending",
  // "Inadmissible"), Evicted's when evicted ("Preempted", ...).
  std::string reason;
  std::string message;
  std::string cluster_queue;  // status.admission.clusterQueue once admitted
  // When it was finished or replaced (the Finished condition's
  // lastTransitionTime); InfinitePast otherwise or when unknown.
  absl::Time since = absl::InfinitePast();
  // The pods of "workers" Kueue admitted (status.admission.podSetAssignments'
  // count, kept once Finished); nullopt when it gave none (all of the pod
  // set's count).
  std::optional<int> admitted_workers;
};
Admission ReadAdmission(const nlohmann::json& workload);

// What the owner of an evicted Workload writes once its pods are gone (as
// Kueue's job framework does): no admission, QuotaReserved and Admitted
// False, Requeued True for a preemption (Kueue queues it again at once),
// False with the eviction's reason otherwise. Applied to the newest copy of
// the Workload, for a PUT of its status.
void ReleaseQuota(nlohmann::json& workload, absl::Time now);

// The job ended: condition Finished True with `reason` (Succeeded, Failed,
// Cancelled) and `message`; Kueue frees its quota.
void MarkFinished(nlohmann::json& workload, const std::string& reason, const std::string& message,
                  absl::Time now);

}  // namespace paci::op
