#include "common/elastic_shape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

// A spec of P stages and R replicas, `pipeline_extra` in its pipeline, with a
// checkpoint directory, as written (no defaults).
v1::JobSpec Written(int P, int R, const std::string& pipeline_extra,
                    const std::string& more = "checkpoint: {directory: /ckpt, interval: 5}\n") {
  const std::string yaml = absl::StrCat(
      "name: e\nmodel: {vocab_size: 96, num_layers: 8, d_model: 32, num_heads: 4, seq_len: 8}\n"
      "pipeline: {num_stages: ", P, ", data_parallel: ", R, ", micro_batch_size: 2",
      pipeline_extra, "}\noptimizer: {lr: 1e-3}\ntraining: {steps: 100}\n"
      "data: {corpus_path: x}\n", more);
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

v1::JobSpec WithDefaults(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  return spec;
}

TEST(ElasticShapeTest, ShapesGoFromTheMostWorkersDownAndTheLargestThatFitsIsChosen) {
  const v1::JobSpec spec = WithDefaults(
      Written(4, 2, ", global_batch: 16, elastic: {min_stages: 2, max_stages: 4, max_replicas: 2}"));
  EXPECT_TRUE(IsElastic(spec));
  EXPECT_EQ(spec.pipeline().elastic().min_replicas(), 1);
  EXPECT_EQ(spec.pipeline().elastic().grace_seconds(), 60);
  EXPECT_EQ(spec.pipeline().elastic().min_resize_interval_seconds(), 300);
  const std::vector<ElasticShape> shapes = ElasticShapes(spec);
  ASSERT_EQ(shapes.size(), 6u);
  EXPECT_EQ(shapes.front(), (ElasticShape{4, 2}));
  EXPECT_EQ(shapes[1], (ElasticShape{3, 2}));
  EXPECT_EQ(shapes[2], (ElasticShape{4, 1}));  // 4 workers: the most stages first
  EXPECT_EQ(shapes[3], (ElasticShape{2, 2}));
  EXPECT_EQ(shapes.back(), (ElasticShape{2, 1}));
  EXPECT_EQ(LargestShapeWithin(spec, 8), (ElasticShape{4, 2}));
  EXPECT_EQ(LargestShapeWithin(spec, 7), (ElasticShape{3, 2}));
  EXPECT_EQ(LargestShapeWithin(spec, 5), (ElasticShape{4, 1}));
  EXPECT_EQ(LargestShapeWithin(spec, 3), (ElasticShape{3, 1}));
  EXPECT_EQ(LargestShapeWithin(spec, 1), std::nullopt);
  EXPECT_EQ(MostWorkers(spec), 8);
  EXPECT_EQ(FewestWorkers(spec), 2);
  EXPECT_EQ(ShapeName({4, 1}), "4 stages x 1 replica");
  // Without pipeline.elastic: its own shape only.
  const v1::JobSpec fixed = WithDefaults(Written(2, 1, ", accumulation: 2"));
  EXPECT_FALSE(IsElastic(fixed));
  EXPECT_EQ(ElasticShapes(fixed), std::vector<ElasticShape>{(ElasticShape{2, 1})});
  EXPECT_EQ(LargestShapeWithin(fixed, 5), (ElasticShape{2, 1}));
  EXPECT_EQ(MostWorkers(fixed), 2);
  EXPECT_EQ(FewestWorkers(fixed), 2);
  EXPECT_TRUE(ValidateElastic(fixed).ok());
}

// The global batch stays; the accumulation follows it at R'; an explicit
// cut (valid at one P) becomes the balanced one.
TEST(ElasticShapeTest, AResizedSpecKeepsTheGlobalBatch) {
  const v1::JobSpec spec = WithDefaults(Written(
      4, 2, ", accumulation: 4, partition: '2,5,9', elastic: {min_stages: 2, max_stages: 4, "
            "max_replicas: 2}"));
  EXPECT_EQ(GlobalBatch(spec.pipeline()), 16);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const ElasticShape& shape : ElasticShapes(spec)) {
    SCOPED_TRACE(ShapeName(shape));
    const v1::JobSpec resized = ResizedJobSpec(spec, shape);
    EXPECT_EQ(resized.pipeline().num_stages(), shape.stages);
    EXPECT_EQ(resized.pipeline().data_parallel(), shape.replicas);
    EXPECT_EQ(GlobalBatch(resized.pipeline()), 16);
    EXPECT_EQ(resized.pipeline().accumulation(), 16 / (2 * shape.replicas));
    // Its own cut at its own shape; the balanced one elsewhere.
    EXPECT_EQ(resized.pipeline().partition(), shape == ShapeOf(spec) ? "2,5,9" : "balanced");
    EXPECT_TRUE(ValidateJobSpec(resized).ok()) << ValidateJobSpec(resized);
  }
}

// The method's defaults follow the shape: the correction and warm-up chosen
// for 4 stages are chosen again at 1 (no drift, nothing to correct); values
// the job gave stay.
TEST(ElasticShapeTest, TheDefaultCorrectionAndWarmUpAreChosenAgainAtEachShape) {
  const v1::JobSpec spec = WithDefaults(
      Written(4, 1, ", accumulation: 3, elastic: {min_stages: 1, max_stages: 4}"));
  EXPECT_EQ(spec.pipeline().drift_correction(), "predict");
  EXPECT_GT(spec.pipeline().warmup_steps(), 0);
  const v1::JobSpec one = ResizedJobSpec(spec, {1, 1});
  EXPECT_EQ(one.pipeline().drift_correction(), "none");
  EXPECT_EQ(one.pipeline().warmup_steps(), 0);
  const v1::JobSpec back = ResizedJobSpec(one, {4, 1});
  EXPECT_EQ(back.pipeline().drift_correction(), "predict");
  EXPECT_EQ(back.pipeline().warmup_steps(), spec.pipeline().warmup_steps());
  const v1::JobSpec given = WithDefaults(Written(
      4, 1, ", accumulation: 3, drift_correction: staleness, warmup_steps: 7, "
            "elastic: {min_stages: 2, max_stages: 4}"));
  const v1::JobSpec two = ResizedJobSpec(given, {2, 1});
  EXPECT_EQ(two.pipeline().drift_correction(), "staleness");
  EXPECT_EQ(two.pipeline().warmup_steps(), 7);
  EXPECT_TRUE(ValidateJobSpec(given).ok()) << ValidateJobSpec(given);
}

// What an elastic range may not be: each refusal names the field, or the
// first shape of the range that is no valid job.
TEST(ElasticShapeTest, ARangeThatCannotRunIsRefusedNamingTheFieldOrTheShape) {
  struct Case {
    v1::JobSpec spec;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Written(2, 1, ", accumulation: 2, elastic: {min_stages: 3, max_stages: 4}"),
       "pipeline.elastic.min_stages: must be between 1 and pipeline.num_stages (2), got 3"},
      {Written(2, 1, ", accumulation: 2, elastic: {min_stages: 1, max_stages: 1}"),
       "pipeline.elastic.max_stages: must be between pipeline.num_stages (2) and 64, got 1"},
      {Written(2, 2, ", accumulation: 2, elastic: {min_stages: 1, max_stages: 2, min_replicas: 3}"),
       "pipeline.elastic.min_replicas: must be between 1 and pipeline.data_parallel (2), got 3"},
      {Written(2, 1, ", accumulation: 2, elastic: {min_stages: 1, max_stages: 2}", ""),
       "pipeline.elastic: needs checkpoint.directory"},
      {Written(2, 1, ", accumulation: 2, elastic: {min_stages: 1, max_stages: 9}"),
       "pipeline.elastic: at 9 stages x 1 replica: pipeline.num_stages: 9 stages need at least "
       "9 layers"},
      // 12 sequences do not split over 2 x 4 replicas.
      {Written(2, 1, ", global_batch: 12, elastic: {min_stages: 1, max_stages: 2, max_replicas: 4}"),
       "pipeline.elastic: at 2 stages x 4 replicas: pipeline.global_batch: must be a multiple of "
       "micro_batch_size x data_parallel (2 x 4 = 8)"},
      // D = 1 holds at 2 stages with a = 2, not at 4 stages with a = 1 (two replicas).
      {Written(2, 1, ", accumulation: 2, max_drift: 1, elastic: {min_stages: 2, max_stages: 4, "
                     "max_replicas: 2}"),
       "pipeline.elastic: at 4 stages x 2 replicas: pipeline.max_drift"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const absl::Status status = ValidateJobSpec(WithDefaults(c.spec));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace paci
