#include "common/run_summary.h"

#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace paci {
namespace {

// A four-stage paci job of the method's settings, defaults applied.
v1::JobSpec Spec() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      "name: tiny\n"
      "model: {vocab_size: 80, num_layers: 4, d_model: 32, num_heads: 4, seq_len: 16}\n"
      "pipeline: {num_stages: 4, global_batch: 24, micro_batch_size: 3, max_drift: 1,"
      " drift_correction: delay-comp, warmup_steps: 50}\n"
      "optimizer: {lr: 1e-3}\ntraining: {steps: 600}\ndata: {corpus_path: text.txt}\n");
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  return *spec;
}

// The coordinator's job of a finished run reads as the summary a local run writes.
TEST(RunSummaryOfJobTest, TakesTheRunsShapeMethodThroughputAndValidationCurve) {
  v1::Job job;
  job.set_name("tiny");
  *job.mutable_spec() = Spec();
  job.mutable_status()->set_phase(v1::SUCCEEDED);
  job.mutable_status()->set_step(600);
  job.mutable_status()->set_tokens_per_second(1234.5);
  job.mutable_status()->set_validation_loss(2.25);
  for (int i = 1; i <= 3; ++i) {
    v1::LossPoint* point = job.mutable_status()->add_validation_loss_history();
    point->set_step(200 * i);
    point->set_loss(3.0 - 0.25 * i);
    point->set_seconds(10.0 * i);
  }
  const v1::RunSummary run = RunSummaryOfJob(job);
  EXPECT_EQ(run.job_name(), "tiny");
  EXPECT_EQ(run.schedule(), "paci");
  EXPECT_EQ(run.num_stages(), 4);
  EXPECT_EQ(run.steps(), 600);
  EXPECT_EQ(run.global_batch(), 24);
  EXPECT_EQ(run.drift_correction(), "delay-comp");
  EXPECT_EQ(run.warmup_steps(), 50);
  EXPECT_TRUE(run.succeeded());
  EXPECT_TRUE(run.error().empty());
  EXPECT_EQ(run.accumulation(), 8);  // 24 / 3
  EXPECT_EQ(run.micro_batch_size(), 3);
  EXPECT_EQ(run.seq_len(), 16);
  EXPECT_EQ(run.data_parallel(), 1);
  EXPECT_EQ(run.drift_limit(), 1);
  EXPECT_EQ(run.steps_completed(), 600);
  EXPECT_DOUBLE_EQ(run.final_validation_loss(), 2.25);
  EXPECT_EQ(run.final_train_loss(), 0) << "no train history, no final train loss";
  EXPECT_DOUBLE_EQ(run.tokens_per_second(), 1234.5);
  ASSERT_EQ(run.validation_loss_size(), 3);
  EXPECT_DOUBLE_EQ(run.validation_loss(2).loss(), 2.25);
  EXPECT_DOUBLE_EQ(run.validation_loss(2).seconds(), 30.0);
}

TEST(RunSummaryOfJobTest, AJobThatDidNotSucceedSaysWhyAndHasNoFinalLossWithoutHistory) {
  v1::Job job;
  job.set_name("tiny");
  *job.mutable_spec() = Spec();
  job.mutable_status()->set_phase(v1::FAILED);
  job.mutable_status()->set_message("stage 1: out of memory");
  job.mutable_status()->set_train_loss(9.0);  // no history: never measured
  const v1::RunSummary run = RunSummaryOfJob(job);
  EXPECT_FALSE(run.succeeded());
  EXPECT_EQ(run.error(), "stage 1: out of memory");
  EXPECT_EQ(run.final_train_loss(), 0);
  job.mutable_status()->clear_message();
  EXPECT_EQ(RunSummaryOfJob(job).error(), "FAILED");
}

}  // namespace
}  // namespace paci
