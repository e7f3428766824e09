#include "tools/kube_job.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci {

using nlohmann::json;
using kube::ParseRfc3339;

namespace {

// Conditions that say why a job waits or stopped, when they hold (True); and
// DatasetReady, which says it when it does not (False, with a reason).
constexpr const char* kTroubleWhenTrue[] = {"Failed", "Suspended", "WorkersBlocked", "Stalled"};

std::string Loss(const std::optional<double>& loss) {
  return loss ? absl::StrFormat("%.4f", *loss) : "-";
}

std::string Namespace(kube::KubeClient& kube, const std::string& ns) {
  return ns.empty() ? kube.options().default_namespace : ns;
}

std::string Jobs(const std::string& ns) {
  return kube::CollectionPath("paci.dev", "v1alpha1", ns, "trainingjobs");
}

// "3m12s ago", from an RFC 3339 time; "-" without one.
std::string Since(const std::string& rfc3339, absl::Time now) {
  absl::Time then;
  if (!ParseRfc3339(rfc3339, &then)) return "-";
  return absl::StrCat(absl::FormatDuration(absl::Trunc(now - then, absl::Seconds(1))), " ago");
}

// The spec's pipeline as written (defaults where it cannot be read).
v1::PipelineSpec Pipeline(const op::TrainingJob& job) {
  return job.spec.job.ok() ? job.spec.job->pipeline() : v1::PipelineSpec();
}
int64_t NumStages(const v1::PipelineSpec& pipeline) { return std::max(pipeline.num_stages(), 1); }
int64_t Replicas(const v1::PipelineSpec& pipeline) { return std::max(pipeline.data_parallel(), 1); }

}  // namespace

std::optional<std::string> TrainingJobName(std::string_view argument) {
  for (std::string_view kind : {"trainingjob/", "trainingjobs/", "tj/"}) {
    if (argument.size() > kind.size() && argument.substr(0, kind.size()) == kind) {
      return std::string(argument.substr(kind.size()));
    }
  }
  return std::nullopt;
}

namespace {

absl::StatusOr<json> GetTrainingJobObject(kube::KubeClient& kube, const std::string& ns,
                                          const std::string& name) {
  const std::string where = Namespace(kube, ns);
  absl::StatusOr<json> job = kube.Get(absl::StrCat(Jobs(where), "/", name));
  if (absl::IsNotFound(job.status())) {
    return absl::NotFoundError(absl::StrCat("no TrainingJob ", name, " in namespace ", where));
  }
  return job;
}

}  // namespace

absl::StatusOr<op::TrainingJob> GetTrainingJob(kube::KubeClient& kube, const std::string& ns,
                                               const std::string& name) {
  absl::StatusOr<json> job = GetTrainingJobObject(kube, ns, name);
  if (!job.ok()) return job.status();
  return op::ParseTrainingJob(*job);
}

bool TrainingJobFinished(const op::TrainingJobStatus& status) {
  return op::IsFinished(status.phase);
}

bool TrainingJobSucceeded(const op::TrainingJobStatus& status) {
  return status.phase == op::kPhaseSucceeded;
}

std::string PhaseLine(const op::TrainingJobStatus& status) {
  std::string line = status.phase.empty() ? "(no status yet)" : status.phase;
  if (!status.message.empty()) absl::StrAppend(&line, ": ", status.message);
  for (const kube::Condition& c : status.conditions) {
    const bool holds = c.status == "True";
    const bool trouble =
        holds ? std::find(std::begin(kTroubleWhenTrue), std::end(kTroubleWhenTrue), c.type) !=
                    std::end(kTroubleWhenTrue)
              : c.type == "DatasetReady" || c.type == "WorkersAdmitted";
    if (!trouble || c.message.empty() || c.message == status.message) continue;
    absl::StrAppend(&line, " (", c.type, " ", c.reason, ": ", c.message, ")");
  }
  return line;
}

ProgressView ViewOfTrainingJob(const op::TrainingJob& job, absl::Time now) {
  const v1::PipelineSpec pipeline = Pipeline(job);
  const op::TrainingJobStatus& status = job.status;
  ProgressView view;
  view.num_stages = static_cast<int>(NumStages(pipeline) * Replicas(pipeline));
  view.step = status.step.value_or(0);
  view.total_steps = status.total_steps.value_or(0);
  view.train_loss = status.train_loss;
  view.validation_loss = status.validation_loss;
  view.tokens_per_second = static_cast<double>(status.tokens_per_second.value_or(0));
  for (const op::StageStatus& stage : status.stages.value_or(std::vector<op::StageStatus>{})) {
    if (!stage.pod.empty()) ++view.joined;
    view.drift_max.push_back(stage.max_drift);
  }
  absl::Time start;
  if (view.step > 0 && view.total_steps >= view.step &&
      ParseRfc3339(status.start_time, &start) && now > start) {
    view.eta = (now - start) * (static_cast<double>(view.total_steps - view.step) / view.step);
  }
  return view;
}

std::string FormatTrainingJob(const op::TrainingJob& job, absl::Time now) {
  const op::TrainingJobStatus& status = job.status;
  const v1::PipelineSpec pipeline = Pipeline(job);
  std::string out = absl::StrCat(
      "trainingjob: ", job.metadata.namespace_name, "/", job.metadata.name,
      "\nphase:       ", PhaseLine(status),
      "\ncoordinator: ", status.coordinator_job.empty() ? "-" : status.coordinator_job,
      " (attempt ", status.attempt.value_or(0), ", restarts ", status.restarts.value_or(0), ")",
      "\nstep:        ", status.step.value_or(0), "/", status.total_steps.value_or(0));
  if (const int64_t saved = status.checkpoint_step.value_or(0); saved > 0) {
    absl::StrAppend(&out, " (checkpoint step ", saved, ")");
  }
  absl::StrAppend(
      &out, "\ntrain loss:  ", Loss(status.train_loss), "\nval loss:    ",
      Loss(status.validation_loss), "\ntokens/s:    ",
      FormatThousands(status.tokens_per_second.value_or(0)),
      "\ndrift:       max ", status.max_drift.value_or(0), ", limit ",
      status.drift_limit.value_or(pipeline.max_drift()),
      " (accumulation ", status.accumulation.value_or(pipeline.accumulation()), ")",
      "\nstages:      ", NumStages(pipeline), " x ", Replicas(pipeline), " replicas",
      status.shape.empty()
          ? ""
          : absl::StrCat(" (pipeline.elastic: now ", status.shape, ", ",
                         status.resizes.value_or(0), " resizes)"),
      "\ncreated:     ", Since(job.metadata.creation_timestamp, now),
      "\nstarted:     ", Since(status.start_time, now));
  if (!status.completion_time.empty()) {
    absl::StrAppend(&out, "\nended:       ", Since(status.completion_time, now));
  }
  // spec.parity: which run is under way, then the result.
  if (status.parity && status.parity->run) {
    const op::ParityStatus& parity = *status.parity;
    absl::StrAppend(&out, "\nparity:      ",
                    parity.summary.empty()
                        ? absl::StrCat("run ", *parity.run, " of ", parity.total_runs.value_or(0))
                        : absl::StrCat("the gap to the flush ", parity.summary));
  }
  absl::StrAppend(&out, "\nconditions:\n");
  for (const kube::Condition& c : status.conditions) {
    absl::StrAppend(&out, absl::StrFormat("  %-15s %-5s %-22s %s\n", c.type, c.status, c.reason,
                                          c.message));
  }
  absl::StrAppend(&out, "stages:\n");
  for (const op::StageStatus& st : status.stages.value_or(std::vector<op::StageStatus>{})) {
    absl::StrAppend(&out, absl::StrFormat(
        "  stage %d replica %d  pod %-24s drift %d/%d  idle %.1f%%\n", st.stage, st.replica,
        st.pod.empty() ? "-" : st.pod, st.max_drift, st.drift_bound,
        100 * st.idle_fraction.value_or(0)));
  }
  return out;
}

absl::StatusOr<op::TrainingJob> WatchTrainingJob(
    kube::KubeClient& kube, const std::string& ns, const std::string& name,
    const std::function<void(const op::TrainingJob&)>& on_change) {
  const std::string where = Namespace(kube, ns);
  absl::StatusOr<json> object = GetTrainingJobObject(kube, where, name);
  if (!object.ok()) return object.status();
  op::TrainingJob job = op::ParseTrainingJob(*object);
  on_change(job);
  const absl::Status deleted = absl::NotFoundError(
      absl::StrCat("TrainingJob ", name, " in namespace ", where, " was deleted"));
  while (!TrainingJobFinished(job.status)) {
    kube::WatchOptions options;
    options.resource_version = job.metadata.resource_version;
    options.field_selector = "metadata.name=" + name;
    bool gone = false;
    const absl::Status watched = kube.Watch(Jobs(where), options, [&](const kube::WatchEvent& e) {
      if (e.type == "DELETED") {
        gone = true;
        return false;
      }
      if (e.type == "BOOKMARK") {  // only a newer resourceVersion to resume from
        job.metadata.resource_version = kube::MetaString(e.object, "resourceVersion");
        return true;
      }
      job = op::ParseTrainingJob(e.object);
      on_change(job);
      return !TrainingJobFinished(job.status);
    });
    if (gone) return deleted;
    if (watched.ok()) continue;  // ended by the server (its timeout), or the job ended
    if (!absl::IsOutOfRange(watched) && !absl::IsUnavailable(watched)) return watched;
    // Too old to resume (410), or the connection dropped: read it again, and
    // watch on from there (a moment later, when the server may be restarting).
    if (absl::IsUnavailable(watched)) absl::SleepFor(absl::Seconds(1));
    object = GetTrainingJobObject(kube, where, name);
    if (absl::IsNotFound(object.status())) return deleted;
    if (!object.ok()) return object.status();
    job = op::ParseTrainingJob(*object);
    on_change(job);
  }
  return job;
}

}  // namespace paci
