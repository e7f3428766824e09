#include "operator/reconcile/gang.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace paci::op {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Node(const std::string& name, const std::string& cpu, const std::string& memory = "64Gi") {
  return {{"metadata", {{"name", name}, {"labels", {{"pool", "cpu"}}}}},
          {"status",
           {{"allocatable", {{"cpu", cpu}, {"memory", memory}, {"pods", "110"}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

// A pod of job `job` asking `cpu`; bound to `node` when given, else at the
// gang gate when `gated`, else released and waiting for the scheduler.
json Pod(const std::string& job, int index, const std::string& cpu, const std::string& node = "",
         bool gated = false) {
  json pod = {{"metadata", {{"name", job + "-worker-" + std::to_string(index)},
                            {"namespace", "team-a"}}},
              {"spec",
               {{"containers", json::array({{{"name", "worker"},
                                             {"resources",
                                              {{"requests", {{"cpu", cpu}, {"memory", "1Gi"}}}}}}})}}},
              {"status", {{"phase", node.empty() ? "Pending" : "Running"}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  if (gated) pod["spec"]["schedulingGates"] = json::array({{{"name", kGangGate}}});
  return pod;
}

std::vector<json> Gang(const std::string& job, int pods, const std::string& cpu) {
  std::vector<json> gang;
  for (int i = 0; i < pods; ++i) gang.push_back(Pod(job, i, cpu, "", true));
  return gang;
}

TEST(GangQuantityTest, ReadsKubernetesQuantitiesInTheSchedulersUnits) {
  EXPECT_EQ(*ParseQuantity("cpu", "500m"), 500);
  EXPECT_EQ(*ParseQuantity("cpu", "2"), 2000);
  EXPECT_EQ(*ParseQuantity("cpu", "1.5"), 1500);
  EXPECT_EQ(*ParseQuantity("cpu", "100u"), 1);  // rounded up, as the scheduler does
  EXPECT_EQ(*ParseQuantity("memory", "8Gi"), int64_t{8} << 30);
  EXPECT_EQ(*ParseQuantity("memory", "1e3"), 1000);
  EXPECT_EQ(*ParseQuantity("memory", "2k"), 2000);
  EXPECT_EQ(*ParseQuantity("nvidia.com/gpu", "4"), 4);
  for (const char* bad : {"", "Gi", "1Gb", "abc", "1..2", "-1", "1e99"}) {
    absl::StatusOr<int64_t> value = ParseQuantity("memory", bad);
    ASSERT_FALSE(value.ok()) << bad;
    EXPECT_THAT(value.status().message(), HasSubstr(std::string("\"") + bad + "\"")) << bad;
  }
}

TEST(GangQuantityTest, APodAsksItsContainersSumItsLargestInitContainerAndItsOverhead) {
  json pod = Pod("a", 0, "1");
  pod["spec"]["containers"].push_back({{"resources", {{"requests", {{"cpu", "500m"}}}}}});
  pod["spec"]["initContainers"] = json::array(
      {{{"resources", {{"requests", {{"cpu", "3"}, {"memory", "512Mi"}}}}}},
       {{"resources", {{"requests", {{"cpu", "250m"}, {"nvidia.com/gpu", "1"}}}}}}});
  pod["spec"]["overhead"] = {{"cpu", "100m"}};
  Resources asked = PodRequests(pod);
  EXPECT_EQ(asked["cpu"], 3100);  // max(1.5, 3) + 0.1
  EXPECT_EQ(asked["memory"], int64_t{1} << 30);
  EXPECT_EQ(asked["nvidia.com/gpu"], 1);
  EXPECT_EQ(asked["pods"], 1);
}

TEST(GangGateTest, TheGateIsRecognisedAndRemovedAloneKeepingOthers) {
  json pod = Pod("a", 0, "1", "", true);
  EXPECT_TRUE(HasGangGate(pod));
  EXPECT_EQ(GatesWithoutGang(pod), json::array());
  pod["spec"]["schedulingGates"].push_back({{"name", "example.com/quota"}});
  EXPECT_EQ(GatesWithoutGang(pod), json::array({{{"name", "example.com/quota"}}}));
  EXPECT_FALSE(HasGangGate(Pod("a", 0, "1")));
}

TEST(PlanGangTest, AGangThatFitsBesideTheRunningPodsIsReleased) {
  // 16 cores, 4 taken by a bound pod: 2 x 5 fit.
  GangPlan plan = PlanGang(Gang("b", 2, "5"), {Node("n1", "16")}, {Pod("a", 0, "4", "n1")});
  EXPECT_TRUE(plan.fits) << plan.message;
  // Split across nodes: one 6-core pod on each 8-core node.
  EXPECT_TRUE(PlanGang(Gang("b", 2, "6"), {Node("n1", "8"), Node("n2", "8")}, {}).fits);
}

TEST(PlanGangTest, AGangWaitsForRoomTakenByBoundAndByReleasedPods) {
  std::vector<json> gang = Gang("b", 2, "5");
  // Bound: 8 of 16 taken leaves 8 < 10.
  GangPlan plan = PlanGang(gang, {Node("n1", "16")}, {Pod("a", 0, "4", "n1"), Pod("a", 1, "4", "n1")});
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.reason, "WaitingForCapacity");
  EXPECT_THAT(plan.message, HasSubstr("2 worker pods at the gate ask for cpu 10, memory 2Gi together"));
  EXPECT_THAT(plan.message, HasSubstr("free now on the 1 nodes they may use: cpu 8, memory 62Gi"));
  // Released but not bound yet: the scheduler will place them, so they hold room too.
  plan = PlanGang(gang, {Node("n1", "16")}, {Pod("a", 0, "4"), Pod("a", 1, "4")});
  EXPECT_EQ(plan.reason, "WaitingForCapacity");
  // Another job's pods still at the gate, and finished pods, hold nothing.
  std::vector<json> others = Gang("a", 2, "8");
  json finished = Pod("c", 0, "16", "n1");
  finished["status"]["phase"] = "Succeeded";
  others.push_back(finished);
  EXPECT_TRUE(PlanGang(gang, {Node("n1", "16")}, others).fits);
  // The gang's own pods in the cluster's list are not counted against it.
  EXPECT_TRUE(PlanGang(gang, {Node("n1", "10")}, gang).fits);
}

TEST(PlanGangTest, AGangNoNodeSetCouldEverHoldIsUnschedulable) {
  // Three 6-core pods on two 8-core nodes: never, even with the nodes empty.
  GangPlan plan = PlanGang(Gang("b", 3, "6"), {Node("n1", "8"), Node("n2", "8")}, {});
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.reason, "Unschedulable");
  EXPECT_THAT(plan.message, HasSubstr("could not hold them all even if empty (cpu 16, memory 128Gi in all"));
  // A resource no node has.
  std::vector<json> gpus = Gang("g", 1, "1");
  gpus[0]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1";
  EXPECT_EQ(PlanGang(gpus, {Node("n1", "16")}, {}).reason, "Unschedulable");
}

TEST(PlanGangTest, NodesTheGangMayNotUseAreNamedWithWhy) {
  json cordoned = Node("n1", "16");
  cordoned["spec"]["unschedulable"] = true;
  json not_ready = Node("n2", "16");
  not_ready["status"]["conditions"][0]["status"] = "False";
  json tainted = Node("n3", "16");
  tainted["spec"]["taints"] = json::array({{{"key", "gpu"}, {"value", "yes"}, {"effect", "NoSchedule"}}});
  json elsewhere = Node("n4", "16");
  elsewhere["metadata"]["labels"]["pool"] = "gpu";
  std::vector<json> gang = Gang("b", 2, "1");
  for (json& pod : gang) pod["spec"]["nodeSelector"] = {{"pool", "cpu"}};
  GangPlan plan = PlanGang(gang, {cordoned, not_ready, tainted, elsewhere}, {});
  EXPECT_EQ(plan.reason, "Unschedulable");
  EXPECT_THAT(plan.message, HasSubstr("no node may take them (of 4 nodes: 1 a taint they do not "
                                      "tolerate, 1 cordoned, 1 not Ready, 1 not their nodeSelector)"));
  // Tolerating the taint opens that node.
  for (json& pod : gang) {
    pod["spec"]["tolerations"] = json::array({{{"key", "gpu"}, {"operator", "Exists"}}});
  }
  EXPECT_TRUE(PlanGang(gang, {cordoned, not_ready, tainted, elsewhere}, {}).fits);
}

}  // namespace
}  // namespace paci::op
