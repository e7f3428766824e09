#include "operator/reconcile/kueue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/coordinator_view.h"
#include "operator/reconcile/reconcile_test_util.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op {

using kube::Rfc3339;
namespace {

using nlohmann::json;
using test::kNow;
using test::Pod;
using test::Reasons;
using test::World;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A TrainingJob queued in LocalQueue "team-queue", its workers asking 2 cpu.
json QueuedJob() {
  json job = test::Job();
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-queue"}};
  job["spec"]["checkpoint"] = {{"directory", "/shared/kjv"}, {"interval", 20}};
  job["spec"]["runPolicy"]["priority"] = 7;
  job["spec"]["worker"] = {{"image", "example/worker:1"},
                           {"resources", {{"requests", {{"cpu", "2"}}}}}};
  return job;
}

ReconcilerOptions WithKueue() {
  ReconcilerOptions options;
  options.kueue = true;
  return options;
}

json Condition(const std::string& type, const std::string& status, const std::string& reason,
               const std::string& message = "") {
  return {{"type", type}, {"status", status}, {"reason", reason}, {"message", message}};
}

// The job's Workload as Kueue leaves it: `conditions`, and an admission by
// "cluster-queue" when `admitted`.
json Workload(json conditions, bool admitted) {
  json workload = JobWorkload(ParseTrainingJob(QueuedJob()), "kjv-01234567", {2, 2}, json::object(),
                              std::nullopt);
  workload["metadata"]["resourceVersion"] = "20";
  workload["status"]["conditions"] = std::move(conditions);
  if (admitted) {
    workload["status"]["admission"] = {{"clusterQueue", "cluster-queue"},
                                       {"podSetAssignments", json::array()}};
  }
  return workload;
}

// A Workload's status once Kueue admitted `workers` of its pods.
json AdmittedStatus(int workers) {
  return {{"conditions", json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                                      Condition("Admitted", "True", "Admitted")})},
          {"admission",
           {{"clusterQueue", "cluster-queue"},
            {"podSetAssignments", json::array({{{"name", "workers"}, {"count", workers}}})}}}};
}

json AdmittedWorkload() {
  return Workload(json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                               Condition("Admitted", "True", "Admitted")}),
                  true);
}

json ConditionOf(const json& status, const std::string& type) {
  for (const json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  return nullptr;
}

TEST(KueueTest, AQueuedJobGetsOneWorkloadForAllItsWorkersAndWaitsSuspended) {
  const ReconcileActions actions = ReconcileTrainingJob(World(QueuedJob()), WithKueue());
  ASSERT_TRUE(actions.create_workload.has_value());
  const json& workload = *actions.create_workload;
  EXPECT_EQ(workload["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(workload["metadata"]["name"], "kjv-01234567");
  EXPECT_EQ(workload["metadata"]["namespace"], "team-a");
  EXPECT_EQ(workload["metadata"]["labels"][kJobNameLabel], "kjv");
  EXPECT_EQ(workload["metadata"]["ownerReferences"][0]["uid"], "0123456789abcdef");
  EXPECT_EQ(workload["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(workload["spec"]["queueName"], "team-queue");
  EXPECT_EQ(workload["spec"]["priority"], 7);  // spec.runPolicy.priority, with no class
  ASSERT_EQ(workload["spec"]["podSets"].size(), 1u);  // admitted as one unit
  const json& pod_set = workload["spec"]["podSets"][0];
  EXPECT_EQ(pod_set["count"], 2);
  EXPECT_FALSE(pod_set.contains("minCount"));  // all or nothing
  EXPECT_EQ(pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "2");
  // Nothing runs yet: no pods, no coordinator job.
  EXPECT_THAT(actions.create_pods, IsEmpty());
  EXPECT_FALSE(actions.submit.has_value());
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Suspended");
  EXPECT_EQ((*actions.status)["workload"], "kjv-01234567");
  const json admitted = ConditionOf(*actions.status, "Admitted");
  EXPECT_EQ(admitted["status"], "False");
  EXPECT_EQ(admitted["reason"], "Queued");
  EXPECT_THAT(admitted["message"].get<std::string>(), HasSubstr("LocalQueue team-queue"));
  EXPECT_EQ(ConditionOf(*actions.status, "Suspended")["status"], "True");
  EXPECT_THAT(Reasons(actions), ElementsAre("Queued"));

  // An operator without Kueue does not look at the label: the job runs.
  const ReconcileActions plain = ReconcileTrainingJob(World(QueuedJob()), ReconcilerOptions{});
  EXPECT_FALSE(plain.create_workload.has_value());
  EXPECT_TRUE(plain.submit.has_value());
}

TEST(KueueTest, AWaitingJobSaysWhatKueueSaysOnceAndALocalQueueThatIsNotThereIsAWarning) {
  ObservedWorld world = World(QueuedJob());
  world.workload = Workload(
      json::array({Condition("QuotaReserved", "False", "Pending",
                             "couldn't assign flavors to pod set workers: insufficient unused "
                             "quota for cpu in flavor default-flavor, 2 more needed")}),
      false);
  ReconcileActions actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_FALSE(actions.create_workload.has_value());
  EXPECT_THAT(actions.create_pods, IsEmpty());
  EXPECT_FALSE(actions.submit.has_value());
  ASSERT_TRUE(actions.status.has_value());
  const json admitted = ConditionOf(*actions.status, "Admitted");
  EXPECT_EQ(admitted["reason"], "Pending");
  EXPECT_THAT(admitted["message"].get<std::string>(),
              HasSubstr("Workload kjv-01234567 in LocalQueue team-queue: couldn't assign flavors "
                        "to pod set workers: insufficient unused quota for cpu"));
  EXPECT_EQ(ConditionOf(*actions.status, "Suspended")["reason"], "Pending");
  ASSERT_THAT(Reasons(actions), ElementsAre("Pending"));
  EXPECT_EQ(actions.events[0].type, "Normal");
  // Once written, the same answer is no news.
  world.job["status"] = *actions.status;
  actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_THAT(actions.events, IsEmpty());
  EXPECT_FALSE(actions.status.has_value());

  world.workload = Workload(json::array({Condition("QuotaReserved", "False", "Inadmissible",
                                                   "LocalQueue team-queue doesn't exist")}),
                            false);
  actions = ReconcileTrainingJob(world, WithKueue());
  ASSERT_THAT(Reasons(actions), ElementsAre("Inadmissible"));
  EXPECT_EQ(actions.events[0].type, "Warning");
  EXPECT_THAT(actions.events[0].message, HasSubstr("LocalQueue team-queue doesn't exist"));
  EXPECT_EQ((*actions.status)["phase"], "Suspended");
}

TEST(KueueTest, AnAdmittedWorkloadStartsTheJob) {
  ObservedWorld world = World(QueuedJob());
  world.job["status"] = {{"phase", "Suspended"},
                         {"conditions", json::array({Condition("Suspended", "True", "Pending"),
                                                     Condition("Admitted", "False", "Pending")})}};
  world.workload = AdmittedWorkload();
  const ReconcileActions actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_EQ(actions.create_pods.size(), 2u);
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->name(), "kjv-01234567-g1");
  const json admitted = ConditionOf(*actions.status, "Admitted");
  EXPECT_EQ(admitted["status"], "True");
  EXPECT_THAT(admitted["message"].get<std::string>(), HasSubstr("ClusterQueue cluster-queue"));
  EXPECT_EQ(ConditionOf(*actions.status, "Suspended")["status"], "False");
  EXPECT_EQ((*actions.status)["phase"], "Pending");
  EXPECT_THAT(Reasons(actions), ElementsAre("Admitted", "Submitted"));
}

// spec.pipeline.elastic: the Workload asks for the largest shape's pods with
// the smallest's as its minCount; admitted in part (Kueue's partial
// admission), the job gets the pods of the largest shape the count allows
// and is submitted at that shape.
TEST(KueueTest, AnElasticJobAdmittedInPartRunsAtTheShapeTheAdmittedPodsAllow) {
  json job = QueuedJob();
  job["spec"]["model"]["numLayers"] = 4;
  job["spec"]["pipeline"]["numStages"] = 3;
  job["spec"]["pipeline"]["elastic"] = {{"minStages", 1}, {"maxStages", 3}};
  ReconcileActions actions = ReconcileTrainingJob(World(job), WithKueue());
  ASSERT_TRUE(actions.create_workload.has_value());
  const json& pod_set = (*actions.create_workload)["spec"]["podSets"][0];
  EXPECT_EQ(pod_set["count"], 3);
  EXPECT_EQ(pod_set["minCount"], 1);
  EXPECT_THAT(ConditionOf(*actions.status, "Admitted")["message"].get<std::string>(),
              HasSubstr("for 1 to 3 worker pods"));

  // Kueue admits 2 of the 3.
  ObservedWorld world = World(job);
  world.job["status"] = {{"phase", "Suspended"},
                         {"conditions", json::array({Condition("Suspended", "True", "Pending"),
                                                     Condition("Admitted", "False", "Pending")})}};
  world.workload = *actions.create_workload;
  world.workload->at("metadata")["resourceVersion"] = "20";
  (*world.workload)["status"] = AdmittedStatus(2);
  actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_THAT(test::Names(actions.create_pods), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->pipeline().num_stages(), 2);
  EXPECT_EQ(actions.submit->pipeline().elastic().max_stages(), 3);  // it may grow back
  EXPECT_THAT(ConditionOf(*actions.status, "Admitted")["message"].get<std::string>(),
              HasSubstr("for 2 of its 3 worker pods (partial admission)"));
  EXPECT_THAT(Reasons(actions), ElementsAre("Admitted", "Submitted"));
  EXPECT_THAT(actions.events[1].message, HasSubstr("for 2 worker pods"));

  // Admitted whole: all three, at its own shape.
  (*world.workload)["status"]["admission"]["podSetAssignments"][0]["count"] = 3;
  actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_EQ(actions.create_pods.size(), 3u);
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->pipeline().num_stages(), 3);
}

// Kueue's elastic workloads: admitted in part, the job asks for its largest
// shape with a workload slice that replaces its Workload once admitted; the
// slice goes when the job stops before that.
TEST(KueueTest, AnElasticJobAdmittedInPartAsksToGrowWithAWorkloadSlice) {
  json job = QueuedJob();
  job["spec"]["pipeline"]["elastic"] = {{"minStages", 1}, {"maxStages", 2}};
  ReconcilerOptions options = WithKueue();
  options.kueue_workload_slices = true;
  // Running at 1 stage on the 1 pod Kueue admitted.
  ObservedWorld world = World(job);
  world.job["status"] = {
      {"phase", "Running"},
      {"workload", "kjv-01234567"},
      {"coordinatorJob", "kjv-01234567-g1"},
      {"conditions", json::array({Condition("Admitted", "True", "Admitted",
                                            "Workload kjv-01234567 admitted by ClusterQueue "
                                            "cluster-queue (LocalQueue team-queue)")})}};
  world.workload = JobWorkload(ParseTrainingJob(job), "kjv-01234567", {2, 1}, json::object(),
                               std::nullopt);
  (*world.workload)["metadata"]["resourceVersion"] = "20";
  (*world.workload)["status"] = AdmittedStatus(1);
  world.pods = {Pod(0, "Running")};
  world.service_exists = world.network_policy_exists = true;
  v1::Job running;
  running.set_name("kjv-01234567-g1");
  *running.mutable_spec() = *JobSpecFromTrainingJob(ParseTrainingJob(job), running.name());
  running.mutable_spec()->mutable_pipeline()->set_num_stages(1);
  running.mutable_status()->set_phase(v1::RUNNING);
  world.coordinator_job = running;

  ReconcileActions actions = ReconcileTrainingJob(world, options);
  ASSERT_TRUE(actions.create_workload.has_value());
  const json slice = *actions.create_workload;
  EXPECT_EQ(slice["metadata"]["name"], "kjv-01234567-2");
  EXPECT_EQ(slice["metadata"]["annotations"]["kueue.x-k8s.io/workload-slice-replacement-for"],
            "team-a/kjv-01234567");
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["uid"], "0123456789abcdef");
  EXPECT_FALSE(slice["metadata"].contains("resourceVersion"));
  EXPECT_FALSE(slice.contains("status"));
  EXPECT_EQ(slice["spec"]["podSets"][0]["count"], 2);
  EXPECT_FALSE(slice["spec"]["podSets"][0].contains("minCount"));  // all of it, or wait
  EXPECT_EQ(slice["spec"]["queueName"], "team-queue");
  EXPECT_TRUE(IsWorkloadSlice(slice));
  EXPECT_FALSE(IsWorkloadSlice(*world.workload));
  EXPECT_THAT(Reasons(actions), ElementsAre("GrowthQueued"));
  EXPECT_TRUE(actions.create_pods.empty());  // the one admitted pod runs
  EXPECT_FALSE(actions.submit.has_value());
  // Without the feature gate's flag: no slice (Kueue would count it twice).
  EXPECT_FALSE(ReconcileTrainingJob(world, WithKueue()).create_workload.has_value());
  // Before the cache has the slice, it is made again (AlreadyExists is no
  // error) but the Event is not given again: the status already says this admission.
  ObservedWorld again = world;
  again.job["status"] = *actions.status;
  ReconcileActions repeated = ReconcileTrainingJob(again, options);
  EXPECT_TRUE(repeated.create_workload.has_value());
  EXPECT_TRUE(Reasons(repeated).empty());

  // The slice waits: asked for once; it goes if Kueue evicts the job meanwhile.
  world.workload_slice = slice;
  actions = ReconcileTrainingJob(world, options);
  EXPECT_FALSE(actions.create_workload.has_value());
  EXPECT_FALSE(actions.delete_workload_slice);
  ObservedWorld evicted = world;
  (*evicted.workload)["status"]["conditions"].push_back(Condition("Evicted", "True", "Preempted"));
  actions = ReconcileTrainingJob(evicted, options);
  EXPECT_TRUE(actions.delete_workload_slice);
  EXPECT_EQ((*actions.status)["phase"], "Suspended");
  EXPECT_EQ((*actions.status)["workload"], "kjv-01234567");
  // ... and when the job is suspended, or ends.
  ObservedWorld suspended = world;
  suspended.job["spec"]["runPolicy"]["suspend"] = true;
  EXPECT_TRUE(ReconcileTrainingJob(suspended, options).delete_workload_slice);
  ObservedWorld ended = world;
  ended.job["status"]["phase"] = "Succeeded";
  EXPECT_TRUE(ReconcileTrainingJob(ended, options).delete_workload_slice);

  // Kueue finishes the old Workload just before it admits the slice: the job
  // runs on as it was meanwhile ...
  ObservedWorld between = world;
  json finished = Condition("Finished", "True", "WorkloadSliceReplaced");
  finished["lastTransitionTime"] = Rfc3339(kNow - absl::Seconds(2));
  (*between.workload)["status"]["conditions"].push_back(finished);
  actions = ReconcileTrainingJob(between, options);
  EXPECT_FALSE(actions.cancel.has_value());
  EXPECT_TRUE(actions.delete_pods.empty());
  EXPECT_TRUE(actions.create_pods.empty());
  EXPECT_FALSE(actions.delete_workload || actions.delete_workload_slice);
  EXPECT_TRUE(Reasons(actions).empty());
  EXPECT_TRUE(!actions.status.has_value() || (*actions.status)["phase"] == "Running");
  // ... but not for long: a slice Kueue did not admit goes, and the job queues again.
  (*between.workload)["status"]["conditions"].back()["lastTransitionTime"] =
      Rfc3339(kNow - absl::Seconds(30));
  actions = ReconcileTrainingJob(between, options);
  EXPECT_EQ(actions.cancel, "kjv-01234567-g1");
  EXPECT_TRUE(actions.delete_workload && actions.delete_workload_slice);
  EXPECT_EQ((*actions.status)["phase"], "Suspended");

  // Kueue admitted the slice and finished the old Workload: the job's
  // Workload is the slice now (the controller follows the chain), and both
  // pods run; the coordinator grows the job at its next checkpoint.
  ObservedWorld grown = world;
  grown.workload = slice;
  (*grown.workload)["metadata"]["resourceVersion"] = "30";
  (*grown.workload)["status"] = AdmittedStatus(2);
  grown.workload_slice.reset();
  actions = ReconcileTrainingJob(grown, options);
  EXPECT_THAT(test::Names(actions.create_pods), ElementsAre("kjv-worker-1"));
  EXPECT_FALSE(actions.create_workload.has_value());
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_EQ((*actions.status)["workload"], "kjv-01234567-2");
  EXPECT_THAT(Reasons(actions), ElementsAre("Admitted"));

  // Evicted once grown: the slice is deleted once the pods are gone (not
  // given back: it asks for all of the largest shape and names a Workload
  // that has ended), so the job queues with a Workload Kueue may admit in part.
  ObservedWorld evicted_grown = grown;
  evicted_grown.job["status"]["workload"] = "kjv-01234567-2";
  (*evicted_grown.workload)["status"]["conditions"].push_back(
      Condition("Evicted", "True", "Preempted"));
  evicted_grown.pods.clear();
  evicted_grown.coordinator_job.reset();
  evicted_grown.job["status"].erase("coordinatorJob");
  actions = ReconcileTrainingJob(evicted_grown, options);
  EXPECT_TRUE(actions.delete_workload);
  EXPECT_FALSE(actions.workload_status.has_value());
  ObservedWorld requeued = evicted_grown;
  requeued.job["status"] = *actions.status;
  requeued.workload.reset();
  actions = ReconcileTrainingJob(requeued, options);
  ASSERT_TRUE(actions.create_workload.has_value());
  EXPECT_EQ((*actions.create_workload)["metadata"]["name"], "kjv-01234567-2");
  EXPECT_EQ((*actions.create_workload)["spec"]["podSets"][0]["minCount"], 1);
  EXPECT_FALSE(IsWorkloadSlice(*actions.create_workload));
}

TEST(KueueTest, WorkloadSlicesAreNamedInTurnAndAReplacedOneReadsSo) {
  const ObjectMeta job = ParseObjectMeta(QueuedJob());
  EXPECT_EQ(CurrentWorkloadName(job, ""), "kjv-01234567");
  EXPECT_EQ(CurrentWorkloadName(job, "kjv-01234567-3"), "kjv-01234567-3");
  EXPECT_EQ(CurrentWorkloadName(job, "other-01234567-3"), "kjv-01234567");  // not this job's
  EXPECT_EQ(CurrentWorkloadName(job, "kjv-01234567-x"), "kjv-01234567");
  EXPECT_EQ(NextWorkloadName(job, "kjv-01234567"), "kjv-01234567-2");
  EXPECT_EQ(NextWorkloadName(job, "kjv-01234567-2"), "kjv-01234567-3");
  json workload = AdmittedWorkload();
  EXPECT_FALSE(ReplacedBySlice(workload));
  workload["status"]["conditions"].push_back(Condition("Finished", "True", "WorkloadSliceReplaced"));
  EXPECT_TRUE(ReplacedBySlice(workload));
}

TEST(KueueTest, AnEvictedJobStopsGivesItsQuotaBackOnceItsPodsAreGoneAndResumesAsANewJob) {
  // Running, admitted; Kueue preempts it for a higher priority.
  ObservedWorld world = World(QueuedJob());
  world.job["status"] = {{"phase", "Running"},
                         {"coordinatorJob", "kjv-01234567-g1"},
                         {"checkpointStep", 40},
                         {"conditions", json::array({Condition("Admitted", "True", "Admitted")})}};
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  world.service_exists = world.network_policy_exists = true;
  v1::Job running;
  running.set_name("kjv-01234567-g1");
  running.mutable_status()->set_phase(v1::RUNNING);
  world.coordinator_job = running;
  world.workload = AdmittedWorkload();
  world.workload->at("status")["conditions"].push_back(Condition(
      "Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x) due to "
                                      "prioritization in the ClusterQueue"));
  ReconcileActions actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_EQ(actions.cancel, "kjv-01234567-g1");
  EXPECT_THAT(actions.delete_pods, ElementsAre("kjv-worker-0", "kjv-worker-1"));
  EXPECT_FALSE(actions.workload_status.has_value());  // not while its pods are there
  EXPECT_EQ((*actions.status)["phase"], "Suspended");
  EXPECT_EQ((*actions.status)["evictions"], 1);
  EXPECT_FALSE(actions.status->contains("coordinatorJob"));
  EXPECT_EQ(ConditionOf(*actions.status, "Admitted")["reason"], "Preempted");
  ASSERT_THAT(Reasons(actions), ElementsAre("Preempted"));
  EXPECT_EQ(actions.events[0].type, "Warning");
  EXPECT_THAT(actions.events[0].message,
              HasSubstr("resumes from its last checkpoint when admitted again"));

  // Its pods gone: the quota goes back, and nothing is said twice.
  world.job["status"] = *actions.status;
  world.pods.clear();
  world.coordinator_job.reset();
  actions = ReconcileTrainingJob(world, WithKueue());
  ASSERT_TRUE(actions.workload_status.has_value());
  EXPECT_TRUE(actions.workload_status->release_quota);
  EXPECT_THAT(actions.events, IsEmpty());
  EXPECT_FALSE(actions.cancel.has_value());

  // Admitted again: a new coordinator job, resuming from its checkpoints.
  world.workload = AdmittedWorkload();
  actions = ReconcileTrainingJob(world, WithKueue());
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->name(), "kjv-01234567-g1-e1");
  EXPECT_TRUE(actions.submit->checkpoint().resume());
  EXPECT_EQ(actions.create_pods.size(), 2u);
}

TEST(KueueTest, ReleaseQuotaIsWhatKueuesJobFrameworkWrites) {
  json workload = AdmittedWorkload();
  workload["status"]["conditions"].push_back(
      Condition("Evicted", "True", "Preempted", "Preempted to accommodate a workload"));
  ReleaseQuota(workload, kNow);
  EXPECT_FALSE(workload["status"].contains("admission"));
  EXPECT_EQ(ConditionOf(workload["status"], "QuotaReserved")["status"], "False");
  EXPECT_EQ(ConditionOf(workload["status"], "QuotaReserved")["reason"], "Pending");
  EXPECT_EQ(ConditionOf(workload["status"], "QuotaReserved")["message"],
            "Preempted to accommodate a workload");
  EXPECT_EQ(ConditionOf(workload["status"], "Admitted")["status"], "False");
  EXPECT_EQ(ConditionOf(workload["status"], "Admitted")["reason"], "NoReservation");
  EXPECT_EQ(ConditionOf(workload["status"], "Requeued")["status"], "True");
  EXPECT_EQ(ConditionOf(workload["status"], "Requeued")["lastTransitionTime"],
            Rfc3339(kNow));
  // Evicted stays: Kueue resets it at the next admission.
  EXPECT_EQ(ConditionOf(workload["status"], "Evicted")["status"], "True");
  EXPECT_EQ(ReadAdmission(workload).state, Admission::kPending);

  // A stopped ClusterQueue is not requeued by the owner: Kueue does it when it starts again.
  json stopped = AdmittedWorkload();
  stopped["status"]["conditions"].push_back(
      Condition("Evicted", "True", "ClusterQueueStopped", "The ClusterQueue is stopped"));
  ReleaseQuota(stopped, kNow);
  EXPECT_EQ(ConditionOf(stopped["status"], "Requeued")["status"], "False");
  EXPECT_EQ(ConditionOf(stopped["status"], "Requeued")["reason"], "ClusterQueueStopped");
}

TEST(KueueTest, AFinishedJobMarksItsWorkloadFinished) {
  ObservedWorld world = World(QueuedJob());
  world.job["status"] = {{"phase", "Succeeded"}, {"message", "finished 60 steps"}};
  world.workload = AdmittedWorkload();
  ReconcileActions actions = ReconcileTrainingJob(world, WithKueue());
  ASSERT_TRUE(actions.workload_status.has_value());
  EXPECT_FALSE(actions.workload_status->release_quota);
  EXPECT_EQ(actions.workload_status->reason, "Succeeded");
  json workload = *world.workload;
  MarkFinished(workload, "Succeeded", "done", kNow);
  EXPECT_EQ(ReadAdmission(workload).state, Admission::kFinished);
  world.workload = workload;
  EXPECT_FALSE(ReconcileTrainingJob(world, WithKueue()).workload_status.has_value());
}

TEST(KueueTest, APriorityClassGivesTheWorkloadItsValueAndAMissingOneIsNamed) {
  json job = QueuedJob();
  job["metadata"]["labels"][kPriorityClassLabel] = "urgent";
  ObservedWorld world = World(job);
  ReconcileActions actions = ReconcileTrainingJob(world, WithKueue());
  EXPECT_FALSE(actions.create_workload.has_value());
  ASSERT_THAT(Reasons(actions), ElementsAre("PriorityClassNotFound"));
  EXPECT_EQ(actions.events[0].type, "Warning");
  EXPECT_THAT(actions.events[0].message, HasSubstr("no WorkloadPriorityClass \"urgent\""));
  EXPECT_TRUE(actions.requeue_after.has_value());  // classes are not watched

  world.priority_class = json{{"metadata", {{"name", "urgent"}}}, {"value", 1000}};
  actions = ReconcileTrainingJob(world, WithKueue());
  ASSERT_TRUE(actions.create_workload.has_value());
  EXPECT_EQ((*actions.create_workload)["spec"]["priority"], 1000);
  EXPECT_EQ((*actions.create_workload)["spec"]["priorityClassRef"]["name"], "urgent");
  EXPECT_EQ((*actions.create_workload)["spec"]["priorityClassRef"]["kind"],
            "WorkloadPriorityClass");
}

TEST(KueueTest, SuspendingDropsTheWorkloadAndARerunQueuesANewOne) {
  ObservedWorld world = World(QueuedJob());
  world.job["spec"]["runPolicy"]["suspend"] = true;
  world.workload = AdmittedWorkload();
  EXPECT_TRUE(ReconcileTrainingJob(world, WithKueue()).delete_workload);

  // Failed at generation 1, fixed at 2: the finished Workload goes, a new one comes after.
  ObservedWorld rerun = World(QueuedJob());
  rerun.job["metadata"]["generation"] = 2;
  rerun.job["status"] = {
      {"phase", "Failed"},
      {"conditions", json::array({json{{"type", "Failed"},
                                       {"status", "True"},
                                       {"reason", "JobFailed"},
                                       {"observedGeneration", 1}}})}};
  rerun.workload = AdmittedWorkload();
  MarkFinished(*rerun.workload, "Failed", "it failed", kNow);
  const ReconcileActions actions = ReconcileTrainingJob(rerun, WithKueue());
  EXPECT_TRUE(actions.delete_workload);
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Suspended");
}

}  // namespace
}  // namespace paci::op
