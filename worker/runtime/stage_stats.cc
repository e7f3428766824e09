#include "worker/runtime/stage_stats.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

namespace paci {

int64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

StageStats::StageStats(StageMetrics& metrics, const std::string& job_name, int stage, int replica)
    : metrics_(metrics) {
  report_.set_job_name(job_name);
  report_.set_stage(stage);
  report_.set_replica(replica);
}

void StageStats::SetPartition(const std::string& units, double predicted_cost_share) {
  absl::MutexLock lock(&mu_);
  report_.set_partition_units(units);
  report_.set_predicted_cost_share(predicted_cost_share);
}

void StageStats::SetPrecision(const std::string& precision, const std::string& note) {
  absl::MutexLock lock(&mu_);
  report_.set_precision(precision);
  report_.set_precision_note(note);
}

void StageStats::SetStart(int64_t drift_bound, int64_t optimizer_steps) {
  absl::MutexLock lock(&mu_);
  report_.set_drift_bound(drift_bound);
  report_.set_optimizer_steps(optimizer_steps);
}

void StageStats::AddSpan(bool idle, double seconds) {
  if (idle) {
    metrics_.AddIdle(seconds);
  } else {
    metrics_.AddBusy(seconds);
  }
  absl::MutexLock lock(&mu_);
  if (idle) {
    report_.set_idle_seconds(report_.idle_seconds() + seconds);
  } else {
    report_.set_busy_seconds(report_.busy_seconds() + seconds);
  }
}

void StageStats::AddForward(int64_t forwards_so_far) {
  metrics_.AddForward();
  absl::MutexLock lock(&mu_);
  report_.set_forward_micro_batches(forwards_so_far);
}

void StageStats::AddBackward(int64_t backwards_so_far, int64_t optimizer_steps, int64_t drift,
                             int64_t tokens, uint32_t weights_hash) {
  metrics_.ObserveDrift(drift);
  metrics_.AddBackward(tokens);
  absl::MutexLock lock(&mu_);
  report_.set_backward_micro_batches(backwards_so_far);
  report_.set_optimizer_steps(optimizer_steps);
  report_.set_weights_hash(weights_hash);
  report_.set_drift_max(std::max(report_.drift_max(), drift));
  report_.set_drift_sum(report_.drift_sum() + drift);
  report_.set_drift_count(report_.drift_count() + 1);
  report_.set_tokens(report_.tokens() + tokens);
}

void StageStats::AddOptimizerStep(double gradient_norm) {
  metrics_.SetGradientNorm(gradient_norm);
  metrics_.AddOptimizerStep();
}

void StageStats::AddNonfiniteSkip() {
  metrics_.AddNonfiniteSkip();
  absl::MutexLock lock(&mu_);
  report_.set_nonfinite_steps_skipped(report_.nonfinite_steps_skipped() + 1);
}

void StageStats::ObserveAllReduce(double seconds) { metrics_.ObserveAllReduce(seconds); }

void StageStats::AddBytesSent(bool forward, int64_t bytes) {
  metrics_.AddBytesSent(forward, bytes);
  absl::MutexLock lock(&mu_);
  report_.set_bytes_sent(report_.bytes_sent() + bytes);
}

namespace {

void SetPoint(v1::LossPoint* point, int64_t step, double loss, double seconds) {
  point->set_step(step);
  point->set_loss(loss);
  point->set_seconds(seconds);
}

}  // namespace

void StageStats::AddTrainLoss(int64_t step, double loss, double seconds) {
  absl::MutexLock lock(&mu_);
  SetPoint(report_.add_train_loss(), step, loss, seconds);
}

void StageStats::AddValidationLoss(int64_t step, double loss, double seconds) {
  absl::MutexLock lock(&mu_);
  SetPoint(report_.add_validation_loss(), step, loss, seconds);
}

void StageStats::AddCheckpoint(const std::string& path, int64_t step) {
  metrics_.AddCheckpoint();
  absl::MutexLock lock(&mu_);
  report_.add_checkpoints(path);
  report_.add_checkpoint_steps(step);
}

void StageStats::SetFinished(bool finished) {
  absl::MutexLock lock(&mu_);
  report_.set_finished(finished);
}

void StageStats::SetPeakRss(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  report_.set_peak_rss_bytes(bytes);
}

v1::StageReport StageStats::Take(SpanRecorder* spans) {
  absl::MutexLock lock(&mu_);
  v1::StageReport report = report_;
  report_.clear_train_loss();
  report_.clear_validation_loss();
  report_.clear_checkpoints();
  report_.clear_checkpoint_steps();
  if (spans != nullptr) {
    for (v1::Span& span : spans->Take()) *report.add_spans() = std::move(span);
    report.set_spans_dropped(spans->dropped());
  }
  report.set_peak_rss_bytes(PeakRssBytes());
  return report;
}

v1::StageReport StageStats::Peek() const {
  absl::MutexLock lock(&mu_);
  return report_;
}

}  // namespace paci
