#pragma once

// What the operator reads and writes of Kubernetes objects held as JSON, in
// one place: field access that never throws, object metadata (names, labels,
// finalizers, generation), the names and labels of the objects a TrainingJob
// owns, and RFC 3339 times. Pure functions.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"

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

// Fields. A missing or null key reads as an empty object, a string field
// that is no string as "", an integer field that is no integer as `otherwise`.
const nlohmann::json& Field(const nlohmann::json& object, const char* key);
std::string StringField(const nlohmann::json& object, const char* key);
int64_t IntField(const nlohmann::json& object, const char* key, int64_t otherwise);

// Metadata. MetaString reads metadata.<key> ("name", "namespace", "uid",
// "resourceVersion"); Label reads metadata.labels[label].
std::string MetaString(const nlohmann::json& object, const char* key);
std::string Label(const nlohmann::json& object, const char* label);
// "namespace/name": the key an object goes by in caches and ledgers.
std::string ObjectKey(const nlohmann::json& object);
// metadata.generation; 1 when absent (the first generation).
int64_t Generation(const nlohmann::json& object);
// metadata.deletionTimestamp is set: the object is on its way out.
bool BeingDeleted(const nlohmann::json& object);
bool HasFinalizer(const nlohmann::json& object, const char* finalizer);
// metadata.finalizers with `finalizer` added (once) or taken out.
nlohmann::json FinalizersWith(const nlohmann::json& object, const char* finalizer);
nlohmann::json FinalizersWithout(const nlohmann::json& object, const char* finalizer);

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

// Status conditions (metav1.Condition), as apimeta.SetStatusCondition keeps
// them: status.conditions' entry `type`, or null; setting one keeps its
// lastTransitionTime unless its status changes.
const nlohmann::json* FindCondition(const nlohmann::json& status, const std::string& type);
void SetStatusCondition(nlohmann::json& status, const std::string& type, bool value,
                        const std::string& reason, const std::string& message,
                        int64_t generation, absl::Time now);

// Times. Rfc3339 to the second ("2027-01-15T08:00:00Z"), as .status and
// Events carry them; Rfc3339Micro to the microsecond, a Lease's MicroTime.
std::string Rfc3339(absl::Time time);
std::string Rfc3339Micro(absl::Time time);
// Any RFC 3339 time; false when `text` is none.
bool ParseRfc3339(const std::string& text, absl::Time* time);

}  // namespace paci::op
