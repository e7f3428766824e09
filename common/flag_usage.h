#pragma once

// What --help prints: the program's usage line and the flags of paci's own
// files, the ones that binary links (Abseil's default shows only the flags of
// a file named like the program, which ours are not, and printed "No flags
// matched."). --helpfull still lists Abseil's own flags too.

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace paci {

inline void SetUsage(const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace paci
