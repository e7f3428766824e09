#pragma once

// pacictl's exit codes, every command's, in one place, and the one mapping of
// a command's result to them.

#include "absl/status/status.h"

namespace paci {

inline constexpr int kExitSucceeded = 0;
inline constexpr int kExitTrainingFailed = 1;  // any other failure, training's or a request's
inline constexpr int kExitUsage = 2;           // bad command line or spec
inline constexpr int kExitInterrupted = 130;   // SIGINT or SIGTERM

// OK is kExitSucceeded, InvalidArgument (a bad command line or spec, a job the
// coordinator refused as invalid) kExitUsage, Cancelled (SIGINT or SIGTERM)
// kExitInterrupted, any other error kExitTrainingFailed.
int ExitCodeOf(const absl::Status& status);

}  // namespace paci
