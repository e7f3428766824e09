#include "common/elastic_shape.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace paci {

std::string ShapeName(const ElasticShape& shape) {
  return absl::StrCat(shape.stages, shape.stages == 1 ? " stage" : " stages", " x ",
                      shape.replicas, shape.replicas == 1 ? " replica" : " replicas");
}

ElasticShape ShapeOf(const v1::JobSpec& spec) {
  return {spec.pipeline().num_stages(), std::max(1, spec.pipeline().data_parallel())};
}

bool IsElastic(const v1::JobSpec& spec) { return spec.pipeline().has_elastic(); }

void ApplyElasticDefaults(v1::PipelineSpec* pipeline) {
  if (!pipeline->has_elastic()) return;
  v1::ElasticSpec* elastic = pipeline->mutable_elastic();
  if (!elastic->has_min_replicas()) elastic->set_min_replicas(1);
  if (!elastic->has_max_replicas()) {
    elastic->set_max_replicas(std::max(1, pipeline->data_parallel()));
  }
  if (!elastic->has_grace_seconds()) elastic->set_grace_seconds(60);
  if (!elastic->has_min_resize_interval_seconds()) elastic->set_min_resize_interval_seconds(300);
}

v1::JobSpec ResizedJobSpec(const v1::JobSpec& spec, const ElasticShape& shape) {
  if (shape == ShapeOf(spec)) return spec;  // as submitted: its own partition and all
  v1::JobSpec resized = spec;
  v1::PipelineSpec* pipeline = resized.mutable_pipeline();
  // The drift correction and warm-up the defaults chose for the submitted
  // shape are chosen again for this one; a value the job gave stays (one
  // that equals the default is taken as the default).
  v1::JobSpec defaulted = spec;
  defaulted.mutable_pipeline()->clear_drift_correction();
  defaulted.mutable_pipeline()->clear_warmup_steps();
  ApplyJobSpecDefaults(&defaulted);
  if (spec.pipeline().drift_correction() == defaulted.pipeline().drift_correction()) {
    pipeline->clear_drift_correction();
  }
  if (spec.pipeline().warmup_steps() == defaulted.pipeline().warmup_steps()) {
    pipeline->clear_warmup_steps();
  }
  const int64_t global_batch = GlobalBatch(spec.pipeline());
  pipeline->set_num_stages(shape.stages);
  pipeline->set_data_parallel(shape.replicas);
  pipeline->set_global_batch(static_cast<int32_t>(global_batch));
  pipeline->clear_accumulation();  // derived again from the global batch at R'
  if (pipeline->partition() != "balanced" && pipeline->partition() != "even") {
    pipeline->set_partition("balanced");
  }
  ApplyJobSpecDefaults(&resized);
  return resized;
}

std::vector<ElasticShape> ElasticShapes(const v1::JobSpec& spec) {
  if (!IsElastic(spec)) return {ShapeOf(spec)};
  const v1::ElasticSpec& elastic = spec.pipeline().elastic();
  std::vector<ElasticShape> shapes;
  for (int p = elastic.min_stages(); p <= elastic.max_stages(); ++p) {
    for (int r = std::max(1, elastic.min_replicas()); r <= std::max(1, elastic.max_replicas());
         ++r) {
      shapes.push_back({p, r});
    }
  }
  std::sort(shapes.begin(), shapes.end(), [](const ElasticShape& a, const ElasticShape& b) {
    return a.workers() != b.workers() ? a.workers() > b.workers() : a.stages > b.stages;
  });
  return shapes;
}

int MostWorkers(const v1::JobSpec& spec) { return ElasticShapes(spec).front().workers(); }

int FewestWorkers(const v1::JobSpec& spec) { return ElasticShapes(spec).back().workers(); }

std::optional<ElasticShape> LargestShapeWithin(const v1::JobSpec& spec, int workers) {
  for (const ElasticShape& shape : ElasticShapes(spec)) {
    if (shape.workers() <= workers) return shape;
  }
  return std::nullopt;
}

namespace {

// Each field of pipeline.elastic within its bounds: those the spec's own
// shape sets, and the field's limits.
absl::Status ValidateElasticRanges(const v1::PipelineSpec& pipeline) {
  const v1::ElasticSpec& e = pipeline.elastic();
  const std::string P = absl::StrCat("pipeline.num_stages (", pipeline.num_stages(), ")");
  const std::string R = absl::StrCat("pipeline.data_parallel (", pipeline.data_parallel(), ")");
  struct Range {
    const char* field;
    int value, low, high;
    std::string low_name, high_name;
  };
  const Range ranges[] = {
      {"min_stages", e.min_stages(), 1, pipeline.num_stages(), "1", P},
      {"max_stages", e.max_stages(), pipeline.num_stages(), 64, P, "64"},
      {"min_replicas", e.min_replicas(), 1, pipeline.data_parallel(), "1", R},
      {"max_replicas", e.max_replicas(), pipeline.data_parallel(), 256, R, "256"},
      {"grace_seconds", e.grace_seconds(), 0, 86400, "0", "86400"},
      {"min_resize_interval_seconds", e.min_resize_interval_seconds(), 0, 86400, "0", "86400"}};
  for (const Range& r : ranges) {
    if (r.value < r.low || r.value > r.high) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline.elastic.", r.field,
                                                     ": must be between ", r.low_name, " and ",
                                                     r.high_name, ", got ", r.value));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateElastic(const v1::JobSpec& spec) {
  if (!IsElastic(spec)) return absl::OkStatus();
  const v1::PipelineSpec& pipeline = spec.pipeline();
  if (absl::Status ranges = ValidateElasticRanges(pipeline); !ranges.ok()) return ranges;
  if (GlobalBatch(pipeline) > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.elastic: the global batch, accumulation x micro_batch_size x data_parallel = ",
        GlobalBatch(pipeline), ", must be at most 2^30 to stay fixed from shape to shape"));
  }
  if (spec.checkpoint().directory().empty()) {
    return absl::InvalidArgumentError(
        "pipeline.elastic: needs checkpoint.directory: a job changes shape by resuming from its "
        "last checkpoint");
  }
  if (spec.runtime().stage_devices_size() > 0) {
    return absl::InvalidArgumentError(
        "pipeline.elastic: runtime.stage_devices names a device per stage of one shape; give "
        "runtime.device instead");
  }
  const std::vector<ElasticShape> shapes = ElasticShapes(spec);
  constexpr size_t kMostShapesChecked = 4096;
  if (shapes.size() > kMostShapesChecked) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.elastic: ", shapes.size(), " shapes in range; at most ", kMostShapesChecked));
  }
  for (const ElasticShape& shape : shapes) {
    v1::JobSpec resized = ResizedJobSpec(spec, shape);
    resized.mutable_pipeline()->clear_elastic();  // its own rules, not this range again
    if (absl::Status valid = ValidateJobSpec(resized); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline.elastic: at ", ShapeName(shape),
                                                     ": ", valid.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace paci
