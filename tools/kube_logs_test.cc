#include "tools/kube_logs.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Job() {
  return json::parse(R"({
    "metadata": {"name": "kjv", "namespace": "team-a"},
    "spec": {"pipeline": {"numStages": 2, "dataParallel": 2}},
    "status": {"phase": "Running", "stages": [
      {"stage": 0, "replica": 0, "pod": "kjv-worker-3"},
      {"stage": 1, "replica": 0, "pod": "kjv-worker-0"},
      {"stage": 0, "replica": 1, "pod": "kjv-worker-1"},
      {"stage": 1, "replica": 1, "pod": "kjv-worker-2"}]}})");
}

TEST(KubeLogsTest, AStagesPodIsTheOneItsStatusNames) {
  LogsRequest request{"kjv"};
  request.stage = 1;
  EXPECT_EQ(*PodOfRequest(op::ParseTrainingJob(Job()), request), "kjv-worker-0");
  request.replica = 1;
  request.stage = 0;
  EXPECT_EQ(*PodOfRequest(op::ParseTrainingJob(Job()), request), "kjv-worker-1");
  request.dataset = true;
  EXPECT_EQ(*PodOfRequest(op::ParseTrainingJob(Job()), request), "kjv-dataset");
}

TEST(KubeLogsTest, AStageOutsideThePipelineOrNotPlacedYetIsRefusedSayingWhy) {
  LogsRequest request{"kjv"};
  request.stage = 2;
  absl::StatusOr<std::string> pod = PodOfRequest(op::ParseTrainingJob(Job()), request);
  EXPECT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pod.status().message(), HasSubstr("--stage: 2 is not a stage of kjv, which has 2"));
  request.stage = 0;
  request.replica = 2;
  EXPECT_THAT(PodOfRequest(op::ParseTrainingJob(Job()), request).status().message(), HasSubstr("--replica: 2"));
  json pending = Job();
  pending["status"] = {{"phase", "Initializing"}};
  request.replica = 0;
  pod = PodOfRequest(op::ParseTrainingJob(pending), request);
  EXPECT_EQ(pod.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pod.status().message(), HasSubstr("no pod runs stage 0 replica 0 of kjv yet "
                                                "(phase Initializing)"));
}

TEST(KubeLogsTest, TheKubeconfigIsTheFlagsThenKubeconfigsFirstThenHomes) {
  EXPECT_EQ(KubeconfigPath("/etc/k"), "/etc/k");
  setenv("KUBECONFIG", "/a/config:/b/config", 1);
  EXPECT_EQ(KubeconfigPath(""), "/a/config");
  unsetenv("KUBECONFIG");
  setenv("HOME", "/home/me", 1);
  EXPECT_EQ(KubeconfigPath(""), "/home/me/.kube/config");
}

}  // namespace
}  // namespace paci
