#include "tools/exit_codes.h"

#include <gtest/gtest.h>

namespace paci {
namespace {

TEST(ExitCodeOfTest, MapsEachKindOfResult) {
  EXPECT_EQ(ExitCodeOf(absl::OkStatus()), kExitSucceeded);
  EXPECT_EQ(ExitCodeOf(absl::InvalidArgumentError("spec")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(absl::CancelledError("interrupted")), kExitInterrupted);
  EXPECT_EQ(ExitCodeOf(absl::AbortedError("stage 1: worker killed")), kExitTrainingFailed);
  EXPECT_EQ(ExitCodeOf(absl::UnavailableError("cannot write")), kExitTrainingFailed);
  EXPECT_EQ(ExitCodeOf(absl::NotFoundError("no such job")), kExitTrainingFailed);
}

}  // namespace
}  // namespace paci
