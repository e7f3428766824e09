#pragma once

// The TrainingJob's API as the operator and its clients (pacictl) share it:
// the resource as one type (metadata, spec, status), read from its JSON once
// at the edge (ParseTrainingJob) and its status written back once
// (StatusJson); the labels and names of the objects a job owns and the
// phases of its status. Nothing else reads a TrainingJob's JSON: the
// reconciler, its steps and pacictl work on these types. Pure: no I/O.
//
// What the JobSpec proto holds (spec.model ... spec.runtime) is read through
// the proto3 JSON mapping into v1::JobSpec; the Kubernetes-only parts
// (runPolicy, worker, initializer, parity) and the status are the structs
// below. Fields this version does not know are kept: StatusJson writes the
// status's unknown fields back as they were read, so a newer CRD loses
// nothing when an older operator writes status.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kube/object.h"
#include "paci/v1/job.pb.h"

namespace paci::op {

// Labels on the pods and Service of a job.
inline constexpr char kJobNameLabel[] = "paci.dev/job-name";
inline constexpr char kRoleLabel[] = "paci.dev/role";
inline constexpr char kWorkerIndexLabel[] = "paci.dev/worker-index";
// kRoleLabel's values: a worker pod's, the dataset initializer's.
inline constexpr char kWorkerRole[] = "worker";
inline constexpr char kDatasetRole[] = "dataset";
// On the dataset initializer's pod: the generation of the TrainingJob it was
// made for.
inline constexpr char kGenerationAnnotation[] = "paci.dev/generation";

// The objects a TrainingJob named `job_name` owns: the headless Service
// "<name>-workers" and the pods "<name>-worker-<index>" it names, each
// labelled with the job's name and the role "worker"; the dataset
// initializer's pod "<name>-dataset" (role "dataset").
std::string WorkerServiceName(const std::string& job_name);
std::string WorkerPodName(const std::string& job_name, int index);
std::string DatasetPodName(const std::string& job_name);
// The Secret holding the job's worker token (common/job_token.h), mounted
// into its worker pods only: "<name>-worker-token".
inline constexpr char kWorkerTokenSecretSuffix[] = "-worker-token";
std::string WorkerTokenSecretName(const std::string& job_name);
nlohmann::json WorkerLabels(const std::string& job_name);

// The phases of .status.
inline constexpr char kPhaseInitializing[] = "Initializing";
inline constexpr char kPhasePending[] = "Pending";
inline constexpr char kPhaseSuspended[] = "Suspended";
inline constexpr char kPhaseRunning[] = "Running";
inline constexpr char kPhaseRestarting[] = "Restarting";
inline constexpr char kPhaseSucceeded[] = "Succeeded";
inline constexpr char kPhaseFailed[] = "Failed";
inline constexpr char kPhaseCancelled[] = "Cancelled";

// Whether `phase` is one a job ends in: Succeeded, Failed or Cancelled.
bool IsFinished(const std::string& phase);

// ---- The resource ----------------------------------------------------------

// metadata, as far as the operator reads it.
struct ObjectMeta {
  std::string name;
  std::string namespace_name;  // metadata.namespace
  std::string uid;
  std::string resource_version;
  std::string creation_timestamp;
  int64_t generation = 1;       // 1 when absent (the first generation)
  bool being_deleted = false;   // metadata.deletionTimestamp is set
  std::vector<std::string> finalizers;
  std::map<std::string, std::string> labels;

  bool HasFinalizer(const std::string& finalizer) const;
  // labels[key], or "".
  std::string Label(const std::string& key) const;
  // "namespace/name".
  std::string Key() const;
};

// spec.runPolicy.
struct RunPolicySpec {
  bool suspend = false;
  std::optional<int32_t> backoff_limit;  // absent: the coordinator's default
  int64_t active_deadline_seconds = 0;
  int32_t priority = 0;
  std::optional<int64_t> ttl_seconds_after_finished;
};

// spec.worker: a small pod template. What the operator reads of it is typed;
// the Kubernetes core/v1 parts it copies into the pods it builds are kept as
// they were written (the API server has checked them against the CRD's
// schema), and checked by ValidateWorkerTemplate (worker_template.h).
struct WorkerTemplate {
  std::string image;  // "" for the operator's default
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // /dev/shm's size (a quantity), when given.
  std::optional<nlohmann::json> shm_size;
  // core/v1 lists and objects: env and volumes arrays (empty when absent),
  // the security contexts (null when absent).
  nlohmann::json env = nlohmann::json::array();
  nlohmann::json volumes = nlohmann::json::array();
  nlohmann::json volume_mounts = nlohmann::json::array();
  nlohmann::json security_context;
  nlohmann::json pod_security_context;
  // Copied into the container as they are (imagePullPolicy, resources,
  // envFrom), and into the pod's spec (nodeSelector, tolerations, affinity,
  // serviceAccountName, priorityClassName, schedulerName, imagePullSecrets,
  // runtimeClassName): those that were given.
  nlohmann::json container_fields = nlohmann::json::object();
  nlohmann::json pod_fields = nlohmann::json::object();
  // spec.worker as written, for ValidateWorkerTemplate.
  nlohmann::json object = nlohmann::json::object();
};

// spec.initializer.dataset: prepare spec.data.dataset before training.
struct DatasetInitializerSpec {
  std::vector<std::string> source;
  std::string tokenizer;
  std::string tokenizer_model;
  std::string tokenizer_json;
  std::string text_field;
  int64_t vocab_size = 0;
  int64_t shard_tokens = 0;
  bool skip_bad_lines = false;
};

// spec.parity: the loss-parity check (operator/reconcile/parity_step.h).
struct ParitySpec {
  std::vector<int> seeds;  // common/parity.h's defaults when absent
  int64_t steps = 0;       // 0: spec.training.steps
};

struct TrainingJobSpec {
  // spec.model ... spec.runtime as written (no defaults), or InvalidArgument
  // "spec: ..." naming what the proto3 JSON mapping refused.
  absl::StatusOr<v1::JobSpec> job = v1::JobSpec();
  RunPolicySpec run_policy;
  WorkerTemplate worker;
  std::optional<DatasetInitializerSpec> dataset;  // spec.initializer.dataset
  std::optional<ParitySpec> parity;
  // What the schema would have refused in the initializer or the parity
  // check (an object written before the schema had the field):
  // InvalidArgument naming the field; OK otherwise.
  absl::Status initializer_error;
  absl::Status parity_error;
};

// status.stages[].
struct StageStatus {
  int64_t stage = 0;
  int64_t replica = 0;
  std::string pod;  // "" before its worker joined
  int64_t max_drift = 0;
  int64_t drift_bound = 0;
  std::optional<double> idle_fraction;
  std::optional<double> tokens_per_second;
};

// status.parity.runs[].curve[].
struct LossPointStatus {
  int64_t step = 0;
  std::optional<double> seconds;
  std::optional<double> loss;
};

// status.parity.runs[]: a finished run of the parity check.
struct ParityRunStatus {
  int64_t seed = 0;
  std::string role;  // common/parity.h's kParityJobRole or kParityFlushRole
  std::string coordinator_job;
  std::string schedule;
  int64_t num_stages = 0;
  int64_t steps = 0;
  int64_t global_batch = 0;
  std::string drift_correction;
  int64_t warmup_steps = 0;
  std::optional<double> tokens_per_second;
  std::optional<double> validation_loss;
  std::vector<LossPointStatus> curve;
};

// status.parity.seeds[]: the report for one seed.
struct ParitySeedStatus {
  int64_t seed = 0;
  double gap_percent = 0;
  double validation_loss = 0;
  double flush_validation_loss = 0;
  std::optional<double> speedup_to_75;
  std::optional<double> speedup_to_final;
};

// status.parity.
struct ParityStatus {
  std::optional<int64_t> run;  // the run under way, from 1
  std::optional<int64_t> total_runs;
  std::string spec_digest;
  std::optional<std::vector<ParityRunStatus>> runs;
  // The report, once every run ended.
  std::optional<std::vector<ParitySeedStatus>> seeds;
  std::optional<double> mean_gap_percent;
  std::optional<double> gap_spread_percent;
  std::optional<double> flush_loss_spread;
  std::optional<double> throughput_ratio;
  std::optional<double> speedup_to_75;
  std::optional<double> speedup_to_final;
  std::string summary;
};

// .status. A string that is "" and a number that is nullopt are absent.
struct TrainingJobStatus {
  std::string phase;
  std::string message;
  std::string coordinator_job;
  std::string workload;
  std::string start_time;  // RFC 3339
  std::string completion_time;
  std::string drift_correction;
  std::string shape;  // an elastic job's: "3 stages x 1 replica"
  std::optional<int64_t> observed_generation;
  std::optional<int64_t> attempt;
  std::optional<int64_t> step;
  std::optional<int64_t> total_steps;
  std::optional<int64_t> restarts;
  std::optional<int64_t> checkpoint_step;
  std::optional<int64_t> evictions;
  std::optional<int64_t> max_drift;
  std::optional<int64_t> drift_limit;
  std::optional<int64_t> accumulation;
  std::optional<int64_t> global_batch;
  std::optional<int64_t> warmup_steps;
  std::optional<int64_t> resizes;  // an elastic job's changes of shape
  std::optional<double> train_loss;
  std::optional<double> validation_loss;
  std::optional<int64_t> tokens_per_second;  // whole tokens, as kubectl's column prints it
  std::vector<kube::Condition> conditions;
  std::optional<std::vector<StageStatus>> stages;
  std::optional<ParityStatus> parity;
  // The fields of .status this version does not know, as they were read.
  nlohmann::json unknown = nlohmann::json::object();

  // The condition of `type`, or nullptr.
  const kube::Condition* FindCondition(const std::string& type) const;
};

struct TrainingJob {
  ObjectMeta metadata;
  TrainingJobSpec spec;
  TrainingJobStatus status;
};

// Reads a TrainingJob object. Never fails: what the operator must report
// (a spec that cannot run) is kept in the spec's statuses, so the job can be
// failed naming the field; a status field of the wrong type reads as absent.
TrainingJob ParseTrainingJob(const nlohmann::json& object);
// Its parts alone, where the rest is not needed (the spec's proto costs the
// most to read): metadata, and .status.
ObjectMeta ParseObjectMeta(const nlohmann::json& object);
TrainingJobStatus ParseTrainingJobStatus(const nlohmann::json& object);

// The status as the API server takes it: the typed fields that are set, over
// the unknown ones.
nlohmann::json StatusJson(const TrainingJobStatus& status);

}  // namespace paci::op
