#pragma once

// The TrainingJob reconcile as a pure function: (the object, what exists in
// the cluster, what the coordinator says) -> the actions that move the world
// towards the object's spec. No network, no clock: the caller observes, calls
// ReconcileTrainingJob, and carries the actions out (ActionExecutor). Every
// decision is made here, the caller decides nothing.
// Level-based: the same inputs give the same actions, so running it again
// after a crash or a dropped event is always safe.
//
// One answer matters within a reconcile: the coordinator's to a submit. So
// when the actions ask for one, the caller carries out the changes before it
// (pods, Service, ...), submits, and calls ReconcileTrainingJob again on the
// same world with the answer in ObservedWorld::submit_result; that second
// call asks for no submit, and the status, Events and requeue it gives are
// what the answer calls for (a refused job is Failed). Its changes are those
// of the first call, already made.
//
// What is submitted and how the coordinator's answer reads in .status
// (JobSpecFromTrainingJob, CoordinatorJobName, ...) is coordinator_view.h,
// included here for the callers.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/peer_identity.h"
#include "operator/reconcile/coordinator_view.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "paci/v1/coordinator.pb.h"
#include "paci/v1/job.pb.h"

namespace paci::op {

// The finalizer the operator puts on every TrainingJob, so deleting one
// cancels its job at the coordinator first.
inline constexpr char kFinalizer[] = "paci.dev/cancel-at-coordinator";
// The user and group worker pods run as by default (the images' "paci").
inline constexpr int kWorkerUid = 65532;

struct ReconcilerOptions {
  // host:port of the coordinator, as the worker pods reach it.
  std::string worker_coordinator_address = "paci-coordinator.paci-system.svc:7070";
  // Image of worker pods whose TrainingJob names none: the CUDA worker's when
  // its spec.runtime puts any stage on a GPU (device or stageDevices cuda...).
  std::string default_worker_image = "paci-worker:latest";
  std::string default_worker_cuda_image = "paci-worker-cuda:latest";
  std::string worker_command = "paci_worker";
  std::string dataset_command = "pacictl";  // the dataset initializer's, in the worker image
  int link_port = 7000;     // the stage link each worker pod serves
  int metrics_port = 9100;  // its /metrics
  // Extra arguments for every worker.
  std::vector<std::string> extra_worker_args;
  // A Secret in the job's namespace mounted into every worker pod (at
  // kWorkerSecretPath), and for each of its keys the worker flag given that
  // file: e.g. {"ca.crt", "coordinator_tls_ca"} passes --coordinator_tls_ca=<path>/ca.crt.
  std::string worker_secret;
  std::vector<std::pair<std::string, std::string>> worker_secret_flags;
  // The stage links between a job's worker pods are mutual TLS with the
  // worker Secret's ca.crt, tls.crt and tls.key; each end checks the other's
  // certificate for the DNS name WorkerLinkServerName(namespace), which every
  // worker certificate of that namespace carries. Needs worker_secret.
  bool worker_link_tls = false;
  // The key each job's worker token is derived from (common/job_token.h):
  // with one, every job gets a token Secret its worker pods mount, and its
  // workers must present that token to be placed on it. Empty: no tokens.
  std::string worker_token_key;
  // A NetworkPolicy per job (WorkerNetworkPolicy): its worker pods take
  // connections only from each other, and metrics scrapes.
  bool network_policies = true;
  // How often a running job's progress is read from the coordinator.
  absl::Duration poll_interval = absl::Seconds(2);
  // Kueue runs on the cluster: a job labelled kueue.x-k8s.io/queue-name runs
  // only once its Workload is admitted (kueue.h). Without it the label is
  // not looked at.
  bool kueue = false;
  // Kueue runs with its elastic workloads (the ElasticJobsViaWorkloadSlices
  // feature gate): an elastic job Kueue admitted in part asks for its
  // largest shape again with a workload slice (kueue.h, WorkloadSlice), and
  // grows once Kueue admits it. Without the gate Kueue would take the slice
  // for a Workload of its own, so this is off unless the cluster says so.
  bool kueue_workload_slices = false;
  // The Secrets a TrainingJob's spec.worker may name (in volumes, env and
  // envFrom): ValidateWorkerTemplate refuses any other. Never the operator's
  // own (its worker Secret, a job's token): the operator refuses to start so.
  std::set<std::string> worker_allowed_secrets;
  // Namespaces no TrainingJob may run in: the release's own, which holds its
  // CA, the operator's client certificate and the worker-token key. A
  // TrainingJob there fails (InvalidSpec naming metadata.namespace) before
  // anything is made for it.
  std::set<std::string> reserved_namespaces;
  // The highest spec.runPolicy.priority a TrainingJob may ask for: a higher
  // one fails it (InvalidSpec naming the field), since the coordinator takes
  // any priority from the operator and runs the highest first. 1000, the
  // field's own limit, bounds nothing; the operator's --max_priority is 0 by
  // default.
  int max_priority = 1000;
};

// A running job's new run policy, for the coordinator's UpdateRunPolicy.
struct RunPolicyUpdate {
  std::string coordinator_job;
  v1::RunPolicy policy;
};

// A write of the status of the job's Workload (kueue.h): the quota given
// back after an eviction (ReleaseQuota), or the job's end (MarkFinished).
struct WorkloadStatusEdit {
  bool release_quota = false;
  std::string reason;  // MarkFinished's
  std::string message;
};

struct KubeEvent {
  std::string type;  // "Normal" or "Warning"
  std::string reason;
  std::string message;
};

// In the order they are carried out: the changes, the submit, the report.
struct ReconcileActions {
  // Changes.
  bool add_finalizer = false;
  std::optional<std::string> cancel;  // CancelJob of this coordinator job
  // spec.runPolicy changed while the job runs: the coordinator's copy follows.
  std::optional<RunPolicyUpdate> update_run_policy;
  std::vector<std::string> delete_pods;
  std::optional<nlohmann::json> create_service;
  std::optional<nlohmann::json> create_network_policy;
  // The job's worker token Secret (WorkerTokenSecret), made with its pods.
  std::optional<nlohmann::json> create_token_secret;
  std::vector<nlohmann::json> create_pods;
  // Worker pods released from the gang gate (gang.h): each pod's name and
  // the spec.schedulingGates it keeps.
  std::vector<std::pair<std::string, nlohmann::json>> release_pods;
  // The job's Workload (kueue.h): made, deleted, or its status written.
  std::optional<nlohmann::json> create_workload;  // the Workload, or a slice to replace it
  bool delete_workload = false;
  bool delete_workload_slice = false;  // the slice that has not replaced it yet
  std::optional<WorkloadStatusEdit> workload_status;
  // SubmitJob (idempotent by spec.name); its answer goes back in
  // ObservedWorld::submit_result (see the top of this file).
  std::optional<v1::JobSpec> submit;
  // Its labels: kNamespaceLabel, the TrainingJob's namespace (a tenant's
  // certificate opens the jobs of its namespace: common/peer_identity.h).
  std::map<std::string, std::string> submit_labels;
  // The report.
  std::vector<KubeEvent> events;
  // The whole desired .status, when it differs from the object's.
  std::optional<nlohmann::json> status;
  // Not OK when a step could not be taken for now (the coordinator could not
  // take a submit): the status is written, then the reconcile is retried
  // with backoff and what follows here is left for then.
  absl::Status retry_error;
  bool remove_finalizer = false;
  bool delete_job = false;  // ttlSecondsAfterFinished has passed
  std::optional<absl::Duration> requeue_after;
};

struct ObservedWorld {
  nlohmann::json job;                // the TrainingJob as last read
  std::vector<nlohmann::json> pods;  // pods labelled with the job's name
  bool service_exists = false;
  bool network_policy_exists = false;
  // The coordinator's job named by status.coordinatorJob; nullopt when the
  // status names none, or the coordinator does not know it.
  std::optional<v1::Job> coordinator_job;
  absl::Time now;
  // While the dataset initializer's pod runs: the last line of its output
  // (prepare-data's progress), when the caller could read it.
  std::optional<std::string> dataset_progress;
  // While a worker pod of the job waits at the gang gate (gang.h): every Node
  // and every unfinished pod of the cluster, for PlanGang. Empty otherwise.
  std::vector<nlohmann::json> nodes;
  std::vector<nlohmann::json> cluster_pods;
  // With ReconcilerOptions::kueue: the job's Workload (WorkloadName), and the
  // WorkloadPriorityClass its label names while it has no Workload yet;
  // nullopt when there is none.
  std::optional<nlohmann::json> workload;
  std::optional<nlohmann::json> priority_class;
  // The workload slice that would replace the Workload (NextWorkloadName),
  // when there is one.
  std::optional<nlohmann::json> workload_slice;
  // The coordinator's answer to the submit the reconcile of this same world
  // asked for; nullopt until the caller calls again with it.
  std::optional<absl::Status> submit_result;
};

ReconcileActions ReconcileTrainingJob(const ObservedWorld& world, const ReconcilerOptions& options);

// Whether the reconcile of `job` reads the loss history of its coordinator
// job (a run of its parity check is compared by its validation curve): the
// caller observes the coordinator's job with it then, and without otherwise.
bool ReadsLossHistory(const TrainingJob& job);

}  // namespace paci::op
