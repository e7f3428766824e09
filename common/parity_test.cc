#include "common/parity.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

// A spec as written: no accumulation (the global batch gives it), no warm-up or
// correction of the user's in the second form.
v1::JobSpec Written(bool method_given = true) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(
      "name: tiny\n"
      "model: {vocab_size: 80, num_layers: 4, d_model: 32, num_heads: 4, seq_len: 16}\n"
      "pipeline: {num_stages: 4, global_batch: 24, micro_batch_size: 3, max_drift: 1",
      method_given ? ", drift_correction: delay-comp, warmup_steps: 50" : "", "}\n",
      "optimizer: {lr: 1e-3}\n"
      "training: {steps: 600, eval_interval: 100}\n"
      "data: {corpus_path: text.txt}\n"
      "checkpoint: {directory: runs/tiny, interval: 100, resume: true}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

v1::JobSpec Defaulted(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

TEST(MakeParityRunTest, SetsTheSeedsShortensTheRunAndNeverTouchesTheJobsCheckpoints) {
  v1::JobSpec run = Written();
  MakeParityRun(7, 40, "job", &run);
  run = Defaulted(run);
  EXPECT_EQ(run.name(), "tiny-job-s7");
  EXPECT_EQ(run.model().init_seed(), 7);
  EXPECT_EQ(run.data().seed(), 7);
  EXPECT_EQ(run.training().steps(), 40);
  EXPECT_EQ(run.training().eval_interval(), 5);  // steps / 20 = 2, but at least 5
  v1::JobSpec longer = Written();
  MakeParityRun(7, 300, "job", &longer);
  EXPECT_EQ(Defaulted(longer).training().eval_interval(), 15);  // steps / 20
  EXPECT_EQ(run.pipeline().warmup_steps(), 40);   // at most the run
  EXPECT_EQ(run.pipeline().drift_correction(), "delay-comp");
  EXPECT_FALSE(run.has_checkpoint());
  // Steps 0: the spec's own schedule.
  v1::JobSpec whole = Written();
  MakeParityRun(1, 0, "job", &whole);
  whole = Defaulted(whole);
  EXPECT_EQ(whole.training().steps(), 600);
  EXPECT_EQ(whole.training().eval_interval(), 100);
  EXPECT_EQ(whole.pipeline().warmup_steps(), 50);
  // Left to the automatic default, the warm-up follows the shortened run: 0.15 of it at
  // P = 4, a = 8 (0.8 of the (1+2+3)/32 of forwards that cross a step).
  v1::JobSpec automatic = Written(/*method_given=*/false);
  MakeParityRun(1, 40, "job", &automatic);
  automatic = Defaulted(automatic);
  EXPECT_EQ(automatic.pipeline().warmup_steps(), 6);
  EXPECT_EQ(automatic.pipeline().drift_correction(), "predict");
}

// async-1f1b derives its accumulation of 1; its twin keeps it (the flush derives none).
TEST(MakeFlushTwinTest, KeepsTheAccumulationAnAsynchronousScheduleDerived) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      "name: a\nmodel: {vocab_size: 80, num_layers: 4, d_model: 32, num_heads: 4, seq_len: 16}\n"
      "pipeline: {num_stages: 2, schedule: async-1f1b, micro_batch_size: 3}\n"
      "optimizer: {lr: 1e-3}\ntraining: {steps: 20}\ndata: {corpus_path: text.txt}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  MakeFlushTwin(&*spec);
  const v1::JobSpec twin = Defaulted(*spec);
  EXPECT_EQ(twin.pipeline().schedule(), "1f1b-flush");
  EXPECT_EQ(twin.pipeline().accumulation(), 1);
}

TEST(MakeFlushTwinTest, IsTheFlushWithTheSameBatchAndNothingAsynchronous) {
  const v1::JobSpec job = Defaulted(Written());
  v1::JobSpec twin = Written();
  MakeFlushTwin(&twin);
  twin = Defaulted(twin);
  EXPECT_EQ(twin.pipeline().schedule(), "1f1b-flush");
  EXPECT_FALSE(twin.pipeline().has_max_drift());
  EXPECT_EQ(twin.pipeline().drift_correction(), "none");
  EXPECT_EQ(twin.pipeline().warmup_steps(), 0);
  EXPECT_EQ(twin.pipeline().accumulation(), 8);
  EXPECT_EQ(twin.pipeline().accumulation(), job.pipeline().accumulation());
  EXPECT_EQ(GlobalBatch(twin.pipeline()), GlobalBatch(job.pipeline()));
  EXPECT_EQ(twin.pipeline().micro_batch_size(), job.pipeline().micro_batch_size());
  EXPECT_EQ(twin.optimizer().SerializeAsString(), job.optimizer().SerializeAsString());
  EXPECT_EQ(twin.model().SerializeAsString(), job.model().SerializeAsString());
  EXPECT_EQ(twin.data().SerializeAsString(), job.data().SerializeAsString());
}

// A run whose validation losses were `losses` at seconds `seconds`, steps 25 apart.
v1::RunSummary Summary(const std::string& schedule, const std::vector<double>& losses,
                   const std::vector<double>& seconds, double tokens_per_second) {
  v1::RunSummary run;
  run.set_job_name("tiny");
  run.set_schedule(schedule);
  run.set_num_stages(2);
  run.set_accumulation(4);
  run.set_micro_batch_size(6);
  run.set_data_parallel(1);
  run.set_global_batch(24);
  run.set_steps(25 * static_cast<int64_t>(losses.size()));
  run.set_tokens_per_second(tokens_per_second);
  run.set_drift_correction(schedule == "paci" ? "predict" : "none");
  run.set_warmup_steps(schedule == "paci" ? 10 : 0);
  for (size_t i = 0; i < losses.size(); ++i) {
    v1::LossPoint* point = run.add_validation_loss();
    point->set_step(25 * static_cast<int64_t>(i + 1));
    point->set_loss(losses[i]);
    point->set_seconds(seconds[i]);
  }
  return run;
}

// By hand. Seed 1: the job ends at 2.02 against the flush's 2.00 (+1%); the
// flush's loss at 75% of its 100 steps (step 75) is 2.10, which the job reaches
// at 6 s against the flush's 9 s (1.5x); it never reaches 2.00. Seed 2: the job
// ends at 1.98 against 2.00 (-1%), reaching 2.10 at 8 s (9 / 8 = 1.125x) and
// 2.00 at 10 s against 12 s (1.2x).
TEST(CompareParityTest, PairsBySeedAndComputesTheGapAndTheSpeedupsByHand) {
  std::vector<ParityPair> pairs(2);
  pairs[0].seed = 1;
  pairs[0].job = Summary("paci", {2.5, 2.1, 2.05, 2.02}, {2, 6, 8, 10}, 1200);
  pairs[0].flush = Summary("1f1b-flush", {2.4, 2.2, 2.1, 2.0}, {3, 6, 9, 12}, 1000);
  pairs[1].seed = 2;
  pairs[1].job = Summary("paci", {2.5, 2.2, 2.1, 1.98}, {2, 4, 8, 10}, 1200);
  pairs[1].flush = Summary("1f1b-flush", {2.4, 2.2, 2.1, 2.0}, {3, 6, 9, 12}, 1000);
  absl::StatusOr<ParityReport> report = CompareParity(pairs);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->seeds.size(), 2u);
  EXPECT_NEAR(report->seeds[0].gap_pct, 1.0, 1e-9);
  EXPECT_NEAR(report->seeds[1].gap_pct, -1.0, 1e-9);
  EXPECT_NEAR(*report->seeds[0].speedup_75, 1.5, 1e-9);
  EXPECT_FALSE(report->seeds[0].speedup_final.has_value());
  EXPECT_NEAR(*report->seeds[1].speedup_75, 1.125, 1e-9);
  EXPECT_NEAR(*report->seeds[1].speedup_final, 1.2, 1e-9);
  EXPECT_NEAR(report->mean_gap_pct, 0.0, 1e-9);
  EXPECT_NEAR(report->gap_spread_pct, 2.0, 1e-9);
  EXPECT_NEAR(report->mean_job_loss, 2.0, 1e-9);
  EXPECT_NEAR(report->flush_loss_spread, 0.0, 1e-9);
  EXPECT_NEAR(report->throughput_ratio, 1.2, 1e-9);
  EXPECT_NEAR(*report->mean_speedup_75, (1.5 + 1.125) / 2, 1e-9);
  EXPECT_FALSE(report->mean_speedup_final.has_value()) << "seed 1 never reached it";
  EXPECT_EQ(report->global_batch, 24);
  EXPECT_EQ(report->correction, "predict");  // the job's, as it ran
  EXPECT_EQ(report->warmup_steps, 10);

  EXPECT_EQ(ParitySummaryLine(*report),
            "+0.00% (spread 2.00 points) at 1.20x the flush's tokens/s; the flush's loss at 75% "
            "of its steps 1.31x sooner, its final loss not reached in every seed");
}

TEST(CompareParityTest, ARunWithoutValidationLossOrNoRunsIsRefused) {
  EXPECT_EQ(CompareParity({}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<ParityPair> pairs(1);
  pairs[0].seed = 4;
  pairs[0].job = Summary("paci", {}, {}, 1);
  pairs[0].flush = Summary("1f1b-flush", {2.0}, {1}, 1);
  const absl::Status status = CompareParity(pairs).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("seed 4) has no validation loss"));
}

TEST(CheckParityScheduleTest, RefusesTheFlushNamingTheField) {
  EXPECT_TRUE(CheckParitySchedule(Defaulted(Written())).ok());
  for (const char* flush : {"1f1b-flush", "gpipe"}) {
    v1::JobSpec spec = Written();
    spec.mutable_pipeline()->set_schedule(flush);
    spec.mutable_pipeline()->clear_max_drift();
    spec.mutable_pipeline()->clear_drift_correction();
    spec.mutable_pipeline()->clear_warmup_steps();
    const absl::Status status = CheckParitySchedule(Defaulted(spec));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flush;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("pipeline.schedule: ", flush, " is the flush already")));
  }
}

}  // namespace
}  // namespace paci
