#include "tools/exit_codes.h"

namespace paci {

int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitSucceeded;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kCancelled:
      return kExitInterrupted;
    default:
      return kExitTrainingFailed;
  }
}

}  // namespace paci
