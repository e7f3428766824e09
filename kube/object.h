#pragma once

// Kubernetes objects held as JSON, read and written in one place: field
// access that never throws, object metadata (names, labels, finalizers,
// generation), status conditions and RFC 3339 times. Pure functions; what a
// paci object means (its labels, the names of what a TrainingJob owns) is the
// operator's API (operator/api/training_job.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"

namespace paci::kube {

// Fields. A missing or null key reads as an empty object, a string field
// that is no string as "", an integer field that is no integer as `otherwise`.
const nlohmann::json& Field(const nlohmann::json& object, const char* key);
std::string StringField(const nlohmann::json& object, const char* key);
int64_t IntField(const nlohmann::json& object, const char* key, int64_t otherwise);
// nullopt where the key holds no number. OptionalIntField reads a number
// written with a fraction rounded (a float where the schema has integers).
std::optional<double> NumberField(const nlohmann::json& object, const char* key);
std::optional<int64_t> OptionalIntField(const nlohmann::json& object, const char* key);

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

// Status conditions (metav1.Condition), as apimeta.SetStatusCondition keeps
// them: setting one keeps its lastTransitionTime unless its status changes.
struct Condition {
  std::string type;
  std::string status;  // "True", "False" or "Unknown"
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339; "" when absent
  int64_t observed_generation = 0;   // 0 when absent
};
// A status's conditions array (entries that are no object, or have no type,
// are left out), and back.
std::vector<Condition> ParseConditions(const nlohmann::json& conditions);
nlohmann::json ConditionsJson(const std::vector<Condition>& conditions);
void SetCondition(std::vector<Condition>& conditions, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, int64_t generation,
                  absl::Time now);
// The same on an object's JSON status (a Workload's): status.conditions'
// entry `type`, or null; SetCondition on status.conditions.
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

}  // namespace paci::kube
