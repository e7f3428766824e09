#include "tools/kube_job.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "operator/reconcile/object_meta.h"
#include "operator/reconcile/reconciliation.h"

namespace paci {

using nlohmann::json;

namespace {

// Conditions that say why a job waits or stopped, when they hold (True); and
// DatasetReady, which says it when it does not (False, with a reason).
constexpr const char* kTroubleWhenTrue[] = {"Failed", "Suspended", "WorkersBlocked", "Stalled"};

std::optional<double> NumberField(const json& object, const char* key) {
  const json& value = op::Field(object, key);
  if (!value.is_number()) return std::nullopt;
  return value.get<double>();
}

std::string Loss(const json& status, const char* key) {
  std::optional<double> loss = NumberField(status, key);
  return loss ? absl::StrFormat("%.4f", *loss) : "-";
}

std::string Namespace(op::KubeClient& kube, const std::string& ns) {
  return ns.empty() ? kube.options().default_namespace : ns;
}

std::string Jobs(const std::string& ns) {
  return op::CollectionPath("paci.dev", "v1alpha1", ns, "trainingjobs");
}

// "3m12s ago", from an RFC 3339 time; "-" without one.
std::string Since(const std::string& rfc3339, absl::Time now) {
  absl::Time then;
  if (!op::ParseRfc3339(rfc3339, &then)) return "-";
  return absl::StrCat(absl::FormatDuration(absl::Trunc(now - then, absl::Seconds(1))), " ago");
}

}  // namespace

std::optional<std::string> TrainingJobName(std::string_view argument) {
  for (std::string_view kind : {"trainingjob/", "trainingjobs/", "tj/"}) {
    if (argument.size() > kind.size() && argument.substr(0, kind.size()) == kind) {
      return std::string(argument.substr(kind.size()));
    }
  }
  return std::nullopt;
}

absl::StatusOr<json> GetTrainingJob(op::KubeClient& kube, const std::string& ns,
                                    const std::string& name) {
  const std::string where = Namespace(kube, ns);
  absl::StatusOr<json> job = kube.Get(absl::StrCat(Jobs(where), "/", name));
  if (absl::IsNotFound(job.status())) {
    return absl::NotFoundError(absl::StrCat("no TrainingJob ", name, " in namespace ", where));
  }
  return job;
}

bool TrainingJobFinished(const json& job) {
  return op::IsFinished(op::StringField(op::Field(job, "status"), "phase"));
}

bool TrainingJobSucceeded(const json& job) {
  return op::StringField(op::Field(job, "status"), "phase") == op::kPhaseSucceeded;
}

std::string PhaseLine(const json& job) {
  const json& status = op::Field(job, "status");
  const std::string phase = op::StringField(status, "phase");
  std::string line = phase.empty() ? "(no status yet)" : phase;
  const std::string message = op::StringField(status, "message");
  if (!message.empty()) absl::StrAppend(&line, ": ", message);
  const json& conditions = op::Field(status, "conditions");
  if (!conditions.is_array()) return line;
  for (const json& c : conditions) {
    const std::string type = op::StringField(c, "type");
    const bool holds = op::StringField(c, "status") == "True";
    const bool trouble =
        holds ? std::find(std::begin(kTroubleWhenTrue), std::end(kTroubleWhenTrue), type) !=
                    std::end(kTroubleWhenTrue)
              : type == "DatasetReady" || type == "WorkersAdmitted";
    const std::string why = op::StringField(c, "message");
    if (!trouble || why.empty() || why == message) continue;
    absl::StrAppend(&line, " (", type, " ", op::StringField(c, "reason"), ": ", why, ")");
  }
  return line;
}

ProgressView ViewOfTrainingJob(const json& job, absl::Time now) {
  const json& pipeline = op::Field(op::Field(job, "spec"), "pipeline");
  const json& status = op::Field(job, "status");
  ProgressView view;
  view.num_stages = static_cast<int>(op::IntField(pipeline, "numStages", 1) *
                                     op::IntField(pipeline, "dataParallel", 1));
  view.step = op::IntField(status, "step", 0);
  view.total_steps = op::IntField(status, "totalSteps", 0);
  view.train_loss = NumberField(status, "trainLoss");
  view.validation_loss = NumberField(status, "validationLoss");
  view.tokens_per_second = NumberField(status, "tokensPerSecond").value_or(0);
  const json& stages = op::Field(status, "stages");
  if (stages.is_array()) {
    for (const json& stage : stages) {
      if (!op::StringField(stage, "pod").empty()) ++view.joined;
      view.drift_max.push_back(op::IntField(stage, "maxDrift", 0));
    }
  }
  absl::Time start;
  if (view.step > 0 && view.total_steps >= view.step &&
      op::ParseRfc3339(op::StringField(status, "startTime"), &start) && now > start) {
    view.eta = (now - start) * (static_cast<double>(view.total_steps - view.step) / view.step);
  }
  return view;
}

std::string FormatTrainingJob(const json& job, absl::Time now) {
  const json& status = op::Field(job, "status");
  const json& pipeline = op::Field(op::Field(job, "spec"), "pipeline");
  std::string out = absl::StrCat(
      "trainingjob: ", op::MetaString(job, "namespace"), "/", op::MetaString(job, "name"),
      "\nphase:       ", PhaseLine(job),
      "\ncoordinator: ",
      op::StringField(status, "coordinatorJob").empty() ? "-"
                                                        : op::StringField(status, "coordinatorJob"),
      " (attempt ", op::IntField(status, "attempt", 0), ", restarts ",
      op::IntField(status, "restarts", 0), ")",
      "\nstep:        ", op::IntField(status, "step", 0), "/", op::IntField(status, "totalSteps", 0));
  if (const int64_t saved = op::IntField(status, "checkpointStep", 0); saved > 0) {
    absl::StrAppend(&out, " (checkpoint step ", saved, ")");
  }
  absl::StrAppend(
      &out, "\ntrain loss:  ", Loss(status, "trainLoss"), "\nval loss:    ",
      Loss(status, "validationLoss"), "\ntokens/s:    ",
      FormatThousands(std::llround(NumberField(status, "tokensPerSecond").value_or(0))),
      "\ndrift:       max ", op::IntField(status, "maxDrift", 0), ", limit ",
      op::IntField(status, "driftLimit", op::IntField(pipeline, "maxDrift", 0)),
      " (accumulation ",
      op::IntField(status, "accumulation", op::IntField(pipeline, "accumulation", 0)), ")",
      "\nstages:      ", op::IntField(pipeline, "numStages", 1), " x ",
      op::IntField(pipeline, "dataParallel", 1), " replicas",
      "\ncreated:     ", Since(op::MetaString(job, "creationTimestamp"), now),
      "\nstarted:     ", Since(op::StringField(status, "startTime"), now));
  if (const std::string done = op::StringField(status, "completionTime"); !done.empty()) {
    absl::StrAppend(&out, "\nended:       ", Since(done, now));
  }
  absl::StrAppend(&out, "\nconditions:\n");
  const json& conditions = op::Field(status, "conditions");
  for (const json& c : conditions.is_array() ? conditions : json::array()) {
    absl::StrAppend(&out, absl::StrFormat("  %-15s %-5s %-22s %s\n", op::StringField(c, "type"),
                                          op::StringField(c, "status"),
                                          op::StringField(c, "reason"),
                                          op::StringField(c, "message")));
  }
  absl::StrAppend(&out, "stages:\n");
  const json& stages = op::Field(status, "stages");
  for (const json& st : stages.is_array() ? stages : json::array()) {
    const std::string pod = op::StringField(st, "pod");
    absl::StrAppend(&out, absl::StrFormat(
        "  stage %d replica %d  pod %-24s drift %d/%d  idle %.1f%%\n",
        op::IntField(st, "stage", 0), op::IntField(st, "replica", 0), pod.empty() ? "-" : pod,
        op::IntField(st, "maxDrift", 0), op::IntField(st, "driftBound", 0),
        100 * NumberField(st, "idleFraction").value_or(0)));
  }
  return out;
}

absl::StatusOr<json> WatchTrainingJob(op::KubeClient& kube, const std::string& ns,
                                      const std::string& name,
                                      const std::function<void(const json&)>& on_change) {
  const std::string where = Namespace(kube, ns);
  absl::StatusOr<json> job = GetTrainingJob(kube, where, name);
  if (!job.ok()) return job.status();
  on_change(*job);
  const absl::Status deleted = absl::NotFoundError(
      absl::StrCat("TrainingJob ", name, " in namespace ", where, " was deleted"));
  while (!TrainingJobFinished(*job)) {
    op::WatchOptions options;
    options.resource_version = op::MetaString(*job, "resourceVersion");
    options.field_selector = "metadata.name=" + name;
    bool gone = false;
    const absl::Status watched = kube.Watch(Jobs(where), options, [&](const op::WatchEvent& e) {
      if (e.type == "DELETED") {
        gone = true;
        return false;
      }
      if (e.type == "BOOKMARK") {  // only a newer resourceVersion to resume from
        (*job)["metadata"]["resourceVersion"] = op::MetaString(e.object, "resourceVersion");
        return true;
      }
      *job = e.object;
      on_change(*job);
      return !TrainingJobFinished(*job);
    });
    if (gone) return deleted;
    if (watched.ok()) continue;  // ended by the server (its timeout), or the job ended
    if (!absl::IsOutOfRange(watched) && !absl::IsUnavailable(watched)) return watched;
    // Too old to resume (410), or the connection dropped: read it again, and
    // watch on from there (a moment later, when the server may be restarting).
    if (absl::IsUnavailable(watched)) absl::SleepFor(absl::Seconds(1));
    job = GetTrainingJob(kube, where, name);
    if (absl::IsNotFound(job.status())) return deleted;
    if (!job.ok()) return job.status();
    on_change(*job);
  }
  return job;
}

}  // namespace paci
