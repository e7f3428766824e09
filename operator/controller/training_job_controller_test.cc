// The controller's stateful half against a real kube-apiserver and a fake
// coordinator: ActionExecutor carrying out what ReconcileTrainingJob decided
// (a rejected submit included), then the whole controller, informers to
// status, with its requeues timed by a FakeClock.

#include "operator/controller/training_job_controller.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "operator/controller/action_executor.h"
#include "kube/test_api_server.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using kube::CollectionPath;
using kube::BeingDeleted;
using kube::Field;
using kube::HasFinalizer;
using kube::MetaString;
using kube::StringField;
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// The coordinator as the operator sees it, in memory. Thread-safe.
class FakeCoordinatorJobs : public CoordinatorJobs {
 public:
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec,
                                 const std::map<std::string, std::string>& labels) override {
    absl::MutexLock lock(&mutex_);
    submitted_.push_back(spec.name());
    if (!submit_answer_.ok()) return submit_answer_;
    v1::Job& job = jobs_[spec.name()];
    job.set_name(spec.name());
    job.mutable_labels()->insert(labels.begin(), labels.end());
    *job.mutable_spec() = spec;
    job.mutable_status()->set_phase(v1::QUEUED);
    return job;
  }
  absl::StatusOr<v1::Job> Get(const std::string& name, bool with_loss_history) override {
    absl::MutexLock lock(&mutex_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return absl::NotFoundError("coordinator GetJob " + name);
    v1::Job job = it->second;
    if (!with_loss_history) {  // as the real GetJob's omit_loss_history
      job.mutable_status()->clear_train_loss_history();
      job.mutable_status()->clear_validation_loss_history();
    }
    return job;
  }
  absl::Status Cancel(const std::string& name) override {
    absl::MutexLock lock(&mutex_);
    cancelled_.push_back(name);
    jobs_[name].mutable_status()->set_phase(v1::CANCELLED);
    return absl::OkStatus();
  }
  absl::Status UpdateRunPolicy(const std::string& name, const v1::RunPolicy& policy) override {
    absl::MutexLock lock(&mutex_);
    *jobs_[name].mutable_spec()->mutable_run_policy() = policy;
    return absl::OkStatus();
  }

  // What the next submits are answered.
  void AnswerSubmits(absl::Status answer) {
    absl::MutexLock lock(&mutex_);
    submit_answer_ = std::move(answer);
  }
  void SetPhase(const std::string& name, v1::JobPhase phase) {
    absl::MutexLock lock(&mutex_);
    jobs_[name].set_name(name);
    jobs_[name].mutable_status()->set_phase(phase);
  }
  std::vector<std::string> submitted() const {
    absl::MutexLock lock(&mutex_);
    return submitted_;
  }
  std::vector<std::string> cancelled() const {
    absl::MutexLock lock(&mutex_);
    return cancelled_;
  }

 private:
  mutable absl::Mutex mutex_;
  absl::Status submit_answer_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, v1::Job> jobs_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> submitted_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> cancelled_ ABSL_GUARDED_BY(mutex_);
};

// The TrainingJob CRD as the test server needs it: any spec and status.
json TrainingJobCrd() {
  const json version = {{"name", "v1alpha1"},
                        {"served", true},
                        {"storage", true},
                        {"schema",
                         {{"openAPIV3Schema",
                           {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}},
                        {"subresources", {{"status", json::object()}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "trainingjobs.paci.dev"}}},
          {"spec",
           {{"group", "paci.dev"},
            {"scope", "Namespaced"},
            {"names", {{"plural", "trainingjobs"}, {"singular", "trainingjob"}, {"kind", "TrainingJob"}}},
            {"versions", json::array({version})}}}};
}

// A small job of two stages.
json NewTrainingJob(const std::string& name) {
  json spec = {
      {"model", {{"vocabSize", 80}, {"numLayers", 2}, {"dModel", 16}, {"numHeads", 2}, {"seqLen", 16}}},
      {"pipeline", {{"numStages", 2}, {"schedule", "paci"}, {"accumulation", 2}, {"microBatchSize", 2}}},
      {"optimizer", {{"lr", 0.01}}},
      {"training", {{"steps", 10}}},
      {"data", {{"corpusPath", "/data/corpus.txt"}}}};
  return {{"apiVersion", "paci.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", std::move(spec)}};
}

class ControllerTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the API server did not start; see " << server_.log_path();
    absl::Status crd =
        kube_.Create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", TrainingJobCrd())
            .status();
    ASSERT_TRUE(crd.ok()) << crd;
    // The real server serves the new resource once the CRD is Established (moments later).
    absl::Status served = kube_.List(Jobs()).status();
    for (int i = 0; i < 200 && !served.ok(); ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      served = kube_.List(Jobs()).status();
    }
    ASSERT_TRUE(served.ok()) << served;
  }

  static std::string Jobs() { return CollectionPath("paci.dev", "v1alpha1", "default", "trainingjobs"); }
  static std::string Pods() { return CollectionPath("", "v1", "default", "pods"); }

  json CreateJob(const json& job) {
    absl::StatusOr<json> created = kube_.Create(Jobs(), job);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.value_or(json::object());
  }
  absl::StatusOr<json> GetJob(const std::string& name) { return kube_.Get(Jobs() + "/" + name); }
  std::vector<std::string> Names(const std::string& collection) {
    std::vector<std::string> names;
    absl::StatusOr<json> list = kube_.List(collection);
    EXPECT_TRUE(list.ok()) << list.status();
    for (const json& item : list.value_or(json::object()).value("items", json::array())) {
      names.push_back(MetaString(item, "name"));
    }
    return names;
  }
  std::vector<std::string> EventReasons() {
    std::vector<std::string> reasons;
    absl::StatusOr<json> list = kube_.List(CollectionPath("", "v1", "default", "events"));
    for (const json& event : list.value_or(json::object()).value("items", json::array())) {
      // The real API server records events of its own in the namespace (its Service IP repair
      // loop's ClusterIPNotAllocated, for one): only the TrainingJob's are the executor's.
      if (event.value("involvedObject", json::object()).value("kind", "") != "TrainingJob") continue;
      reasons.push_back(StringField(event, "reason"));
    }
    return reasons;
  }

  kube::TestApiServer server_;
  kube::KubeClient kube_{server_.client_options()};
  FakeCoordinatorJobs coordinator_;
  FakeClock clock_;
  ReconcilerOptions reconciler_;
};

class ActionExecutorTest : public ControllerTestBase {
 protected:
  // The world a reconcile of `job` (as the API server has it) observes.
  ObservedWorld Observe(const json& job) {
    ObservedWorld world;
    world.job = job;
    world.now = clock_.Now();
    return world;
  }
  ActionExecutor::Result ReconcileAndExecute(const ObservedWorld& world) {
    return executor_.Execute(world, ReconcileTrainingJob(world, reconciler_));
  }

  ActionExecutor executor_{kube_, coordinator_, reconciler_, "paci-operator-test", clock_};
};

TEST_F(ActionExecutorTest, CarriesOutANewJobsActions) {
  const ObservedWorld world = Observe(CreateJob(NewTrainingJob("kjv")));
  const ActionExecutor::Result result = ReconcileAndExecute(world);
  ASSERT_TRUE(result.status.ok()) << result.status;

  EXPECT_THAT(Names(Pods()), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  // Beside the API server's own Service.
  EXPECT_THAT(Names(CollectionPath("", "v1", "default", "services")),
              UnorderedElementsAre("kjv-workers", "kubernetes"));
  EXPECT_THAT(Names(CollectionPath("networking.k8s.io", "v1", "default", "networkpolicies")),
              ElementsAre("kjv-workers"));
  const std::string coordinator_job = CoordinatorJobName(ParseTrainingJob(world.job));
  EXPECT_THAT(coordinator_.submitted(), ElementsAre(coordinator_job));
  // Labelled with its namespace: a tenant's certificate opens that namespace's jobs.
  absl::StatusOr<v1::Job> submitted = coordinator_.Get(coordinator_job, false);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->labels().at("paci.dev/namespace"), "default");
  absl::StatusOr<json> job = GetJob("kjv");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(HasFinalizer(*job, kFinalizer));
  EXPECT_EQ((*job)["status"]["phase"], "Pending");
  EXPECT_EQ((*job)["status"]["coordinatorJob"], coordinator_job);
  EXPECT_EQ(MetaString(result.written, "resourceVersion"), MetaString(*job, "resourceVersion"));
  EXPECT_THAT(EventReasons(), ElementsAre("Submitted"));
  EXPECT_EQ(result.requeue_after, reconciler_.poll_interval);
}

TEST_F(ActionExecutorTest, ARejectedSubmitEndsInTheStatusTheReconcilerDecided) {
  const absl::Status rejected = absl::InvalidArgumentError("coordinator SubmitJob: no such schedule");
  coordinator_.AnswerSubmits(rejected);
  ObservedWorld world = Observe(CreateJob(NewTrainingJob("kjv")));
  const ActionExecutor::Result result = ReconcileAndExecute(world);
  EXPECT_TRUE(result.status.ok()) << result.status;  // refused for good: nothing to retry

  absl::StatusOr<json> job = GetJob("kjv");
  ASSERT_TRUE(job.ok()) << job.status();
  world.submit_result = rejected;
  const ReconcileActions decided = ReconcileTrainingJob(world, reconciler_);
  ASSERT_TRUE(decided.status.has_value());
  EXPECT_EQ((*job)["status"], *decided.status);
  EXPECT_EQ((*job)["status"]["phase"], "Failed");
  EXPECT_EQ((*job)["status"]["message"], std::string(rejected.message()));
  EXPECT_THAT(EventReasons(), Contains("SubmitRejected"));
  EXPECT_EQ(coordinator_.submitted().size(), 1u);  // asked once
  EXPECT_FALSE(result.requeue_after.has_value());
}

TEST_F(ActionExecutorTest, ASubmitTheCoordinatorCouldNotTakeIsRetriedAfterTheStatus) {
  coordinator_.AnswerSubmits(absl::UnavailableError("coordinator SubmitJob: connection refused"));
  const ObservedWorld world = Observe(CreateJob(NewTrainingJob("kjv")));
  const ActionExecutor::Result result = ReconcileAndExecute(world);
  EXPECT_TRUE(absl::IsUnavailable(result.status)) << result.status;
  absl::StatusOr<json> job = GetJob("kjv");
  ASSERT_TRUE(job.ok()) << job.status();
  // Written first, so the retry submits under the same name.
  EXPECT_EQ((*job)["status"]["coordinatorJob"], CoordinatorJobName(ParseTrainingJob(world.job)));
}

TEST_F(ActionExecutorTest, AFailedChangeStopsBeforeTheSubmit) {
  ASSERT_TRUE(server_.Control("inject-error", {{"verb", "create"}, {"resource", "pods"}, {"code", 500}}));
  const ObservedWorld world = Observe(CreateJob(NewTrainingJob("kjv")));
  const ActionExecutor::Result result = ReconcileAndExecute(world);
  EXPECT_FALSE(result.status.ok());
  EXPECT_THAT(coordinator_.submitted(), IsEmpty());
  absl::StatusOr<json> job = GetJob("kjv");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->contains("status"));
}

TEST_F(ActionExecutorTest, ADeletedJobIsCancelledAndReleased) {
  ASSERT_TRUE(ReconcileAndExecute(Observe(CreateJob(NewTrainingJob("kjv")))).status.ok());
  absl::StatusOr<json> job = GetJob("kjv");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string coordinator_job = (*job)["status"]["coordinatorJob"];
  coordinator_.SetPhase(coordinator_job, v1::RUNNING);
  ASSERT_TRUE(kube_.Delete(Jobs() + "/kjv").ok());  // held by the finalizer
  job = GetJob("kjv");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(BeingDeleted(*job));

  ObservedWorld world = Observe(*job);
  world.coordinator_job = coordinator_.Get(coordinator_job, false).value();
  absl::StatusOr<json> pods = kube_.List(Pods());
  ASSERT_TRUE(pods.ok()) << pods.status();
  for (const json& pod : (*pods)["items"]) world.pods.push_back(pod);
  const ActionExecutor::Result result = ReconcileAndExecute(world);
  ASSERT_TRUE(result.status.ok()) << result.status;

  EXPECT_THAT(coordinator_.cancelled(), ElementsAre(coordinator_job));
  EXPECT_TRUE(absl::IsNotFound(GetJob("kjv").status()));  // the finalizer let it go
  EXPECT_THAT(EventReasons(), Contains("Cancelling"));
}

// The whole controller: informers, queue, reconcile, executor.
class TrainingJobControllerTest : public ControllerTestBase {
 protected:
  void StartController() {
    ControllerOptions options;
    options.watch_namespace = "default";
    options.reconciler = reconciler_;
    options.clock = &clock_;
    controller_ = std::make_unique<TrainingJobController>(kube_, coordinator_, metrics_, options);
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)).ok());
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
  }

  // Lists `collection`, then watches it until `done` holds for its objects
  // (by name), or the server ends the watch after `seconds`; those objects.
  using Objects = std::map<std::string, json>;
  Objects WatchUntil(const std::string& collection, const std::function<bool(const Objects&)>& done,
                     int seconds = 30) {
    Objects objects;
    absl::StatusOr<json> list = kube_.List(collection);
    if (!list.ok()) {
      ADD_FAILURE() << list.status();
      return objects;
    }
    for (const json& item : (*list)["items"]) objects[MetaString(item, "name")] = item;
    if (done(objects)) return objects;
    kube::WatchOptions options;
    options.resource_version = MetaString(*list, "resourceVersion");
    options.timeout_seconds = seconds;
    const absl::Status watched =
        kube_.Watch(collection, options, [&](const kube::WatchEvent& event) {
          const std::string name = MetaString(event.object, "name");
          if (event.type == "DELETED") {
            objects.erase(name);
          } else if (event.type != "BOOKMARK") {
            objects[name] = event.object;
          }
          return !done(objects);
        });
    EXPECT_TRUE(watched.ok()) << watched;
    return objects;
  }
  // TrainingJob "kjv" once its status.phase is `phase` (or as last seen).
  json WatchForPhase(const std::string& phase, int seconds = 30) {
    auto reached = [&](const Objects& jobs) {
      auto it = jobs.find("kjv");
      return it != jobs.end() && StringField(Field(it->second, "status"), "phase") == phase;
    };
    Objects jobs = WatchUntil(Jobs(), reached, seconds);
    return jobs.count("kjv") ? jobs["kjv"] : json::object();
  }

  OperatorMetrics metrics_;
  std::unique_ptr<TrainingJobController> controller_;
};

TEST_F(TrainingJobControllerTest, ARejectedJobFailsAndItsWorkersStop) {
  coordinator_.AnswerSubmits(absl::InvalidArgumentError("coordinator SubmitJob: no such schedule"));
  StartController();
  CreateJob(NewTrainingJob("kjv"));
  const json job = WatchForPhase("Failed");
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["message"], "coordinator SubmitJob: no such schedule");
  const Objects pods = WatchUntil(Pods(), [](const Objects& pods) { return pods.empty(); });
  EXPECT_THAT(pods, IsEmpty());
}

TEST_F(TrainingJobControllerTest, ARunningJobIsMirroredWhenTheClockPolls) {
  StartController();
  CreateJob(NewTrainingJob("kjv"));
  const json pending = WatchForPhase("Pending");
  EXPECT_THAT(Names(Pods()), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  // The coordinator starts it; the controller reads that when it polls, once
  // its clock has moved on by the poll interval (a reconcile requeued just
  // after an advance is due a poll later: advance again).
  coordinator_.SetPhase(pending["status"]["coordinatorJob"], v1::RUNNING);
  json job = pending;
  for (int poll = 0; poll < 30 && job["status"]["phase"] != "Running"; ++poll) {
    clock_.Advance(reconciler_.poll_interval);
    job = WatchForPhase("Running", 1);
  }
  EXPECT_EQ(job["status"]["phase"], "Running");
}

// The gang gate releases a job's pods together, and a pod that replaces one
// of them (the same name, another uid) alone: the release of the first is
// not taken for the second's. The controller's clock does not move here, so
// nothing is forgotten by age.
TEST_F(TrainingJobControllerTest, AReplacementPodOfTheSameNameIsReleasedFromTheGangGate) {
  const json node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", "node-a"}}},
      {"status",
       {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})},
        {"allocatable", {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "110"}}},
        {"capacity", {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "110"}}}}}};
  ASSERT_TRUE(kube_.Create(CollectionPath("", "v1", "", "nodes"), node).ok());
  // The API server taints a new node not-ready, as its kubelet would clear: clear it.
  const std::string node_path = CollectionPath("", "v1", "", "nodes") + "/node-a";
  ASSERT_TRUE(kube_.MergePatch(node_path, {{"spec", {{"taints", nullptr}}}}).ok());
  StartController();
  CreateJob(NewTrainingJob("kjv"));
  auto released = [](const Objects& pods) {
    if (pods.size() != 2) return false;
    for (const auto& [name, pod] : pods) {
      if (!Field(Field(pod, "spec"), "schedulingGates").empty()) return false;
    }
    return true;
  };
  const Objects first = WatchUntil(Pods(), released);
  ASSERT_TRUE(released(first));
  const std::string old_uid = MetaString(first.at("kjv-worker-1"), "uid");

  // The pod goes (its node lost it); the operator makes it again, gated.
  ASSERT_TRUE(kube_.Delete(Pods() + "/kjv-worker-1?gracePeriodSeconds=0").ok());
  const Objects again = WatchUntil(Pods(), [&](const Objects& pods) {
    return released(pods) && MetaString(pods.at("kjv-worker-1"), "uid") != old_uid;
  });
  ASSERT_EQ(again.count("kjv-worker-1"), 1u);
  EXPECT_NE(MetaString(again.at("kjv-worker-1"), "uid"), old_uid);
  EXPECT_TRUE(released(again)) << again.at("kjv-worker-1").dump();
}

}  // namespace
}  // namespace paci::op
