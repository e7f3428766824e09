#include "tools/job_view.h"

#include <google/protobuf/util/time_util.h>

#include "gtest/gtest.h"

namespace paci {
namespace {

using google::protobuf::util::TimeUtil;

v1::Job RunningJob(absl::Time started) {
  v1::Job job;
  job.set_name("demo");
  job.mutable_spec()->mutable_pipeline()->set_num_stages(2);
  job.mutable_spec()->mutable_pipeline()->set_schedule("paci");
  job.mutable_spec()->mutable_pipeline()->set_accumulation(2);
  job.mutable_spec()->mutable_training()->set_steps(100);
  v1::JobStatus& s = *job.mutable_status();
  s.set_phase(v1::RUNNING);
  s.set_step(25);
  s.set_total_steps(100);
  *s.mutable_start_time() = TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(started));
  *s.mutable_create_time() = s.start_time();
  auto* point = s.add_train_loss_history();
  point->set_step(25);
  point->set_loss(2.5);
  s.set_train_loss(2.5);
  s.set_tokens_per_second(1234);
  for (int stage = 0; stage < 2; ++stage) {
    v1::StageStatus* st = s.add_stages();
    st->set_stage(stage);
    st->set_drift_max(1 - stage);
    st->set_drift_bound(1 - stage);
    st->set_busy_seconds(3);
    st->set_idle_seconds(1);
  }
  return job;
}

TEST(JobViewTest, ProgressExtrapolatesTheEtaFromTheStepRate) {
  const absl::Time started = absl::FromUnixSeconds(1000);
  const ProgressView view = ViewOfJob(RunningJob(started), started + absl::Seconds(10));
  EXPECT_EQ(view.step, 25);
  EXPECT_EQ(view.total_steps, 100);
  ASSERT_TRUE(view.eta.has_value());
  EXPECT_EQ(*view.eta, absl::Seconds(30));
  EXPECT_EQ(view.train_loss, 2.5);
  EXPECT_FALSE(view.validation_loss.has_value());
  EXPECT_EQ(view.drift_max, (std::vector<int64_t>{1, 0}));
}

TEST(JobViewTest, SummaryCarriesStagesAndIdleFractionAndTheReasonOfAFailure) {
  v1::Job job = RunningJob(absl::FromUnixSeconds(1000));
  job.mutable_status()->set_phase(v1::FAILED);
  job.mutable_status()->set_message("stage 1 on worker w: boom");
  const v1::RunSummary summary = SummaryOfJob(job, 12.5);
  EXPECT_FALSE(summary.succeeded());
  EXPECT_EQ(summary.error(), "stage 1 on worker w: boom");
  EXPECT_EQ(summary.num_stages(), 2);
  EXPECT_EQ(summary.stages_size(), 2);
  EXPECT_DOUBLE_EQ(summary.stages(0).idle_fraction(), 0.25);
  EXPECT_DOUBLE_EQ(summary.final_train_loss(), 2.5);
  EXPECT_DOUBLE_EQ(summary.wall_seconds(), 12.5);
  EXPECT_EQ(summary.drift_limit(), 1);  // ceil((2-1)/2), from the accumulation
}

TEST(JobViewTest, ReplicasHaveTheirOwnLinesAndSplitNoMoreBusyTimeThanOnePipeline) {
  v1::Job job = RunningJob(absl::FromUnixSeconds(1000));
  job.mutable_spec()->mutable_pipeline()->set_data_parallel(2);
  v1::ModelSpec& model = *job.mutable_spec()->mutable_model();  // a cut needs the shapes
  model.set_vocab_size(80);
  model.set_num_layers(2);
  model.set_d_model(32);
  model.set_num_heads(4);
  model.set_seq_len(16);
  job.mutable_spec()->mutable_pipeline()->set_micro_batch_size(2);
  job.mutable_spec()->mutable_pipeline()->set_partition("balanced");
  for (int stage = 0; stage < 2; ++stage) {  // replica 1's entries
    v1::StageStatus* st = job.mutable_status()->add_stages();
    st->set_stage(stage);
    st->set_replica(1);
    st->set_busy_seconds(5);
  }
  for (auto& st : *job.mutable_status()->mutable_stages()) st.set_weights_hash(0xabc + st.stage());
  const v1::RunSummary summary = SummaryOfJob(job, 1);
  EXPECT_EQ(summary.data_parallel(), 2);
  ASSERT_EQ(summary.stages_size(), 4);
  EXPECT_EQ(summary.stages(3).replica(), 1);
  EXPECT_EQ(summary.stages(3).weights_hash(), 0xabdu);
  // The shares split one pipeline's busy time: the replicas' mean, (3+3+5+5)/2.
  double predicted = 0;
  for (const auto& st : summary.stages()) predicted += st.predicted_busy_seconds();
  EXPECT_DOUBLE_EQ(predicted, 2 * 8.0);
  const std::string details = FormatJobDetails(job, absl::FromUnixSeconds(1010));
  EXPECT_NE(details.find("  1 replica 1  worker"), std::string::npos) << details;
  EXPECT_NE(details.find("weights hash 00000abd"), std::string::npos) << details;
  EXPECT_EQ(ViewOfJob(job, absl::FromUnixSeconds(1010)).num_stages, 4);  // workers to place
}

TEST(JobViewTest, TheDriftLimitIsShownGivenOrDerived) {
  v1::Job job = RunningJob(absl::FromUnixSeconds(1000));
  job.mutable_spec()->mutable_pipeline()->set_num_stages(8);
  EXPECT_NE(FormatJobDetails(job, absl::FromUnixSeconds(1010)).find("drift:      limit 4 (accumulation 2)"),
            std::string::npos)
      << FormatJobDetails(job, absl::FromUnixSeconds(1010));
  job.mutable_spec()->mutable_pipeline()->set_max_drift(5);
  EXPECT_EQ(SummaryOfJob(job, 1).drift_limit(), 5);
}

TEST(JobViewTest, StepsSkippedByTheNonFiniteGuardAreShownPerStage) {
  v1::Job job = RunningJob(absl::FromUnixSeconds(1000));
  const std::string line = "skipped 3 optimizer steps: NaN or Inf gradients";
  EXPECT_EQ(FormatJobDetails(job, absl::FromUnixSeconds(1010)).find(line), std::string::npos);
  job.mutable_status()->mutable_stages(1)->set_nonfinite_steps_skipped(3);
  const std::string details = FormatJobDetails(job, absl::FromUnixSeconds(1010));
  const size_t at = details.find(line);
  ASSERT_NE(at, std::string::npos) << details;
  EXPECT_GT(at, details.find("  1  worker")) << details;
}

TEST(JobViewTest, TableHasOneRowPerJob) {
  const absl::Time started = absl::FromUnixSeconds(1000);
  const std::string table =
      FormatJobTable({RunningJob(started), RunningJob(started)}, started + absl::Seconds(90));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
  EXPECT_NE(table.find("demo"), std::string::npos);
  EXPECT_NE(table.find("RUNNING"), std::string::npos);
  EXPECT_NE(table.find("25/100"), std::string::npos);
  EXPECT_NE(table.find("90s"), std::string::npos);
}

}  // namespace
}  // namespace paci
