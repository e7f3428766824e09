#include "tools/kube_job.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/yaml_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/test_api_server.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci {

using kube::Field;
using kube::IntField;
using kube::MetaString;
using kube::Rfc3339;
using kube::StringField;
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1796320000);

json RunningJob() {
  return json::parse(absl::StrCat(R"({
    "metadata": {"name": "kjv", "namespace": "team-a",
                 "creationTimestamp": ")", Rfc3339(kNow - absl::Minutes(10)), R"("},
    "spec": {"pipeline": {"numStages": 2, "dataParallel": 1, "accumulation": 2}},
    "status": {"phase": "Running", "coordinatorJob": "kjv-1a2b3c4d-g1", "attempt": 2,
      "restarts": 1, "step": 40, "totalSteps": 200, "checkpointStep": 30,
      "trainLoss": 2.4101, "validationLoss": 2.5203, "tokensPerSecond": 3456,
      "maxDrift": 1, "driftLimit": 1, "accumulation": 2,
      "startTime": ")", Rfc3339(kNow - absl::Minutes(4)), R"(",
      "conditions": [
        {"type": "Submitted", "status": "True", "reason": "Submitted",
         "message": "submitted to the coordinator as kjv-1a2b3c4d-g1"},
        {"type": "Running", "status": "True", "reason": "Running", "message": ""}],
      "stages": [
        {"stage": 0, "replica": 0, "pod": "kjv-worker-1", "maxDrift": 1, "driftBound": 1,
         "idleFraction": 0.1234},
        {"stage": 1, "replica": 0, "pod": "kjv-worker-0", "maxDrift": 0, "driftBound": 0,
         "idleFraction": 0.05}]}})"));
}

TEST(KubeJobTest, ATrainingJobIsNamedAsKubectlSpellsItsResource) {
  EXPECT_EQ(TrainingJobName("trainingjob/kjv"), "kjv");
  EXPECT_EQ(TrainingJobName("trainingjobs/kjv"), "kjv");
  EXPECT_EQ(TrainingJobName("tj/kjv"), "kjv");
  EXPECT_EQ(TrainingJobName("kjv"), std::nullopt);  // a coordinator job
  EXPECT_EQ(TrainingJobName("trainingjob/"), std::nullopt);
  EXPECT_EQ(TrainingJobName("pods/kjv"), std::nullopt);
}

TEST(KubeJobTest, TheDetailsSayWhereTheJobIsAndWhereItsStagesRun) {
  const std::string text = FormatTrainingJob(op::ParseTrainingJob(RunningJob()), kNow);
  EXPECT_THAT(text, HasSubstr("trainingjob: team-a/kjv\n"));
  EXPECT_THAT(text, HasSubstr("phase:       Running\n"));
  EXPECT_THAT(text, HasSubstr("coordinator: kjv-1a2b3c4d-g1 (attempt 2, restarts 1)\n"));
  EXPECT_THAT(text, HasSubstr("step:        40/200 (checkpoint step 30)\n"));
  EXPECT_THAT(text, HasSubstr("train loss:  2.4101\nval loss:    2.5203\ntokens/s:    3,456\n"));
  EXPECT_THAT(text, HasSubstr("drift:       max 1, limit 1 (accumulation 2)\n"));
  EXPECT_THAT(text, HasSubstr("created:     10m ago\nstarted:     4m ago\n"));
  EXPECT_THAT(text, HasSubstr("Submitted       True  Submitted"));
  EXPECT_THAT(text, HasSubstr("stage 0 replica 0  pod kjv-worker-1"));
  EXPECT_THAT(text, HasSubstr("drift 1/1  idle 12.3%"));
  // An elastic job says the shape it runs at now.
  json elastic = RunningJob();
  elastic["status"]["shape"] = "1 stage x 1 replica";
  elastic["status"]["resizes"] = 1;
  EXPECT_THAT(FormatTrainingJob(op::ParseTrainingJob(elastic), kNow),
              HasSubstr(" replicas (pipeline.elastic: now 1 stage x 1 replica, 1 resizes)\n"));
}

// spec.parity: the run under way, then the result; nothing for a job without the check.
TEST(KubeJobTest, TheDetailsSayWhereAParityCheckIs) {
  EXPECT_THAT(FormatTrainingJob(op::ParseTrainingJob(RunningJob()), kNow), Not(HasSubstr("parity:")));
  json job = RunningJob();
  job["status"]["parity"] = {{"run", 3}, {"totalRuns", 6}};
  EXPECT_THAT(FormatTrainingJob(op::ParseTrainingJob(job), kNow), HasSubstr("\nparity:      run 3 of 6\n"));
  job["status"]["parity"]["summary"] = "+0.50% (spread 0.20 points) at 1.20x the flush's tokens/s";
  EXPECT_THAT(FormatTrainingJob(op::ParseTrainingJob(job), kNow),
              HasSubstr("\nparity:      the gap to the flush +0.50% (spread 0.20 points) at "
                        "1.20x the flush's tokens/s\n"));
}

TEST(KubeJobTest, AJobWithoutStatusOrLossesPrintsDashes) {
  json job = RunningJob();
  job.erase("status");
  const std::string text = FormatTrainingJob(op::ParseTrainingJob(job), kNow);
  EXPECT_THAT(text, HasSubstr("phase:       (no status yet)\n"));
  EXPECT_THAT(text, HasSubstr("coordinator: - (attempt 0, restarts 0)\n"));
  EXPECT_THAT(text, HasSubstr("train loss:  -\nval loss:    -\n"));
  EXPECT_THAT(text, HasSubstr("started:     -\n"));
}

TEST(KubeJobTest, ThePhaseLineSaysWhyAJobWaitsOrStopped) {
  json job = RunningJob();
  job["status"]["phase"] = "Pending";
  job["status"]["conditions"].push_back(
      {{"type", "WorkersBlocked"}, {"status", "True"}, {"reason", "Unschedulable"},
       {"message", "kjv-worker-1: 0/1 nodes are available: Insufficient cpu"}});
  job["status"]["conditions"].push_back({{"type", "DatasetReady"}, {"status", "False"},
                                         {"reason", "Preparing"}, {"message", "tokenizing"}});
  job["status"]["conditions"].push_back(
      {{"type", "WorkersAdmitted"}, {"status", "False"}, {"reason", "WaitingForCapacity"},
       {"message", "2 worker pods at the gate ask for cpu 12 together"}});
  EXPECT_EQ(PhaseLine(op::ParseTrainingJob(job).status),
            "Pending (WorkersBlocked Unschedulable: kjv-worker-1: 0/1 nodes are available: "
            "Insufficient cpu) (DatasetReady Preparing: tokenizing) (WorkersAdmitted "
            "WaitingForCapacity: 2 worker pods at the gate ask for cpu 12 together)");
  // Released: nothing to say.
  job["status"]["conditions"].back()["status"] = "True";
  EXPECT_THAT(PhaseLine(op::ParseTrainingJob(job).status), Not(HasSubstr("WorkersAdmitted")));
  json failed = RunningJob();
  failed["status"]["phase"] = "Failed";
  failed["status"]["message"] = "spec.model.num_layers: 2 stages need at least 2 layers";
  failed["status"]["conditions"] = {{{"type", "Failed"},
                                     {"status", "True"},
                                     {"reason", "InvalidSpec"},
                                     {"message", failed["status"]["message"]}}};
  // The message once, not again from the condition that carries it.
  EXPECT_EQ(PhaseLine(op::ParseTrainingJob(failed).status), "Failed: spec.model.num_layers: 2 stages need at least 2 layers");
  EXPECT_TRUE(TrainingJobFinished(op::ParseTrainingJob(failed).status));
  EXPECT_FALSE(TrainingJobSucceeded(op::ParseTrainingJob(failed).status));
  EXPECT_FALSE(TrainingJobFinished(op::ParseTrainingJob(job).status));
}

TEST(KubeJobTest, TheProgressViewCountsPlacedStagesAndExtrapolatesTheEta) {
  ProgressView view = ViewOfTrainingJob(op::ParseTrainingJob(RunningJob()), kNow);
  EXPECT_EQ(view.num_stages, 2);
  EXPECT_EQ(view.joined, 2);
  EXPECT_EQ(view.step, 40);
  EXPECT_EQ(view.total_steps, 200);
  EXPECT_EQ(view.drift_max, (std::vector<int64_t>{1, 0}));
  EXPECT_DOUBLE_EQ(*view.train_loss, 2.4101);
  EXPECT_DOUBLE_EQ(view.tokens_per_second, 3456);
  ASSERT_TRUE(view.eta.has_value());
  EXPECT_EQ(*view.eta, absl::Minutes(16));  // 40 steps in 4 minutes, 160 to go
}

// ---- against a real kube-apiserver with the project's CRD

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(PACI_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json YamlObject(const std::string& relative) {
  absl::StatusOr<std::string> text = YamlMappingToJson(ReadSource(relative), relative);
  EXPECT_TRUE(text.ok()) << text.status();
  return json::parse(text.value_or("{}"));
}

class KubeJobServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new kube::TestApiServer();
    if (!server_->ok()) return;
    kube::KubeClient kube(server_->client_options());
    const std::string crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    absl::StatusOr<json> crd = kube.Create(crds, YamlObject("deploy/crd/paci.dev_trainingjobs.yaml"));
    ASSERT_TRUE(crd.ok()) << crd.status();
    // Served once the CRD is Established (moments after it is created): its watch says when.
    auto established = [](const json& object) {
      const json& conditions = Field(Field(object, "status"), "conditions");
      for (const json& c : conditions.is_array() ? conditions : json::array()) {
        if (StringField(c, "type") == "Established" && StringField(c, "status") == "True") {
          return true;
        }
      }
      return false;
    };
    crd_established_ = established(*crd);
    kube::WatchOptions options;
    options.resource_version = MetaString(*crd, "resourceVersion");
    options.field_selector = "metadata.name=" + MetaString(*crd, "name");
    options.timeout_seconds = 30;
    if (!crd_established_) {
      const absl::Status watched = kube.Watch(crds, options, [&](const kube::WatchEvent& e) {
        crd_established_ = established(e.object);
        return !crd_established_;
      });
      ASSERT_TRUE(watched.ok()) << watched;
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(server_->ok()) << "the API server did not start; see " << server_->log_path();
    ASSERT_TRUE(crd_established_) << "the TrainingJob CRD was not Established within 30 s";
  }

  static std::string Jobs() {
    return kube::CollectionPath("paci.dev", "v1alpha1", "default", "trainingjobs");
  }

  // The example TrainingJob under `name`, as kubectl apply would create it.
  json CreateExample(const std::string& name) {
    json job = YamlObject("examples/trainingjob.yaml");
    job["metadata"]["name"] = name;
    absl::StatusOr<json> created = kube_.Create(Jobs(), job);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.value_or(json::object());
  }

  // Writes `status` over the job's, as the operator would.
  void SetStatus(const std::string& name, const json& status) {
    absl::StatusOr<json> job = kube_.Get(Jobs() + "/" + name);
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<json> written = kube_.UpdateStatus(
        Jobs() + "/" + name, *job, [&](json& object) { object["status"] = status; });
    ASSERT_TRUE(written.ok()) << written.status();
  }

  static kube::TestApiServer* server_;
  static bool crd_established_;
  kube::KubeClient kube_{server_->client_options()};
};

kube::TestApiServer* KubeJobServerTest::server_ = nullptr;
bool KubeJobServerTest::crd_established_ = false;

json Status(const std::string& phase, int64_t step) {
  return {{"phase", phase}, {"step", step}, {"totalSteps", 60}, {"attempt", 1},
          {"stages", json::array({{{"stage", 0}, {"replica", 0}, {"pod", "w-0"}}})}};
}

TEST_F(KubeJobServerTest, AMissingTrainingJobIsNotFoundNamingItAndItsNamespace) {
  absl::StatusOr<op::TrainingJob> job = GetTrainingJob(kube_, "", "no-such-job");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("no TrainingJob no-such-job in namespace default"));
  absl::StatusOr<op::TrainingJob> watched =
      WatchTrainingJob(kube_, "", "no-such-job", [](const op::TrainingJob&) {});
  EXPECT_EQ(watched.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KubeJobServerTest, GetReadsTheStatusTheOperatorWrote) {
  CreateExample("get-me");
  json status = Status("Running", 40);
  status["checkpointStep"] = 30;
  status["coordinatorJob"] = "get-me-0123abcd-g1";
  SetStatus("get-me", status);
  absl::StatusOr<op::TrainingJob> job = GetTrainingJob(kube_, "default", "get-me");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string text = FormatTrainingJob(*job, absl::Now());
  EXPECT_THAT(text, HasSubstr("trainingjob: default/get-me\nphase:       Running\n"));
  EXPECT_THAT(text, HasSubstr("coordinator: get-me-0123abcd-g1 (attempt 1, restarts 0)"));
  EXPECT_THAT(text, HasSubstr("step:        40/60 (checkpoint step 30)"));
  EXPECT_THAT(text, HasSubstr("stages:      2 x 1 replicas"));  // the example's spec
  EXPECT_THAT(text, HasSubstr("stage 0 replica 0  pod w-0"));
}

// Each stored version, in order, until the job ends; a watch the server cuts
// on the way is resumed without losing a version.
TEST_F(KubeJobServerTest, WatchFollowsEveryChangeToTheEndThroughACutWatch) {
  CreateExample("watch-me");
  absl::Mutex mutex;
  std::vector<int64_t> steps;
  std::vector<std::string> phases;
  // The watcher runs on this thread; the "operator" writes from another.
  std::thread writer([&] {
    auto wait_for = [&](size_t n) {  // until the watcher has seen n versions (at most 30 s)
      const auto seen = [&] { return steps.size() >= n; };
      absl::MutexLock lock(&mutex);
      EXPECT_TRUE(mutex.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(30))) << n;
    };
    wait_for(1);  // the watcher has the job
    SetStatus("watch-me", Status("Running", 10));
    wait_for(2);
    EXPECT_TRUE(server_->Control("drop-watches"));
    SetStatus("watch-me", Status("Running", 20));
    wait_for(3);
    SetStatus("watch-me", Status("Succeeded", 60));
  });
  absl::StatusOr<op::TrainingJob> last =
      WatchTrainingJob(kube_, "default", "watch-me", [&](const op::TrainingJob& job) {
        absl::MutexLock lock(&mutex);
        steps.push_back(job.status.step.value_or(0));
        phases.push_back(job.status.phase);
      });
  writer.join();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->status.phase, "Succeeded");
  absl::MutexLock lock(&mutex);
  // The job as created (no status), then each write; a version may be handed
  // over twice (read again after the cut), never out of order.
  ASSERT_GE(steps.size(), 4u);
  EXPECT_EQ(steps.front(), 0);
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  for (int64_t step : {10, 20, 60}) {
    EXPECT_NE(std::find(steps.begin(), steps.end(), step), steps.end()) << step;
  }
  EXPECT_EQ(phases.back(), "Succeeded");
}

TEST_F(KubeJobServerTest, WatchOfAJobThatIsDeletedEndsNotFoundSayingSo) {
  CreateExample("delete-me");
  absl::Notification watching;  // the watcher has the job
  std::thread deleter([&] {
    EXPECT_TRUE(watching.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_TRUE(kube_.Delete(Jobs() + "/delete-me").ok());
  });
  absl::StatusOr<op::TrainingJob> last =
      WatchTrainingJob(kube_, "default", "delete-me", [&](const op::TrainingJob&) {
        if (!watching.HasBeenNotified()) watching.Notify();
      });
  deleter.join();
  EXPECT_EQ(last.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(last.status().message(),
              HasSubstr("TrainingJob delete-me in namespace default was deleted"));
}

}  // namespace
}  // namespace paci
