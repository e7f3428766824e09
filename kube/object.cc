#include "kube/object.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace paci::kube {

using nlohmann::json;

std::string ObjectKey(const json& object) {
  return absl::StrCat(MetaString(object, "namespace"), "/", MetaString(object, "name"));
}

const json& Field(const json& object, const char* key) {
  static const json* const kEmpty = new json(json::object());
  if (!object.is_object()) return *kEmpty;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? *kEmpty : *it;
}

std::string StringField(const json& object, const char* key) {
  const json& value = Field(object, key);
  return value.is_string() ? value.get<std::string>() : "";
}

int64_t IntField(const json& object, const char* key, int64_t otherwise) {
  const json& value = Field(object, key);
  return value.is_number_integer() ? value.get<int64_t>() : otherwise;
}

std::optional<double> NumberField(const json& object, const char* key) {
  const json& value = Field(object, key);
  if (!value.is_number()) return std::nullopt;
  return value.get<double>();
}

std::optional<int64_t> OptionalIntField(const json& object, const char* key) {
  const json& value = Field(object, key);
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float() && std::isfinite(value.get<double>())) {
    return std::llround(value.get<double>());
  }
  return std::nullopt;
}

std::string MetaString(const json& object, const char* key) {
  return StringField(Field(object, "metadata"), key);
}

std::string Label(const json& object, const char* label) {
  return StringField(Field(Field(object, "metadata"), "labels"), label);
}

int64_t Generation(const json& object) { return IntField(Field(object, "metadata"), "generation", 1); }

bool BeingDeleted(const json& object) {
  return Field(Field(object, "metadata"), "deletionTimestamp").is_string();
}

bool HasFinalizer(const json& object, const char* finalizer) {
  const json& finalizers = Field(Field(object, "metadata"), "finalizers");
  if (!finalizers.is_array()) return false;
  return std::find(finalizers.begin(), finalizers.end(), json(finalizer)) != finalizers.end();
}

json FinalizersWith(const json& object, const char* finalizer) {
  json finalizers = FinalizersWithout(object, finalizer);
  finalizers.push_back(finalizer);
  return finalizers;
}

json FinalizersWithout(const json& object, const char* finalizer) {
  json finalizers = json::array();
  const json& current = Field(Field(object, "metadata"), "finalizers");
  if (!current.is_array()) return finalizers;
  for (const json& f : current) {
    if (f != finalizer) finalizers.push_back(f);
  }
  return finalizers;
}

std::string Rfc3339(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

std::string Rfc3339Micro(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time, absl::UTCTimeZone());
}

bool ParseRfc3339(const std::string& text, absl::Time* time) {
  std::string error;
  return absl::ParseTime(absl::RFC3339_full, text, time, &error);
}

const json* FindCondition(const json& status, const std::string& type) {
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const json& condition : conditions) {
    if (StringField(condition, "type") == type) return &condition;
  }
  return nullptr;
}

std::vector<Condition> ParseConditions(const json& conditions) {
  std::vector<Condition> parsed;
  if (!conditions.is_array()) return parsed;
  for (const json& c : conditions) {
    if (!c.is_object() || StringField(c, "type").empty()) continue;
    parsed.push_back({StringField(c, "type"), StringField(c, "status"), StringField(c, "reason"),
                      StringField(c, "message"), StringField(c, "lastTransitionTime"),
                      IntField(c, "observedGeneration", 0)});
  }
  return parsed;
}

json ConditionsJson(const std::vector<Condition>& conditions) {
  json written = json::array();
  for (const Condition& c : conditions) {
    json entry = {{"type", c.type}, {"status", c.status}, {"reason", c.reason},
                  {"message", c.message}};
    if (!c.last_transition_time.empty()) entry["lastTransitionTime"] = c.last_transition_time;
    if (c.observed_generation != 0) entry["observedGeneration"] = c.observed_generation;
    written.push_back(std::move(entry));
  }
  return written;
}

void SetCondition(std::vector<Condition>& conditions, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, int64_t generation,
                  absl::Time now) {
  const std::string truth = value ? "True" : "False";
  auto found = std::find_if(conditions.begin(), conditions.end(),
                            [&](const Condition& c) { return c.type == type; });
  if (found == conditions.end()) {
    conditions.push_back({type, "", "", "", "", 0});
    found = conditions.end() - 1;
  }
  if (found->status != truth) found->last_transition_time = Rfc3339(now);
  found->status = truth;
  found->reason = reason;
  found->message = message;
  found->observed_generation = generation;
}

void SetStatusCondition(json& status, const std::string& type, bool value,
                        const std::string& reason, const std::string& message,
                        int64_t generation, absl::Time now) {
  std::vector<Condition> conditions = ParseConditions(Field(status, "conditions"));
  SetCondition(conditions, type, value, reason, message, generation, now);
  status["conditions"] = ConditionsJson(conditions);
}

}  // namespace paci::kube
