#pragma once

// Reading a Kubernetes object held as JSON without throwing: a missing or
// null key reads as an empty object, a non-string as "".

#include <string>

#include <nlohmann/json.hpp>

namespace paci::op {

inline const nlohmann::json& Field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!object.is_object()) return kEmpty;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? kEmpty : *it;
}

inline std::string StringField(const nlohmann::json& object, const char* key) {
  const nlohmann::json& value = Field(object, key);
  return value.is_string() ? value.get<std::string>() : "";
}

}  // namespace paci::op
