#include "tools/job_progress.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/schedule_kind.h"

namespace paci {

std::string JobFailure::ToString() const {
  return stage < 0 ? message : absl::StrCat("stage ", stage, ": ", message);
}

JobProgress::JobProgress(const v1::JobSpec& spec, Clock clock)
    : spec_(spec),
      clock_(std::move(clock)),
      start_time_(clock_()),
      stages_(static_cast<size_t>(std::max(spec.pipeline().num_stages(), 0))) {}

absl::Status JobProgress::OnJoin(const v1::JoinRequest& request) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  const int s = request.stage();
  if (s < 0 || s >= static_cast<int>(stages_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage: must be between 0 and ", static_cast<int>(stages_.size()) - 1, ", got ", s));
  }
  Stage& stage = stages_[s];
  if (stage.joined) {
    return absl::AlreadyExistsError(absl::StrCat("stage ", s, " has already joined (pid ",
                                                 stage.join.pid(), ")"));
  }
  stage.joined = true;
  stage.join = request;
  if (++joined_ == static_cast<int>(stages_.size())) all_joined_time_ = now;
  return absl::OkStatus();
}

absl::Status JobProgress::OnReport(const v1::StageReport& report) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  const int s = report.stage();
  if (s < 0 || s >= static_cast<int>(stages_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage: must be between 0 and ", static_cast<int>(stages_.size()) - 1, ", got ", s));
  }
  Stage& stage = stages_[s];
  if (!stage.joined) {
    return absl::FailedPreconditionError(absl::StrCat("stage ", s, " reports before joining"));
  }
  train_loss_.insert(train_loss_.end(), report.train_loss().begin(), report.train_loss().end());
  validation_loss_.insert(validation_loss_.end(), report.validation_loss().begin(),
                          report.validation_loss().end());
  checkpoints_.insert(checkpoints_.end(), report.checkpoints().begin(),
                      report.checkpoints().end());
  if (!report.error().empty() && !failure_.has_value()) {
    failure_ = JobFailure{s, report.error()};
  }
  stage.spans.insert(stage.spans.end(), report.spans().begin(), report.spans().end());
  stage.latest = report;
  stage.latest.clear_train_loss();
  stage.latest.clear_validation_loss();
  stage.latest.clear_checkpoints();
  stage.latest.clear_spans();
  stage.reported = true;
  stage.last_report_time = now;
  return absl::OkStatus();
}

void JobProgress::RecordFailure(JobFailure failure) {
  absl::MutexLock lock(&mu_);
  if (!failure_.has_value()) failure_ = std::move(failure);
}

int JobProgress::joined() const {
  absl::ReaderMutexLock lock(&mu_);
  return joined_;
}

bool JobProgress::all_joined() const {
  absl::ReaderMutexLock lock(&mu_);
  return AllJoinedLocked();
}

bool JobProgress::all_finished() const {
  absl::ReaderMutexLock lock(&mu_);
  return std::all_of(stages_.begin(), stages_.end(),
                     [](const Stage& s) { return s.reported && s.latest.finished(); });
}

bool JobProgress::finished(int stage) const {
  absl::ReaderMutexLock lock(&mu_);
  return stage >= 0 && stage < static_cast<int>(stages_.size()) && stages_[stage].reported &&
         stages_[stage].latest.finished();
}

std::optional<JobFailure> JobProgress::failure() const {
  absl::ReaderMutexLock lock(&mu_);
  return failure_;
}

std::vector<std::string> JobProgress::stage_addresses() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> addresses;
  for (const Stage& s : stages_) addresses.push_back(s.join.link_address());
  return addresses;
}

bool JobProgress::AllJoinedLocked() const {
  return joined_ == static_cast<int>(stages_.size());
}

int64_t JobProgress::MinStepsLocked() const {
  if (stages_.empty()) return 0;
  int64_t steps = stages_[0].latest.optimizer_steps();
  for (const Stage& s : stages_) steps = std::min(steps, s.latest.optimizer_steps());
  return steps;
}

// Tokens are counted through backward on the last stage; measuring up to its
// latest report (not now) keeps the rate steady between reports and after
// the run.
double JobProgress::TokensPerSecondLocked() const {
  if (!AllJoinedLocked() || stages_.empty()) return 0;
  const Stage& last = stages_.back();
  if (!last.reported) return 0;
  const double seconds = absl::ToDoubleSeconds(last.last_report_time - all_joined_time_);
  return seconds > 0 ? static_cast<double>(last.latest.tokens()) / seconds : 0;
}

ProgressView JobProgress::View() const {
  const absl::Time now = clock_();
  absl::ReaderMutexLock lock(&mu_);
  ProgressView view;
  view.num_stages = static_cast<int>(stages_.size());
  view.joined = joined_;
  view.step = MinStepsLocked();
  view.total_steps = spec_.training().steps();
  if (!train_loss_.empty()) view.train_loss = train_loss_.back().loss();
  if (!validation_loss_.empty()) view.validation_loss = validation_loss_.back().loss();
  view.tokens_per_second = TokensPerSecondLocked();
  if (AllJoinedLocked() && view.step > 0 && now > all_joined_time_) {
    const absl::Duration per_step = (now - all_joined_time_) / view.step;
    view.eta = per_step * std::max<int64_t>(view.total_steps - view.step, 0);
  }
  for (const Stage& s : stages_) view.drift_max.push_back(s.latest.drift_max());
  return view;
}

std::vector<std::vector<v1::Span>> JobProgress::Spans() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::vector<v1::Span>> spans;
  for (const Stage& s : stages_) spans.push_back(s.spans);
  return spans;
}

std::vector<int64_t> JobProgress::SpansDropped() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<int64_t> dropped;
  for (const Stage& s : stages_) dropped.push_back(s.latest.spans_dropped());
  return dropped;
}

v1::RunSummary JobProgress::Summary() const {
  const absl::Time now = clock_();
  absl::ReaderMutexLock lock(&mu_);
  v1::RunSummary summary;
  const v1::PipelineSpec& pipeline = spec_.pipeline();
  summary.set_job_name(spec_.name());
  summary.set_schedule(pipeline.schedule());
  summary.set_num_stages(pipeline.num_stages());
  summary.set_accumulation(pipeline.accumulation());
  summary.set_micro_batch_size(pipeline.micro_batch_size());
  summary.set_seq_len(spec_.model().seq_len());
  summary.set_steps(spec_.training().steps());
  summary.set_steps_completed(MinStepsLocked());
  if (!train_loss_.empty()) summary.set_final_train_loss(train_loss_.back().loss());
  if (!validation_loss_.empty()) {
    summary.set_final_validation_loss(validation_loss_.back().loss());
  }
  summary.set_tokens_per_second(TokensPerSecondLocked());
  summary.set_wall_seconds(absl::ToDoubleSeconds(now - start_time_));
  summary.mutable_train_loss()->Add(train_loss_.begin(), train_loss_.end());
  summary.mutable_validation_loss()->Add(validation_loss_.begin(), validation_loss_.end());
  summary.mutable_checkpoints()->Add(checkpoints_.begin(), checkpoints_.end());

  const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline.schedule());
  std::vector<int> unfinished;
  for (int i = 0; i < static_cast<int>(stages_.size()); ++i) {
    const Stage& s = stages_[i];
    const v1::StageReport& r = s.latest;
    v1::StageSummary* out = summary.add_stages();
    out->set_stage(i);
    out->set_drift_max(r.drift_max());
    out->set_drift_mean(r.drift_count() > 0
                            ? static_cast<double>(r.drift_sum()) / r.drift_count()
                            : 0.0);
    if (s.reported) {
      out->set_drift_bound(r.drift_bound());
    } else if (kind.ok()) {
      out->set_drift_bound(
          DriftBound(*kind, pipeline.num_stages(), i, pipeline.accumulation()));
    }
    out->set_optimizer_steps(r.optimizer_steps());
    out->set_forward_micro_batches(r.forward_micro_batches());
    out->set_backward_micro_batches(r.backward_micro_batches());
    out->set_busy_seconds(r.busy_seconds());
    out->set_idle_seconds(r.idle_seconds());
    const double total = r.busy_seconds() + r.idle_seconds();
    out->set_idle_fraction(total > 0 ? r.idle_seconds() / total : 0.0);
    out->set_peak_rss_bytes(r.peak_rss_bytes());
    out->set_bytes_sent(r.bytes_sent());
    out->set_metrics_address(s.join.metrics_address());
    out->set_link_address(s.join.link_address());
    if (!(s.reported && r.finished())) unfinished.push_back(i);
  }

  if (failure_.has_value()) {
    summary.set_error(failure_->ToString());
  } else if (!unfinished.empty()) {
    summary.set_error(absl::StrCat("stages not finished: ", absl::StrJoin(unfinished, ", ")));
  } else {
    summary.set_succeeded(true);
  }
  return summary;
}

}  // namespace paci
