#pragma once

// Elastic pipelines (pipeline.elastic in job.proto): the shapes a job may run
// at, P' stages x R' replicas, and its spec at each. What stays fixed from
// shape to shape is the global batch and the drift limit D; the accumulation
// is derived for each R'. Pure functions of the spec: the coordinator picks
// the shape (server/), the workers run the spec it hands them, and a
// checkpoint of one shape resumes at another (worker/runtime/checkpoint.h).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paci/v1/job.pb.h"

namespace paci {

struct ElasticShape {
  int stages = 1;    // P'
  int replicas = 1;  // R'
  int workers() const { return stages * replicas; }
  bool operator==(const ElasticShape& other) const {
    return stages == other.stages && replicas == other.replicas;
  }
  bool operator!=(const ElasticShape& other) const { return !(*this == other); }
};

// "4 stages x 2 replicas".
std::string ShapeName(const ElasticShape& shape);

// The shape the spec runs at: pipeline.num_stages x data_parallel.
ElasticShape ShapeOf(const v1::JobSpec& spec);

// Whether the spec has a pipeline.elastic.
bool IsElastic(const v1::JobSpec& spec);

// pipeline.elastic's defaults (min_replicas 1, max_replicas data_parallel,
// grace_seconds 60, min_resize_interval_seconds 300); nothing without it.
void ApplyElasticDefaults(v1::PipelineSpec* pipeline);

// The spec at `shape` (a spec with its defaults applied): num_stages and
// data_parallel set, the same global batch with the accumulation it gives at
// R', an explicit partition's boundaries (valid at one P only) replaced by
// "balanced", the drift correction and warm-up the defaults chose for the
// submitted shape chosen again for this one (a value the job gave stays), the
// defaults applied again; the spec itself at its own shape. Not validated.
v1::JobSpec ResizedJobSpec(const v1::JobSpec& spec, const ElasticShape& shape);

// Every shape of the range, the most workers first (then the most stages).
// Only the spec's own shape without pipeline.elastic.
std::vector<ElasticShape> ElasticShapes(const v1::JobSpec& spec);

// The workers the job's largest shape runs on (P x R without pipeline.elastic):
// the pods the operator makes for it.
int MostWorkers(const v1::JobSpec& spec);

// The workers its smallest shape runs on (P x R without pipeline.elastic):
// the fewest pods it can run with (a Kueue Workload's minCount).
int FewestWorkers(const v1::JobSpec& spec);

// The largest shape of the range that `workers` workers can run; nullopt
// when not even the smallest fits.
std::optional<ElasticShape> LargestShapeWithin(const v1::JobSpec& spec, int workers);

// pipeline.elastic of a spec with its defaults: ranges that hold the spec's
// own shape, a checkpoint.directory to resume from, no per-stage devices, and
// every shape of the range a valid job (InvalidArgument naming the first that
// is not: "pipeline.elastic: at 4 stages x 3 replicas: pipeline.global_batch:
// must be a multiple of ..."). OK without pipeline.elastic.
absl::Status ValidateElastic(const v1::JobSpec& spec);

}  // namespace paci
