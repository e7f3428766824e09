#include "server/job_status.h"

#include <algorithm>
#include <limits>

#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"

namespace paci {

google::protobuf::Timestamp ToProto(absl::Time t) {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(t));
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixMicros(google::protobuf::util::TimeUtil::TimestampToMicroseconds(t));
}

v1::Job NewJob(const v1::JobSpec& spec, const std::map<std::string, std::string>& labels,
               absl::Time now) {
  v1::Job job;
  job.set_name(spec.name());
  *job.mutable_spec() = spec;
  for (const auto& [k, v] : labels) (*job.mutable_labels())[k] = v;
  *job.mutable_status()->mutable_create_time() = ToProto(now);
  job.mutable_status()->set_total_steps(spec.training().steps());
  SetPhase(*job.mutable_status(), v1::QUEUED, "Submitted", "waiting for workers", now);
  job.set_version(1);
  return job;
}

bool SameSubmission(const v1::Job& job, const v1::JobSpec& spec,
                    const std::map<std::string, std::string>& labels) {
  const bool same_labels =
      job.labels_size() == static_cast<int>(labels.size()) &&
      std::all_of(labels.begin(), labels.end(), [&](const auto& label) {
        auto it = job.labels().find(label.first);
        return it != job.labels().end() && it->second == label.second;
      });
  // An elastic job that changed shape is compared as it was submitted.
  const v1::JobSpec& submitted = job.has_submitted_spec() ? job.submitted_spec() : job.spec();
  return same_labels && google::protobuf::util::MessageDifferencer::Equals(submitted, spec);
}

const char* PhaseName(v1::JobPhase phase) {
  switch (phase) {
    case v1::QUEUED: return "Queued";
    case v1::RUNNING: return "Running";
    case v1::RESTARTING: return "Restarting";
    case v1::SUCCEEDED: return "Succeeded";
    case v1::FAILED: return "Failed";
    case v1::CANCELLED: return "Cancelled";
    default: return "Unknown";
  }
}

bool IsPermanentError(int code) {
  switch (static_cast<absl::StatusCode>(code)) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kNotFound:
      return true;
    default:
      return false;
  }
}

absl::Status JobNotFound(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("no job \"", name, "\""));
}

bool SetCondition(v1::JobStatus& status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, absl::Time now) {
  for (auto& c : *status.mutable_conditions()) {
    if (c.type() != type) continue;
    if (c.status() == value && c.reason() == reason && c.message() == message) return false;
    if (c.status() != value) *c.mutable_last_transition_time() = ToProto(now);
    c.set_status(value);
    c.set_reason(reason);
    c.set_message(message);
    return true;
  }
  if (!value) return false;  // a condition that never held is not listed
  v1::JobCondition* c = status.add_conditions();
  c->set_type(type);
  c->set_status(true);
  c->set_reason(reason);
  c->set_message(message);
  *c->mutable_last_transition_time() = ToProto(now);
  return true;
}

bool SetPhase(v1::JobStatus& status, v1::JobPhase phase, const std::string& reason,
              const std::string& message, absl::Time now) {
  status.set_phase(phase);
  status.set_reason(reason);
  status.set_message(message);
  bool changed = false;
  for (v1::JobPhase p : kJobPhases) {
    if (p == phase) {
      changed |= SetCondition(status, PhaseName(p), true, reason, message, now);
    } else {
      // Only a phase condition that is listed and holds is turned false.
      const bool held = std::any_of(
          status.conditions().begin(), status.conditions().end(),
          [&](const v1::JobCondition& c) { return c.type() == PhaseName(p) && c.status(); });
      if (held) changed |= SetCondition(status, PhaseName(p), false, reason, "", now);
    }
  }
  return changed;
}

void ThinLossHistory(google::protobuf::RepeatedPtrField<v1::LossPoint>* points, int max_points) {
  if (points->size() <= max_points) return;
  int kept = 0;
  for (int i = 0; i < points->size(); ++i) {
    if (i % 2 == 1 || i == points->size() - 1) points->SwapElements(kept++, i);
  }
  points->DeleteSubrange(kept, points->size() - kept);
}

void AppendLossPoint(const v1::LossPoint& point,
                     google::protobuf::RepeatedPtrField<v1::LossPoint>* history) {
  // After a restart from a checkpoint the steps past it are trained again:
  // the earlier attempt's points for them are replaced, not repeated.
  while (!history->empty() && history->rbegin()->step() >= point.step()) history->RemoveLast();
  *history->Add() = point;
}

int NumStages(const v1::JobStatus& status) {
  return static_cast<int>(std::count_if(status.stages().begin(), status.stages().end(),
                                        [](const v1::StageStatus& s) { return s.replica() == 0; }));
}

void ApplyStageReport(const v1::StageReport& report, absl::Duration attempt_elapsed,
                      v1::JobStatus& status, CheckpointShards& shards) {
  const int P = NumStages(status);
  const int slot = report.replica() * P + report.stage();
  if (P == 0 || report.stage() < 0 || report.stage() >= P || report.replica() < 0 ||
      slot >= status.stages_size()) {
    return;
  }
  v1::StageStatus& stage = *status.mutable_stages(slot);
  stage.set_optimizer_steps(report.optimizer_steps());
  stage.set_drift_max(report.drift_max());
  stage.set_drift_bound(report.drift_bound());
  stage.set_drift_mean(report.drift_count() ? double(report.drift_sum()) / report.drift_count()
                                            : 0);
  stage.set_busy_seconds(report.busy_seconds());
  stage.set_idle_seconds(report.idle_seconds());
  stage.set_peak_rss_bytes(report.peak_rss_bytes());
  stage.set_bytes_sent(report.bytes_sent());
  stage.set_forward_micro_batches(report.forward_micro_batches());
  stage.set_backward_micro_batches(report.backward_micro_batches());
  stage.set_partition_units(report.partition_units());
  stage.set_predicted_cost_share(report.predicted_cost_share());
  stage.set_nonfinite_steps_skipped(report.nonfinite_steps_skipped());
  stage.set_weights_hash(report.weights_hash());
  stage.set_tokens(report.tokens());
  stage.set_precision(report.precision());
  stage.set_precision_note(report.precision_note());
  double busy = 0;  // of one replica's pipeline: the replicas' mean
  for (const auto& st : status.stages()) busy += st.busy_seconds() * P / status.stages_size();
  for (auto& st : *status.mutable_stages()) {
    st.set_predicted_busy_seconds(busy * st.predicted_cost_share());
  }
  // Replica 0 speaks for the job: its loss is the mean over every replica's
  // micro-batches, and it writes the checkpoints.
  if (report.replica() == 0) {
    for (const auto& point : report.train_loss()) {
      AppendLossPoint(point, status.mutable_train_loss_history());
      status.set_train_loss(point.loss());
    }
    for (const auto& point : report.validation_loss()) {
      AppendLossPoint(point, status.mutable_validation_loss_history());
      status.set_validation_loss(point.loss());
    }
    ThinLossHistory(status.mutable_train_loss_history());
    ThinLossHistory(status.mutable_validation_loss_history());
    for (int64_t step : report.checkpoint_steps()) {
      std::set<int>& saved = shards[step];
      saved.insert(report.stage());
      if (static_cast<int>(saved.size()) == P && step > status.checkpoint_step()) {
        status.set_checkpoint_step(step);
      }
    }
  }
  int64_t step = std::numeric_limits<int64_t>::max();
  for (const auto& st : status.stages()) step = std::min(step, st.optimizer_steps());
  status.set_step(step);
  if (report.stage() == P - 1 && attempt_elapsed > absl::ZeroDuration()) {
    int64_t tokens = 0;  // through the last stage of every replica
    for (const auto& st : status.stages()) {
      if (st.stage() == P - 1) tokens += st.tokens();
    }
    status.set_tokens_per_second(tokens / absl::ToDoubleSeconds(attempt_elapsed));
  }
}

void AppendStageSpans(const v1::StageReport& report, int64_t max_spans, v1::StageTrace& trace) {
  const int64_t room = max_spans - trace.spans_size();
  for (int i = 0; i < report.spans_size() && i < room; ++i) *trace.add_spans() = report.spans(i);
  trace.set_spans_dropped(report.spans_dropped() +
                          std::max<int64_t>(0, report.spans_size() - std::max<int64_t>(room, 0)));
}

}  // namespace paci
