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
using kube::Field;
using kube::IntField;
using kube::MetaString;
using kube::ParseRfc3339;
using kube::StringField;

namespace {

// Conditions that say why a job waits or stopped, when they hold (True); and
// DatasetReady, which says it when it does not (False, with a reason).
constexpr const char* kTroubleWhenTrue[] = {"Failed", "Suspended", "WorkersBlocked", "Stalled"};

std::optional<double> NumberField(const json& object, const char* key) {
  const json& value = Field(object, key);
  if (!value.is_number()) return std::nullopt;
  return value.get<double>();
}

std::string Loss(const json& status, const char* key) {
  std::optional<double> loss = NumberField(status, key);
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

}  // namespace

std::optional<std::string> TrainingJobName(std::string_view argument) {
  for (std::string_view kind : {"trainingjob/", "trainingjobs/", "tj/"}) {
    if (argument.size() > kind.size() && argument.substr(0, kind.size()) == kind) {
      return std::string(argument.substr(kind.size()));
    }
  }
  return std::nullopt;
}

absl::StatusOr<json> GetTrainingJob(kube::KubeClient& kube, const std::string& ns,
                                    const std::string& name) {
  const std::string where = Namespace(kube, ns);
  absl::StatusOr<json> job = kube.Get(absl::StrCat(Jobs(where), "/", name));
  if (absl::IsNotFound(job.status())) {
    return absl::NotFoundError(absl::StrCat("no TrainingJob ", name, " in namespace ", where));
  }
  return job;
}

bool TrainingJobFinished(const json& job) {
  return op::IsFinished(StringField(Field(job, "status"), "phase"));
}

bool TrainingJobSucceeded(const json& job) {
  return StringField(Field(job, "status"), "phase") == op::kPhaseSucceeded;
}

std::string PhaseLine(const json& job) {
  const json& status = Field(job, "status");
  const std::string phase = StringField(status, "phase");
  std::string line = phase.empty() ? "(no status yet)" : phase;
  const std::string message = StringField(status, "message");
  if (!message.empty()) absl::StrAppend(&line, ": ", message);
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return line;
  for (const json& c : conditions) {
    const std::string type = StringField(c, "type");
    const bool holds = StringField(c, "status") == "True";
    const bool trouble =
        holds ? std::find(std::begin(kTroubleWhenTrue), std::end(kTroubleWhenTrue), type) !=
                    std::end(kTroubleWhenTrue)
              : type == "DatasetReady" || type == "WorkersAdmitted";
    const std::string why = StringField(c, "message");
    if (!trouble || why.empty() || why == message) continue;
    absl::StrAppend(&line, " (", type, " ", StringField(c, "reason"), ": ", why, ")");
  }
  return line;
}

ProgressView ViewOfTrainingJob(const json& job, absl::Time now) {
  const json& pipeline = Field(Field(job, "spec"), "pipeline");
  const json& status = Field(job, "status");
  ProgressView view;
  view.num_stages = static_cast<int>(IntField(pipeline, "numStages", 1) *
                                     IntField(pipeline, "dataParallel", 1));
  view.step = IntField(status, "step", 0);
  view.total_steps = IntField(status, "totalSteps", 0);
  view.train_loss = NumberField(status, "trainLoss");
  view.validation_loss = NumberField(status, "validationLoss");
  view.tokens_per_second = NumberField(status, "tokensPerSecond").value_or(0);
  const json& stages = Field(status, "stages");
  if (stages.is_array()) {
    for (const json& stage : stages) {
      if (!StringField(stage, "pod").empty()) ++view.joined;
      view.drift_max.push_back(IntField(stage, "maxDrift", 0));
    }
  }
  absl::Time start;
  if (view.step > 0 && view.total_steps >= view.step &&
      ParseRfc3339(StringField(status, "startTime"), &start) && now > start) {
    view.eta = (now - start) * (static_cast<double>(view.total_steps - view.step) / view.step);
  }
  return view;
}

std::string FormatTrainingJob(const json& job, absl::Time now) {
  const json& status = Field(job, "status");
  const json& pipeline = Field(Field(job, "spec"), "pipeline");
  std::string out = absl::StrCat(
      "trainingjob: ", MetaString(job, "namespace"), "/", MetaString(job, "name"),
      "\nphase:       ", PhaseLine(job),
      "\ncoordinator: ",
      StringField(status, "coordinatorJob").empty() ? "-"
                                                        : StringField(status, "coordinatorJob"),
      " (attempt ", IntField(status, "attempt", 0), ", restarts ",
      IntField(status, "restarts", 0), ")",
      "\nstep:        ", IntField(status, "step", 0), "/", IntField(status, "totalSteps", 0));
  if (const int64_t saved = IntField(status, "checkpointStep", 0); saved > 0) {
    absl::StrAppend(&out, " (checkpoint step ", saved, ")");
  }
  absl::StrAppend(
      &out, "\ntrain loss:  ", Loss(status, "trainLoss"), "\nval loss:    ",
      Loss(status, "validationLoss"), "\ntokens/s:    ",
      FormatThousands(std::llround(NumberField(status, "tokensPerSecond").value_or(0))),
      "\ndrift:       max ", IntField(status, "maxDrift", 0), ", limit ",
      IntField(status, "driftLimit", IntField(pipeline, "maxDrift", 0)),
      " (accumulation ",
      IntField(status, "accumulation", IntField(pipeline, "accumulation", 0)), ")",
      "\nstages:      ", IntField(pipeline, "numStages", 1), " x ",
      IntField(pipeline, "dataParallel", 1), " replicas",
      "\ncreated:     ", Since(MetaString(job, "creationTimestamp"), now),
      "\nstarted:     ", Since(StringField(status, "startTime"), now));
  if (const std::string done = StringField(status, "completionTime"); !done.empty()) {
    absl::StrAppend(&out, "\nended:       ", Since(done, now));
  }
  // spec.parity: which run is under way, then the result.
  if (const json& parity = Field(status, "parity"); parity.contains("run")) {
    const std::string summary = StringField(parity, "summary");
    absl::StrAppend(&out, "\nparity:      ",
                    summary.empty() ? absl::StrCat("run ", IntField(parity, "run", 0), " of ",
                                                   IntField(parity, "totalRuns", 0))
                                    : absl::StrCat("the gap to the flush ", summary));
  }
  absl::StrAppend(&out, "\nconditions:\n");
  const json& conditions = Field(status, "conditions");
  for (const json& c : conditions.is_array() ? conditions : json::array()) {
    absl::StrAppend(&out, absl::StrFormat("  %-15s %-5s %-22s %s\n", StringField(c, "type"),
                                          StringField(c, "status"),
                                          StringField(c, "reason"),
                                          StringField(c, "message")));
  }
  absl::StrAppend(&out, "stages:\n");
  const json& stages = Field(status, "stages");
  for (const json& st : stages.is_array() ? stages : json::array()) {
    const std::string pod = StringField(st, "pod");
    absl::StrAppend(&out, absl::StrFormat(
        "  stage %d replica %d  pod %-24s drift %d/%d  idle %.1f%%\n",
        IntField(st, "stage", 0), IntField(st, "replica", 0), pod.empty() ? "-" : pod,
        IntField(st, "maxDrift", 0), IntField(st, "driftBound", 0),
        100 * NumberField(st, "idleFraction").value_or(0)));
  }
  return out;
}

absl::StatusOr<json> WatchTrainingJob(kube::KubeClient& kube, const std::string& ns,
                                      const std::string& name,
                                      const std::function<void(const json&)>& on_change) {
  const std::string where = Namespace(kube, ns);
  absl::StatusOr<json> job = GetTrainingJob(kube, where, name);
  if (!job.ok()) return job.status();
  on_change(*job);
  const absl::Status deleted = absl::NotFoundError(
      absl::StrCat("TrainingJob ", name, " in namespace ", where, " was deleted"));
  while (!TrainingJobFinished(*job)) {
    kube::WatchOptions options;
    options.resource_version = MetaString(*job, "resourceVersion");
    options.field_selector = "metadata.name=" + name;
    bool gone = false;
    const absl::Status watched = kube.Watch(Jobs(where), options, [&](const kube::WatchEvent& e) {
      if (e.type == "DELETED") {
        gone = true;
        return false;
      }
      if (e.type == "BOOKMARK") {  // only a newer resourceVersion to resume from
        (*job)["metadata"]["resourceVersion"] = MetaString(e.object, "resourceVersion");
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
