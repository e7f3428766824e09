#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paci {

// A YAML document whose top level is a mapping, as JSON text that proto3's
// JSON parser reads: YAML 1.2 core-schema scalars (plain true/false and
// numbers as JSON's; quoted or tagged scalars always strings), null values
// left out. InvalidArgument prefixed with `what` ("spec") and naming the line
// for a syntax error, a top level that is not a mapping, a key that is not a
// plain scalar or a duplicate key (which JSON would silently take the last of).
absl::StatusOr<std::string> YamlMappingToJson(std::string_view text, absl::string_view what);

}  // namespace paci
