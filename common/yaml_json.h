#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace paci {

// A YAML document whose top level is a mapping, as JSON text that proto3's
// JSON parser reads: YAML 1.2 core-schema scalars (plain true/false and
// numbers as JSON's; quoted or tagged scalars always strings), null values
// left out. InvalidArgument prefixed with `what` ("spec") and naming the line
// for a syntax error, a top level that is not a mapping, a key that is not a
// plain scalar or a duplicate key (which JSON would silently take the last of).
absl::StatusOr<std::string> YamlMappingToJson(std::string_view text, absl::string_view what);

// Any parsed YAML node as JSON text by the same rules, except that null
// values are kept (as null): a value passed on whole, such as a kubeconfig's
// exec-plugin extension (kube/kubeconfig.cc). The same InvalidArgument for a
// key that is not a plain scalar or a duplicate key.
absl::StatusOr<std::string> YamlNodeToJson(const YAML::Node& node, absl::string_view what);

}  // namespace paci
