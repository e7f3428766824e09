#include "tools/job_progress.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec TwoStageSpec() {
  v1::JobSpec spec;
  spec.set_name("kjv-small");
  spec.mutable_model()->set_seq_len(64);
  spec.mutable_pipeline()->set_num_stages(2);
  spec.mutable_pipeline()->set_schedule("paci");
  spec.mutable_pipeline()->set_accumulation(2);
  spec.mutable_pipeline()->set_micro_batch_size(8);
  spec.mutable_training()->set_steps(100);
  return spec;
}

v1::JoinRequest JoinOf(int stage) {
  v1::JoinRequest join;
  join.set_job_name("kjv-small");
  join.set_stage(stage);
  join.set_link_address("127.0.0.1:" + std::to_string(5000 + stage));
  join.set_metrics_address("127.0.0.1:" + std::to_string(6000 + stage));
  join.set_pid(100 + stage);
  return join;
}

v1::StageReport ReportOf(int stage, int64_t steps) {
  v1::StageReport report;
  report.set_job_name("kjv-small");
  report.set_stage(stage);
  report.set_optimizer_steps(steps);
  return report;
}

v1::LossPoint Point(int64_t step, double loss) {
  v1::LossPoint point;
  point.set_step(step);
  point.set_loss(loss);
  return point;
}

class JobProgressTest : public ::testing::Test {
 protected:
  void JoinAll() {
    ASSERT_TRUE(progress_.OnJoin(JoinOf(0)).ok());
    ASSERT_TRUE(progress_.OnJoin(JoinOf(1)).ok());
  }

  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  JobProgress progress_{TwoStageSpec(), [this] { return now_; }};
};

TEST_F(JobProgressTest, ViewCountsJoinsAndKnowsNothingBeforeReports) {
  ASSERT_TRUE(progress_.OnJoin(JoinOf(1)).ok());
  ProgressView view = progress_.View();
  EXPECT_EQ(view.num_stages, 2);
  EXPECT_EQ(view.joined, 1);
  EXPECT_FALSE(progress_.all_joined());
  ASSERT_TRUE(progress_.OnJoin(JoinOf(0)).ok());
  view = progress_.View();
  EXPECT_TRUE(progress_.all_joined());
  EXPECT_EQ(view.step, 0);
  EXPECT_EQ(view.total_steps, 100);
  EXPECT_FALSE(view.train_loss.has_value());
  EXPECT_FALSE(view.validation_loss.has_value());
  EXPECT_FALSE(view.eta.has_value());
  EXPECT_EQ(view.tokens_per_second, 0);
  EXPECT_THAT(view.drift_max, ElementsAre(0, 0));
  EXPECT_THAT(progress_.stage_addresses(), ElementsAre("127.0.0.1:5000", "127.0.0.1:5001"));
}

TEST_F(JobProgressTest, JoinRejectsOutOfRangeAndDuplicateStages) {
  EXPECT_EQ(progress_.OnJoin(JoinOf(2)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(progress_.OnJoin(JoinOf(-1)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(progress_.OnJoin(JoinOf(0)).ok());
  const absl::Status duplicate = progress_.OnJoin(JoinOf(0));
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(duplicate.message(), HasSubstr("stage 0"));
  EXPECT_EQ(progress_.joined(), 1);
}

TEST_F(JobProgressTest, ReportBeforeJoinIsRejected) {
  EXPECT_EQ(progress_.OnReport(ReportOf(0, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(progress_.OnReport(ReportOf(5, 1)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobProgressTest, StepIsTheSlowestStagesStepAndDriftIsPerStage) {
  JoinAll();
  v1::StageReport first = ReportOf(0, 12);
  first.set_drift_max(1);
  ASSERT_TRUE(progress_.OnReport(first).ok());
  ASSERT_TRUE(progress_.OnReport(ReportOf(1, 10)).ok());
  const ProgressView view = progress_.View();
  EXPECT_EQ(view.step, 10);
  EXPECT_THAT(view.drift_max, ElementsAre(1, 0));
}

TEST_F(JobProgressTest, TokensPerSecondIsLastStageTokensOverTimeSinceAllJoined) {
  ASSERT_TRUE(progress_.OnJoin(JoinOf(0)).ok());
  now_ += absl::Seconds(30);  // waiting for stage 1 does not count
  ASSERT_TRUE(progress_.OnJoin(JoinOf(1)).ok());
  now_ += absl::Seconds(10);
  v1::StageReport first = ReportOf(0, 20);
  first.set_tokens(999'999);  // only the last stage's tokens count
  ASSERT_TRUE(progress_.OnReport(first).ok());
  v1::StageReport last = ReportOf(1, 20);
  last.set_tokens(5'000);
  ASSERT_TRUE(progress_.OnReport(last).ok());
  EXPECT_DOUBLE_EQ(progress_.View().tokens_per_second, 500);
  now_ += absl::Seconds(10);  // no newer report: the rate holds
  EXPECT_DOUBLE_EQ(progress_.View().tokens_per_second, 500);
}

TEST_F(JobProgressTest, EtaExtrapolatesTheStepRate) {
  JoinAll();
  now_ += absl::Seconds(10);
  ASSERT_TRUE(progress_.OnReport(ReportOf(0, 25)).ok());
  ASSERT_TRUE(progress_.OnReport(ReportOf(1, 20)).ok());
  const ProgressView view = progress_.View();
  ASSERT_TRUE(view.eta.has_value());
  EXPECT_EQ(*view.eta, absl::Seconds(40));  // 80 steps left at 2 steps/s
}

TEST_F(JobProgressTest, LossHistoriesAppendNewPointsAndViewShowsTheLatest) {
  JoinAll();
  v1::StageReport report = ReportOf(1, 10);
  *report.add_train_loss() = Point(5, 3.0);
  *report.add_train_loss() = Point(10, 2.5);
  ASSERT_TRUE(progress_.OnReport(report).ok());
  report = ReportOf(1, 20);
  *report.add_train_loss() = Point(20, 2.25);
  *report.add_validation_loss() = Point(20, 2.75);
  report.add_checkpoints("/ckpt/step-20/stage-1");
  ASSERT_TRUE(progress_.OnReport(report).ok());
  ASSERT_TRUE(progress_.OnReport(ReportOf(1, 21)).ok());  // no new points

  const ProgressView view = progress_.View();
  EXPECT_EQ(view.train_loss, 2.25);
  EXPECT_EQ(view.validation_loss, 2.75);
  const v1::RunSummary summary = progress_.Summary();
  ASSERT_EQ(summary.train_loss_size(), 3);
  EXPECT_EQ(summary.train_loss(0).step(), 5);
  EXPECT_EQ(summary.train_loss(2).step(), 20);
  ASSERT_EQ(summary.validation_loss_size(), 1);
  EXPECT_DOUBLE_EQ(summary.final_train_loss(), 2.25);
  EXPECT_DOUBLE_EQ(summary.final_validation_loss(), 2.75);
  EXPECT_THAT(summary.checkpoints(), ElementsAre("/ckpt/step-20/stage-1"));
}

TEST_F(JobProgressTest, SpansAppendPerStageAndStayOutOfTheLatestReport) {
  JoinAll();
  auto span = [](int64_t start, int64_t end) {
    v1::Span s;
    s.set_kind(v1::Span::FORWARD);
    s.set_start_unix_micros(start);
    s.set_end_unix_micros(end);
    return s;
  };
  v1::StageReport first = ReportOf(1, 1);
  *first.add_spans() = span(0, 10);
  *first.add_spans() = span(10, 20);
  ASSERT_TRUE(progress_.OnReport(first).ok());
  v1::StageReport second = ReportOf(1, 2);
  *second.add_spans() = span(20, 30);
  second.set_spans_dropped(4);
  ASSERT_TRUE(progress_.OnReport(second).ok());
  const std::vector<std::vector<v1::Span>> spans = progress_.Spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(spans[0].empty());
  ASSERT_EQ(spans[1].size(), 3u);
  EXPECT_EQ(spans[1][2].start_unix_micros(), 20);
  EXPECT_THAT(progress_.SpansDropped(), ElementsAre(0, 4));
}

TEST_F(JobProgressTest, FirstFailureIsKept) {
  JoinAll();
  v1::StageReport broken = ReportOf(1, 3);
  broken.set_error("loss is NaN at step 3");
  ASSERT_TRUE(progress_.OnReport(broken).ok());
  v1::StageReport collateral = ReportOf(0, 3);
  collateral.set_error("link to stage 1 closed");
  ASSERT_TRUE(progress_.OnReport(collateral).ok());
  progress_.RecordFailure({-1, "interrupted"});

  ASSERT_TRUE(progress_.failure().has_value());
  EXPECT_EQ(progress_.failure()->stage, 1);
  const v1::RunSummary summary = progress_.Summary();
  EXPECT_FALSE(summary.succeeded());
  EXPECT_EQ(summary.error(), "stage 1: loss is NaN at step 3");
}

TEST_F(JobProgressTest, SummaryWithoutFailureNamesUnfinishedStages) {
  JoinAll();
  v1::StageReport done = ReportOf(0, 100);
  done.set_finished(true);
  ASSERT_TRUE(progress_.OnReport(done).ok());
  ASSERT_TRUE(progress_.OnReport(ReportOf(1, 99)).ok());
  EXPECT_FALSE(progress_.all_finished());
  EXPECT_TRUE(progress_.finished(0));
  EXPECT_FALSE(progress_.finished(1));
  const v1::RunSummary summary = progress_.Summary();
  EXPECT_FALSE(summary.succeeded());
  EXPECT_EQ(summary.error(), "stages not finished: 1");
}

TEST_F(JobProgressTest, SummaryOfAFinishedRunIsComplete) {
  now_ += absl::Seconds(2);  // launcher start to joins
  JoinAll();
  now_ += absl::Seconds(20);
  for (int s = 0; s < 2; ++s) {
    v1::StageReport report = ReportOf(s, 100);
    report.set_forward_micro_batches(200);
    report.set_backward_micro_batches(200);
    report.set_drift_max(1 - s);
    report.set_drift_bound(1 - s);
    report.set_drift_sum(150 * (1 - s));
    report.set_drift_count(200);
    report.set_busy_seconds(15);
    report.set_idle_seconds(5);
    report.set_bytes_sent(1 << 20);
    report.set_peak_rss_bytes(int64_t{300} << 20);
    report.set_tokens(s == 1 ? 102'400 : 0);
    report.set_finished(true);
    if (s == 1) {
      *report.add_train_loss() = Point(100, 1.5);
      *report.add_validation_loss() = Point(100, 1.75);
    }
    ASSERT_TRUE(progress_.OnReport(report).ok());
  }
  now_ += absl::Seconds(1);  // shutting down

  EXPECT_TRUE(progress_.all_finished());
  const v1::RunSummary summary = progress_.Summary();
  EXPECT_TRUE(summary.succeeded());
  EXPECT_EQ(summary.error(), "");
  EXPECT_EQ(summary.job_name(), "kjv-small");
  EXPECT_EQ(summary.schedule(), "paci");
  EXPECT_EQ(summary.num_stages(), 2);
  EXPECT_EQ(summary.accumulation(), 2);
  EXPECT_EQ(summary.micro_batch_size(), 8);
  EXPECT_EQ(summary.seq_len(), 64);
  EXPECT_EQ(summary.steps(), 100);
  EXPECT_EQ(summary.steps_completed(), 100);
  EXPECT_DOUBLE_EQ(summary.final_train_loss(), 1.5);
  EXPECT_DOUBLE_EQ(summary.final_validation_loss(), 1.75);
  EXPECT_DOUBLE_EQ(summary.tokens_per_second(), 102'400 / 20.0);
  EXPECT_DOUBLE_EQ(summary.wall_seconds(), 23);
  ASSERT_EQ(summary.stages_size(), 2);
  const v1::StageSummary& first = summary.stages(0);
  EXPECT_EQ(first.stage(), 0);
  EXPECT_EQ(first.drift_max(), 1);
  EXPECT_EQ(first.drift_bound(), 1);
  EXPECT_DOUBLE_EQ(first.drift_mean(), 0.75);
  EXPECT_EQ(first.optimizer_steps(), 100);
  EXPECT_EQ(first.forward_micro_batches(), 200);
  EXPECT_EQ(first.backward_micro_batches(), 200);
  EXPECT_DOUBLE_EQ(first.busy_seconds(), 15);
  EXPECT_DOUBLE_EQ(first.idle_seconds(), 5);
  EXPECT_DOUBLE_EQ(first.idle_fraction(), 0.25);
  EXPECT_EQ(first.peak_rss_bytes(), int64_t{300} << 20);
  EXPECT_EQ(first.bytes_sent(), 1 << 20);
  EXPECT_EQ(first.link_address(), "127.0.0.1:5000");
  EXPECT_EQ(first.metrics_address(), "127.0.0.1:6000");
  EXPECT_EQ(summary.stages(1).drift_mean(), 0);
}

TEST_F(JobProgressTest, StagesThatNeverReportedGetTheSpecsDriftBound) {
  const v1::RunSummary summary = progress_.Summary();
  ASSERT_EQ(summary.stages_size(), 2);
  EXPECT_EQ(summary.stages(0).drift_bound(), 1);  // ceil((2-1-0)/2)
  EXPECT_EQ(summary.stages(1).drift_bound(), 0);
  EXPECT_EQ(summary.error(), "stages not finished: 0, 1");
}

}  // namespace
}  // namespace paci
