#include "server/job_status.h"

#include "gtest/gtest.h"

namespace paci {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

const v1::JobCondition* Condition(const v1::JobStatus& status, const std::string& type) {
  for (const auto& c : status.conditions()) {
    if (c.type() == type) return &c;
  }
  return nullptr;
}

TEST(SetConditionTest, ANeverHeldFalseConditionIsNotListed) {
  v1::JobStatus status;
  EXPECT_FALSE(SetCondition(status, "Stalled", false, "Progressing", "", kT0));
  EXPECT_EQ(status.conditions_size(), 0);
}

TEST(SetConditionTest, TheTransitionTimeMovesOnlyWhenTheValueFlips) {
  v1::JobStatus status;
  ASSERT_TRUE(SetCondition(status, "Stalled", true, "StageStalled", "stage 1", kT0));
  const int64_t first = Condition(status, "Stalled")->last_transition_time().seconds();
  EXPECT_EQ(first, 1000);
  // The same value again: nothing changes.
  EXPECT_FALSE(SetCondition(status, "Stalled", true, "StageStalled", "stage 1", kT0 + absl::Seconds(5)));
  // Another message, same value: changed, but no transition.
  EXPECT_TRUE(SetCondition(status, "Stalled", true, "StageStalled", "stage 0", kT0 + absl::Seconds(6)));
  EXPECT_EQ(Condition(status, "Stalled")->last_transition_time().seconds(), 1000);
  // A flip moves the time.
  EXPECT_TRUE(SetCondition(status, "Stalled", false, "Progressing", "", kT0 + absl::Seconds(7)));
  EXPECT_EQ(Condition(status, "Stalled")->last_transition_time().seconds(), 1007);
  EXPECT_FALSE(Condition(status, "Stalled")->status());
  EXPECT_EQ(status.conditions_size(), 1);
}

TEST(SetPhaseTest, OnlyTheCurrentPhaseConditionHolds) {
  v1::JobStatus status;
  SetPhase(status, v1::QUEUED, "Submitted", "waiting", kT0);
  SetPhase(status, v1::RUNNING, "Placed", "attempt 1", kT0 + absl::Seconds(1));
  EXPECT_EQ(status.phase(), v1::RUNNING);
  EXPECT_EQ(status.reason(), "Placed");
  ASSERT_NE(Condition(status, "Queued"), nullptr);
  EXPECT_FALSE(Condition(status, "Queued")->status());
  EXPECT_TRUE(Condition(status, "Running")->status());
  // Phases never entered are not listed.
  EXPECT_EQ(Condition(status, "Failed"), nullptr);
  EXPECT_EQ(Condition(status, "Succeeded"), nullptr);
  EXPECT_FALSE(SetPhase(status, v1::RUNNING, "Placed", "attempt 1", kT0 + absl::Seconds(2)));
}

TEST(PhaseNameTest, SpellsPhasesAsTheTrainingJobStatus) {
  EXPECT_STREQ(PhaseName(v1::RESTARTING), "Restarting");
  EXPECT_STREQ(PhaseName(v1::CANCELLED), "Cancelled");
  EXPECT_STREQ(PhaseName(v1::JOB_PHASE_UNSPECIFIED), "Unknown");
}

TEST(IsPermanentErrorTest, ABadSpecOrCheckpointIsPermanentATransportErrorIsNot) {
  EXPECT_TRUE(IsPermanentError(static_cast<int>(absl::StatusCode::kInvalidArgument)));
  EXPECT_TRUE(IsPermanentError(static_cast<int>(absl::StatusCode::kDataLoss)));
  EXPECT_FALSE(IsPermanentError(static_cast<int>(absl::StatusCode::kUnavailable)));
  EXPECT_FALSE(IsPermanentError(static_cast<int>(absl::StatusCode::kInternal)));
}

TEST(ThinLossHistoryTest, HalvesPastTheLimitAndKeepsTheLatest) {
  google::protobuf::RepeatedPtrField<v1::LossPoint> points;
  for (int i = 0; i < 11; ++i) points.Add()->set_step(i);
  ThinLossHistory(&points, 10);
  ASSERT_EQ(points.size(), 6);
  EXPECT_EQ(points[0].step(), 1);
  EXPECT_EQ(points[4].step(), 9);
  EXPECT_EQ(points[5].step(), 10);  // the latest is always kept
  ThinLossHistory(&points, 10);
  EXPECT_EQ(points.size(), 6);  // under the limit: untouched
}

v1::JobStatus TwoStages() {
  v1::JobStatus status;
  status.add_stages()->set_stage(0);
  status.add_stages()->set_stage(1);
  return status;
}

TEST(ApplyStageReportTest, TheJobsStepIsItsSlowestStagesAndTokensCountAtTheLast) {
  v1::JobStatus status = TwoStages();
  CheckpointShards shards;
  v1::StageReport first;
  first.set_stage(0);
  first.set_optimizer_steps(7);
  first.set_drift_sum(6);
  first.set_drift_count(3);
  ApplyStageReport(first, absl::Seconds(2), status, shards);
  EXPECT_EQ(status.step(), 0);  // stage 1 has not reported
  EXPECT_DOUBLE_EQ(status.stages(0).drift_mean(), 2.0);
  EXPECT_EQ(status.tokens_per_second(), 0);
  v1::StageReport last;
  last.set_stage(1);
  last.set_optimizer_steps(5);
  last.set_tokens(1000);
  auto* point = last.add_train_loss();
  point->set_step(5);
  point->set_loss(2.5);
  last.set_busy_seconds(3);
  last.set_partition_units("[5,10) h2.attn..head");
  last.set_predicted_cost_share(0.25);
  last.set_nonfinite_steps_skipped(2);
  ApplyStageReport(last, absl::Seconds(2), status, shards);
  EXPECT_EQ(status.step(), 5);
  EXPECT_EQ(status.stages(1).nonfinite_steps_skipped(), 2);
  EXPECT_EQ(status.stages(0).nonfinite_steps_skipped(), 0);
  // The cut and what it predicts, beside what was measured.
  EXPECT_EQ(status.stages(1).partition_units(), "[5,10) h2.attn..head");
  EXPECT_DOUBLE_EQ(status.stages(1).predicted_busy_seconds(), 0.75);
  EXPECT_DOUBLE_EQ(status.stages(1).busy_seconds(), 3);
  EXPECT_DOUBLE_EQ(status.tokens_per_second(), 500);
  EXPECT_DOUBLE_EQ(status.train_loss(), 2.5);
  ASSERT_EQ(status.train_loss_history_size(), 1);
}

TEST(ApplyStageReportTest, ACheckpointCountsOnlyOnceEveryStageSavedIt) {
  v1::JobStatus status = TwoStages();
  CheckpointShards shards;
  v1::StageReport report;
  report.set_stage(1);
  report.add_checkpoint_steps(10);
  ApplyStageReport(report, absl::Seconds(1), status, shards);
  EXPECT_EQ(status.checkpoint_step(), 0);
  report.set_stage(0);
  ApplyStageReport(report, absl::Seconds(1), status, shards);
  EXPECT_EQ(status.checkpoint_step(), 10);
}

TEST(ApplyStageReportTest, ReplicasHaveTheirOwnEntriesAndReplicaZeroSpeaksForTheJob) {
  v1::JobStatus status;  // P = 2, R = 2: entries replica * 2 + stage
  for (int w = 0; w < 4; ++w) {
    v1::StageStatus* stage = status.add_stages();
    stage->set_stage(w % 2);
    stage->set_replica(w / 2);
  }
  EXPECT_EQ(NumStages(status), 2);
  CheckpointShards shards;
  auto report = [](int stage, int replica, int64_t steps) {
    v1::StageReport r;
    r.set_stage(stage);
    r.set_replica(replica);
    r.set_optimizer_steps(steps);
    r.set_weights_hash(100 + stage);
    r.set_tokens(stage == 1 ? 600 : 0);
    return r;
  };
  v1::StageReport loss_of_replica_1 = report(1, 1, 4);
  loss_of_replica_1.add_train_loss()->set_loss(9.0);
  loss_of_replica_1.add_checkpoint_steps(4);
  ApplyStageReport(loss_of_replica_1, absl::Seconds(2), status, shards);
  EXPECT_EQ(status.stages(3).optimizer_steps(), 4);
  EXPECT_EQ(status.stages(3).weights_hash(), 101u);
  EXPECT_EQ(status.train_loss_history_size(), 0);  // the loss is replica 0's to report
  EXPECT_TRUE(shards.empty());                     // and so are the checkpoints
  EXPECT_DOUBLE_EQ(status.tokens_per_second(), 300);
  v1::StageReport last = report(1, 0, 4);
  last.add_train_loss()->set_loss(2.0);
  last.add_checkpoint_steps(4);
  ApplyStageReport(last, absl::Seconds(2), status, shards);
  ApplyStageReport(report(0, 0, 5), absl::Seconds(2), status, shards);
  EXPECT_EQ(status.step(), 0);  // stage 0 of replica 1 has not reported
  ApplyStageReport(report(0, 1, 5), absl::Seconds(2), status, shards);
  EXPECT_EQ(status.step(), 4);
  EXPECT_DOUBLE_EQ(status.train_loss(), 2.0);
  EXPECT_DOUBLE_EQ(status.tokens_per_second(), 600);  // both replicas' last stages
  EXPECT_EQ(status.checkpoint_step(), 0);             // stage 0 has not saved step 4
  v1::StageReport saved = report(0, 0, 5);
  saved.add_checkpoint_steps(4);
  ApplyStageReport(saved, absl::Seconds(2), status, shards);
  EXPECT_EQ(status.checkpoint_step(), 4);
  ApplyStageReport(report(0, 2, 9), absl::Seconds(2), status, shards);  // no replica 2
  EXPECT_EQ(status.step(), 4);
}

TEST(AppendLossPointTest, AStepTrainedAgainReplacesTheEarlierAttemptsPoints) {
  google::protobuf::RepeatedPtrField<v1::LossPoint> history;
  auto point = [](int64_t step, double loss) {
    v1::LossPoint p;
    p.set_step(step);
    p.set_loss(loss);
    return p;
  };
  for (int64_t step : {10, 20, 30, 40}) AppendLossPoint(point(step, 1.0), &history);
  // The job restarted from the checkpoint at step 20: steps 30 and 40 again.
  AppendLossPoint(point(30, 2.0), &history);
  ASSERT_EQ(history.size(), 3);
  EXPECT_EQ(history[1].step(), 20);
  EXPECT_EQ(history[2].step(), 30);
  EXPECT_DOUBLE_EQ(history[2].loss(), 2.0);
  AppendLossPoint(point(40, 2.5), &history);
  for (int i = 1; i < history.size(); ++i) EXPECT_LT(history[i - 1].step(), history[i].step());
  EXPECT_DOUBLE_EQ(history.rbegin()->loss(), 2.5);
}

TEST(AppendStageSpansTest, SpansBeyondTheLimitAreCountedAsDropped) {
  v1::StageTrace trace;
  v1::StageReport report;
  for (int i = 0; i < 3; ++i) report.add_spans();
  report.set_spans_dropped(1);
  AppendStageSpans(report, 4, trace);
  EXPECT_EQ(trace.spans_size(), 3);
  EXPECT_EQ(trace.spans_dropped(), 1);
  AppendStageSpans(report, 4, trace);
  EXPECT_EQ(trace.spans_size(), 4);
  EXPECT_EQ(trace.spans_dropped(), 3);  // the worker's 1 and the 2 that did not fit
}

TEST(JobNotFoundTest, NamesTheJob) {
  absl::Status status = JobNotFound("gpt");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "no job \"gpt\"");
}

}  // namespace
}  // namespace paci
