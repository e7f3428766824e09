#include "common/parity.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "common/schedule_kind.h"

namespace paci {
namespace {

double Mean(const std::vector<double>& values) {
  return values.empty() ? 0.0
                        : std::accumulate(values.begin(), values.end(), 0.0) /
                              static_cast<double>(values.size());
}

double Spread(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  return *high - *low;
}

// Seconds since training began at the first validation at or below `target`.
std::optional<double> SecondsTo(const v1::RunSummary& run, double target) {
  for (const v1::LossPoint& point : run.validation_loss()) {
    if (point.loss() <= target + 1e-12) return point.seconds();
  }
  return std::nullopt;
}

// The flush's seconds to `target` over the job's.
std::optional<double> Speedup(const v1::RunSummary& job, const v1::RunSummary& flush,
                              double target) {
  const std::optional<double> mine = SecondsTo(job, target);
  const std::optional<double> theirs = SecondsTo(flush, target);
  if (!mine || !theirs || *mine <= 0) return std::nullopt;
  return *theirs / *mine;
}

std::optional<double> MeanIfAll(const std::vector<std::optional<double>>& values) {
  std::vector<double> all;
  for (const std::optional<double>& value : values) {
    if (!value) return std::nullopt;
    all.push_back(*value);
  }
  return Mean(all);
}

}  // namespace

void MakeParityRun(int seed, int64_t steps, const std::string& role, v1::JobSpec* spec) {
  spec->set_name(absl::StrCat(spec->name(), "-", role, "-s", seed));
  spec->mutable_model()->set_init_seed(seed);
  spec->mutable_data()->set_seed(seed);
  if (steps > 0) {
    spec->mutable_training()->set_steps(steps);
    spec->mutable_training()->set_eval_interval(static_cast<int32_t>(
        std::max<int64_t>(kMinParityEvalInterval, steps / 20)));
    if (spec->pipeline().warmup_steps() > steps) spec->mutable_pipeline()->set_warmup_steps(steps);
  }
  spec->clear_checkpoint();
}

void MakeFlushTwin(v1::JobSpec* spec) {
  v1::PipelineSpec* pipeline = spec->mutable_pipeline();
  // The accumulation the job's own schedule derives when the spec leaves it and the global
  // batch out (async-1f1b's 1): the flush derives none.
  if (pipeline->accumulation() == 0 && !pipeline->has_global_batch()) {
    if (const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline->schedule());
        kind.ok()) {
      pipeline->set_accumulation(
          ScheduleTraitsOf(*kind).default_accumulation(PipelineShapeOf(*pipeline)));
    }
  }
  pipeline->set_schedule("1f1b-flush");
  pipeline->clear_max_drift();
  pipeline->set_drift_correction("none");
  pipeline->set_warmup_steps(0);
}

absl::StatusOr<ParityReport> CompareParity(const std::vector<ParityPair>& pairs) {
  if (pairs.empty()) return absl::InvalidArgumentError("no runs to compare");
  ParityReport report;
  std::vector<double> gaps, job_losses, flush_losses, job_tps, flush_tps;
  std::vector<std::optional<double>> speedups_75, speedups_final;
  for (const ParityPair& pair : pairs) {
    for (const v1::RunSummary* run : {&pair.job, &pair.flush}) {
      if (run->validation_loss().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "run ", run->job_name(), " (seed ", pair.seed, ") has no validation loss"));
      }
    }
    ParitySeed seed;
    seed.seed = pair.seed;
    seed.job_loss = pair.job.validation_loss().rbegin()->loss();
    seed.flush_loss = pair.flush.validation_loss().rbegin()->loss();
    seed.gap_pct = 100.0 * (seed.job_loss / seed.flush_loss - 1.0);
    seed.job_tokens_per_second = pair.job.tokens_per_second();
    seed.flush_tokens_per_second = pair.flush.tokens_per_second();
    // The flush's loss at 75% of its steps: the first evaluation at or past it.
    const int64_t at_75 = (3 * pair.flush.steps() + 3) / 4;
    double target_75 = seed.flush_loss;
    for (const v1::LossPoint& point : pair.flush.validation_loss()) {
      if (point.step() >= at_75) {
        target_75 = point.loss();
        break;
      }
    }
    seed.speedup_75 = Speedup(pair.job, pair.flush, target_75);
    seed.speedup_final = Speedup(pair.job, pair.flush, seed.flush_loss);
    gaps.push_back(seed.gap_pct);
    job_losses.push_back(seed.job_loss);
    flush_losses.push_back(seed.flush_loss);
    job_tps.push_back(seed.job_tokens_per_second);
    flush_tps.push_back(seed.flush_tokens_per_second);
    speedups_75.push_back(seed.speedup_75);
    speedups_final.push_back(seed.speedup_final);
    report.seeds.push_back(seed);
  }
  const v1::RunSummary& first = pairs.front().job;
  report.job_name = first.job_name();
  report.schedule = first.schedule();
  report.correction = first.drift_correction();
  report.warmup_steps = first.warmup_steps();
  report.num_stages = first.num_stages();
  report.steps = first.steps();
  report.global_batch = first.global_batch();
  report.mean_gap_pct = Mean(gaps);
  report.gap_spread_pct = Spread(gaps);
  report.mean_job_loss = Mean(job_losses);
  report.mean_flush_loss = Mean(flush_losses);
  report.flush_loss_spread = Spread(flush_losses);
  const double flush_mean_tps = Mean(flush_tps);
  report.throughput_ratio = flush_mean_tps > 0 ? Mean(job_tps) / flush_mean_tps : 0.0;
  report.mean_speedup_75 = MeanIfAll(speedups_75);
  report.mean_speedup_final = MeanIfAll(speedups_final);
  return report;
}

absl::Status CheckParitySchedule(const v1::JobSpec& spec) {
  const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(spec.pipeline().schedule());
  if (!kind.ok()) return kind.status();
  if (ScheduleTraitsOf(*kind).flushes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.schedule: ", spec.pipeline().schedule(),
        " is the flush already; parity compares an asynchronous schedule (paci, async-1f1b) with "
        "its flush twin"));
  }
  return absl::OkStatus();
}

std::string ParitySummaryLine(const ParityReport& report) {
  return absl::StrFormat(
      "%+.2f%% (spread %.2f points) at %.2fx the flush's tokens/s; the flush's loss at 75%% of "
      "its steps %s, its final loss %s",
      report.mean_gap_pct, report.gap_spread_pct, report.throughput_ratio,
      report.mean_speedup_75 ? absl::StrFormat("%.2fx sooner", *report.mean_speedup_75)
                             : "not reached in every seed",
      report.mean_speedup_final ? absl::StrFormat("%.2fx sooner", *report.mean_speedup_final)
                                : "not reached in every seed");
}

}  // namespace paci
