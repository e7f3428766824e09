#include "operator/api/training_job.h"

#include <gtest/gtest.h>

namespace paci::op {
namespace {

using nlohmann::json;

TEST(TrainingJobApiTest, NamesOfTheObjectsAJobOwns) {
  EXPECT_EQ(WorkerServiceName("kjv"), "kjv-workers");
  EXPECT_EQ(WorkerPodName("kjv", 2), "kjv-worker-2");
  EXPECT_EQ(WorkerLabels("kjv"), json({{kJobNameLabel, "kjv"}, {kRoleLabel, "worker"}}));
}

TEST(TrainingJobApiTest, OnlyTheEndPhasesAreFinished) {
  for (const char* phase : {kPhaseSucceeded, kPhaseFailed, kPhaseCancelled}) {
    EXPECT_TRUE(IsFinished(phase)) << phase;
  }
  for (const char* phase : {kPhaseInitializing, kPhasePending, kPhaseSuspended, kPhaseRunning,
                            kPhaseRestarting, ""}) {
    EXPECT_FALSE(IsFinished(phase)) << phase;
  }
}

}  // namespace
}  // namespace paci::op
