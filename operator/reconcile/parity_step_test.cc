// A TrainingJob's spec.parity through ReconcileTrainingJob: the runs, one
// after the other on the same pods, and the report (parity_step.h).

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/reconcile/reconcile_test_util.h"

namespace paci::op {
namespace {

using nlohmann::json;
using test::Pod;
using test::Reasons;
using test::World;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

json ParityJob() {
  json job = test::Job();
  job["spec"]["parity"] = {{"seeds", {1, 2}}, {"steps", 20}};
  return job;
}

// The job with `status`, its two pods running, its Service and policy made.
ObservedWorld Running(json job, const json& status) {
  job["status"] = status;
  ObservedWorld world = World(std::move(job));
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  world.service_exists = true;
  world.network_policy_exists = true;
  return world;
}

// The coordinator's job of a run that ended in `phase`, its validation losses
// at steps 5, 10, 15 and 20 at those seconds.
v1::Job Ended(const v1::JobSpec& spec, v1::JobPhase phase, const std::vector<double>& losses,
              const std::vector<double>& seconds, double tokens_per_second) {
  v1::Job job;
  job.set_name(spec.name());
  *job.mutable_spec() = spec;
  job.mutable_status()->set_phase(phase);
  job.mutable_status()->set_step(20);
  job.mutable_status()->set_tokens_per_second(tokens_per_second);
  for (size_t i = 0; i < losses.size(); ++i) {
    v1::LossPoint* point = job.mutable_status()->add_validation_loss_history();
    point->set_step(5 * static_cast<int64_t>(i + 1));
    point->set_loss(losses[i]);
    point->set_seconds(seconds[i]);
  }
  if (!losses.empty()) job.mutable_status()->set_validation_loss(losses.back());
  return job;
}

// Two seeds, four runs, each submitted once the one before ended, on the
// pods of the job; then the report. The curves are common/parity_test.cc's
// hand computation: seed 1 +1% and 1.5x to the flush's loss at 75% (step 15),
// never its final loss; seed 2 -1%, 1.125x and 1.2x.
TEST(ParityCheckTest, RunsTheJobAndItsFlushTwinPerSeedOnTheSamePodsThenReportsTheGap) {
  const std::vector<std::vector<double>> losses = {
      {2.5, 2.1, 2.05, 2.02}, {2.4, 2.2, 2.1, 2.0}, {2.5, 2.2, 2.1, 1.98}, {2.4, 2.2, 2.1, 2.0}};
  const std::vector<std::vector<double>> seconds = {
      {2, 6, 8, 10}, {3, 6, 9, 12}, {2, 4, 8, 10}, {3, 6, 9, 12}};
  json status = json::object();
  for (int run = 1; run <= 4; ++run) {
    SCOPED_TRACE(run);
    const bool flush = run % 2 == 0;
    const int seed = run <= 2 ? 1 : 2;
    const ReconcileActions submit = ReconcileTrainingJob(Running(ParityJob(), status), {});
    ASSERT_TRUE(submit.submit.has_value());
    const v1::JobSpec& spec = *submit.submit;
    EXPECT_EQ(spec.name(), "kjv-01234567-g1-p" + std::to_string(run));
    EXPECT_EQ(spec.pipeline().schedule(), flush ? "1f1b-flush" : "paci");
    EXPECT_EQ(spec.pipeline().accumulation(), 2) << "the same global batch";
    EXPECT_EQ(spec.model().init_seed(), seed);
    EXPECT_EQ(spec.data().seed(), seed);
    EXPECT_EQ(spec.training().steps(), 20);
    EXPECT_EQ(spec.training().eval_interval(), 5);  // at least 5: an evaluation drains the pipe
    EXPECT_FALSE(spec.has_checkpoint());
    EXPECT_THAT(submit.create_pods, IsEmpty()) << "the same pods";
    EXPECT_THAT(submit.delete_pods, IsEmpty());
    ASSERT_TRUE(submit.status.has_value());
    EXPECT_EQ((*submit.status)["parity"]["run"], run);
    EXPECT_EQ((*submit.status)["parity"]["totalRuns"], 4);
    EXPECT_THAT(Reasons(submit), Contains("ParityRun"));
    status = *submit.status;

    ObservedWorld ended = Running(ParityJob(), status);
    ended.coordinator_job =
        Ended(spec, v1::SUCCEEDED, losses[run - 1], seconds[run - 1], flush ? 1000 : 1200);
    const ReconcileActions after = ReconcileTrainingJob(ended, {});
    ASSERT_TRUE(after.status.has_value());
    status = *after.status;
    EXPECT_THAT(Reasons(after), Contains("ParityRunEnded"));
    ASSERT_EQ(status["parity"]["runs"].size(), static_cast<size_t>(run));
    const json& record = status["parity"]["runs"][run - 1];
    EXPECT_EQ(record["seed"], seed);
    EXPECT_EQ(record["role"], flush ? "flush" : "job");
    EXPECT_EQ(record["coordinatorJob"], spec.name());
    EXPECT_EQ(record["curve"].size(), 4u);
    if (run < 4) {
      EXPECT_EQ(status["phase"], "Running");
      EXPECT_FALSE(status.contains("coordinatorJob")) << "the next run is submitted";
      EXPECT_FALSE(status.contains("completionTime"));
      ASSERT_TRUE(after.requeue_after.has_value());
      EXPECT_EQ(*after.requeue_after, absl::ZeroDuration());
      EXPECT_THAT(after.delete_pods, IsEmpty());
      continue;
    }
    EXPECT_EQ(status["phase"], "Succeeded");
    EXPECT_THAT(Reasons(after), Contains("ParityChecked"));
    EXPECT_THAT(after.delete_pods, Contains("kjv-worker-0"));
    const json& parity = status["parity"];
    EXPECT_DOUBLE_EQ(parity["meanGapPercent"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(parity["gapSpreadPercent"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(parity["throughputRatio"].get<double>(), 1.2);
    EXPECT_DOUBLE_EQ(parity["speedupTo75"].get<double>(), 1.3125);
    EXPECT_FALSE(parity.contains("speedupToFinal")) << "seed 1 never reached it";
    ASSERT_EQ(parity["seeds"].size(), 2u);
    EXPECT_DOUBLE_EQ(parity["seeds"][0]["gapPercent"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(parity["seeds"][1]["speedupToFinal"].get<double>(), 1.2);
    bool found = false;
    for (const json& condition : status["conditions"]) {
      if (condition["type"] != "Succeeded") continue;
      found = true;
      EXPECT_EQ(condition["reason"], "ParityChecked");
      EXPECT_THAT(condition["message"].get<std::string>(),
                  HasSubstr("+0.00% (spread 2.00 points) at 1.20x the flush's tokens/s"));
    }
    EXPECT_TRUE(found);
  }
}

// Runs 1 and 2 of a check of ParityJob(), recorded; the status after them.
json TwoRunsRecorded() {
  json status = json::object();
  for (int run = 1; run <= 2; ++run) {
    const ReconcileActions submit = ReconcileTrainingJob(Running(ParityJob(), status), {});
    EXPECT_TRUE(submit.submit.has_value() && submit.status.has_value());
    ObservedWorld ended = Running(ParityJob(), *submit.status);
    ended.coordinator_job = Ended(*submit.submit, v1::SUCCEEDED, {2.5, 2.2, 2.1, 2.0},
                                  {2, 4, 6, 8}, 1000);
    status = *ReconcileTrainingJob(ended, {}).status;
  }
  EXPECT_EQ(status["parity"]["runs"].size(), 2u);
  return status;
}

// A check suspended, edited and resumed (its spec frozen otherwise): the runs
// of the old spec are not compared with the new one's; it starts over.
TEST(ParityCheckTest, RunsOfAnotherSpecAreDroppedAndTheCheckStartsOver) {
  const json status = TwoRunsRecorded();
  const ReconcileActions same = ReconcileTrainingJob(Running(ParityJob(), status), {});
  ASSERT_TRUE(same.submit.has_value());
  EXPECT_EQ(same.submit->name(), "kjv-01234567-g1-p3");
  json edited = ParityJob();
  edited["spec"]["optimizer"]["lr"] = 0.001;
  edited["metadata"]["generation"] = 3;
  const ReconcileActions again = ReconcileTrainingJob(Running(edited, status), {});
  ASSERT_TRUE(again.submit.has_value());
  EXPECT_EQ(again.submit->name(), "kjv-01234567-g3-p1");
  EXPECT_EQ(again.submit->model().init_seed(), 1);
  EXPECT_THAT(Reasons(again), Contains("ParityRestarted"));
  ASSERT_TRUE(again.status.has_value());
  EXPECT_FALSE((*again.status)["parity"].contains("runs"));
  EXPECT_EQ((*again.status)["parity"]["run"], 1);
  EXPECT_NE((*again.status)["parity"]["specDigest"], status["parity"]["specDigest"]);
}

// A long validation history is kept thinned (the CRD's 100 points), its last point kept.
TEST(ParityCheckTest, ARecordedCurveKeepsAtMostAHundredPointsAndTheLast) {
  const ReconcileActions submit = ReconcileTrainingJob(Running(ParityJob(), json::object()), {});
  ASSERT_TRUE(submit.submit.has_value() && submit.status.has_value());
  std::vector<double> losses, seconds;
  for (int i = 0; i < 1001; ++i) {
    losses.push_back(3.0 - i * 1e-3);
    seconds.push_back(i);
  }
  ObservedWorld ended = Running(ParityJob(), *submit.status);
  ended.coordinator_job = Ended(*submit.submit, v1::SUCCEEDED, losses, seconds, 1000);
  const ReconcileActions after = ReconcileTrainingJob(ended, {});
  ASSERT_TRUE(after.status.has_value());
  const json& curve = (*after.status)["parity"]["runs"][0]["curve"];
  EXPECT_LE(curve.size(), 100u);
  EXPECT_GE(curve.size(), 50u);
  EXPECT_EQ(curve.back()["step"], 5 * 1001);
  EXPECT_DOUBLE_EQ(curve.back()["loss"].get<double>(), 2.0);
}

// A run that evaluated nowhere cannot be compared: the check fails at once, its workers stopped.
TEST(ParityCheckTest, ARunWithoutValidationLossFailsTheCheckAtOnce) {
  const ReconcileActions submit = ReconcileTrainingJob(Running(ParityJob(), json::object()), {});
  ASSERT_TRUE(submit.submit.has_value() && submit.status.has_value());
  ObservedWorld ended = Running(ParityJob(), *submit.status);
  ended.coordinator_job = Ended(*submit.submit, v1::SUCCEEDED, {}, {}, 1000);
  const ReconcileActions after = ReconcileTrainingJob(ended, {});
  ASSERT_TRUE(after.status.has_value());
  EXPECT_EQ((*after.status)["phase"], "Failed");
  EXPECT_THAT((*after.status)["message"].get<std::string>(),
              HasSubstr("run 1 of 4 (the job, seed 1) ended with no validation loss"));
  EXPECT_THAT(after.delete_pods, Contains("kjv-worker-0"));
  EXPECT_THAT(after.create_pods, IsEmpty());
  EXPECT_FALSE(after.requeue_after.has_value());
}

TEST(ParityCheckTest, ARunThatFailsFailsTheJob) {
  const ReconcileActions submit = ReconcileTrainingJob(Running(ParityJob(), json::object()), {});
  ASSERT_TRUE(submit.submit.has_value() && submit.status.has_value());
  ObservedWorld ended = Running(ParityJob(), *submit.status);
  ended.coordinator_job = Ended(*submit.submit, v1::FAILED, {}, {}, 0);
  ended.coordinator_job->mutable_status()->set_message("stage 1: out of memory");
  const ReconcileActions after = ReconcileTrainingJob(ended, {});
  ASSERT_TRUE(after.status.has_value());
  EXPECT_EQ((*after.status)["phase"], "Failed");
  EXPECT_FALSE((*after.status)["parity"].contains("runs"));
  bool warned = false;
  for (const KubeEvent& event : after.events) {
    if (event.reason != "ParityRunEnded") continue;
    warned = true;
    EXPECT_EQ(event.type, "Warning");
    EXPECT_THAT(event.message, HasSubstr("run 1 of 4 (the job, seed 1) ended Failed: stage 1: "
                                         "out of memory"));
  }
  EXPECT_TRUE(warned);
}

// Bad input: a check of the flush, seeds the schema would refuse (an object
// stored before it had them) fail the job naming the field; nothing is submitted.
TEST(ParityCheckTest, AFlushOrBadSeedsFailTheJobNamingTheField) {
  json of_flush = ParityJob();
  of_flush["spec"]["pipeline"]["schedule"] = "1f1b-flush";
  json no_seeds = ParityJob();
  no_seeds["spec"]["parity"]["seeds"] = json::array();
  json negative = ParityJob();
  negative["spec"]["parity"]["seeds"] = {1, -2};
  json bad_steps = ParityJob();
  bad_steps["spec"]["parity"]["steps"] = "many";
  json too_many_steps = ParityJob();
  too_many_steps["spec"]["parity"]["steps"] = 1000000001;
  for (const auto& [job, message] : std::vector<std::pair<json, std::string>>{
           {of_flush, "spec.parity: spec.pipeline.schedule: 1f1b-flush is the flush already"},
           {no_seeds, "spec.parity.seeds: give 1 to 10 seeds, got []"},
           {negative, "spec.parity.seeds: -2 is not a seed"},
           {bad_steps, "spec.parity.steps: \"many\" is not a number of steps"},
           {too_many_steps, "spec.parity.steps: 1000000001 is not a number of steps (1 to "
                            "1000000000"}}) {
    SCOPED_TRACE(message);
    const ReconcileActions actions = ReconcileTrainingJob(Running(job, json::object()), {});
    EXPECT_FALSE(actions.submit.has_value());
    ASSERT_TRUE(actions.status.has_value());
    EXPECT_EQ((*actions.status)["phase"], "Failed");
    EXPECT_THAT((*actions.status)["message"].get<std::string>(), HasSubstr(message));
  }
}

TEST(ParityCheckTest, OnlyAParityCheckReadsTheLossHistory) {
  EXPECT_TRUE(ReadsLossHistory(ParseTrainingJob(ParityJob())));
  EXPECT_FALSE(ReadsLossHistory(ParseTrainingJob(test::Job())));
}

}  // namespace
}  // namespace paci::op
