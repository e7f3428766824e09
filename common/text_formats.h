#pragma once

// Small text formats every binary reads or writes, each written once:
// "K=V,K=V" lists on command lines, and JSON string literals.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paci {

// "k=v,k2=v2" as (key, value) pairs in order; empty items are skipped, a
// value may be empty and may hold '='. InvalidArgument naming `what` (a flag,
// "--labels") and the item when an item has no '=' or an empty key.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseKeyValues(
    absl::string_view text, absl::string_view what);

// `s` as a JSON string literal, quotes included: '"', '\\' and the control
// characters escaped, other bytes (UTF-8) as they are.
void AppendJsonString(absl::string_view s, std::string* out);
std::string JsonString(absl::string_view s);

}  // namespace paci
