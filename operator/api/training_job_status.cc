// .status of a TrainingJob: ParseTrainingJobStatus and StatusJson
// (training_job.h).

#include <algorithm>
#include <iterator>
#include <utility>

#include "operator/api/training_job.h"

namespace paci::op {

using kube::Field;
using kube::IntField;
using kube::NumberField;
using kube::OptionalIntField;
using kube::StringField;
using nlohmann::json;

namespace {

// A typed member of .status: its key, how it reads and how it writes.
template <typename T>
using Member = std::pair<const char*, T TrainingJobStatus::*>;

const Member<std::string> kStrings[] = {
    {"phase", &TrainingJobStatus::phase},
    {"message", &TrainingJobStatus::message},
    {"coordinatorJob", &TrainingJobStatus::coordinator_job},
    {"workload", &TrainingJobStatus::workload},
    {"startTime", &TrainingJobStatus::start_time},
    {"completionTime", &TrainingJobStatus::completion_time},
    {"driftCorrection", &TrainingJobStatus::drift_correction},
    {"shape", &TrainingJobStatus::shape}};
const Member<std::optional<int64_t>> kInts[] = {
    {"observedGeneration", &TrainingJobStatus::observed_generation},
    {"attempt", &TrainingJobStatus::attempt},
    {"step", &TrainingJobStatus::step},
    {"totalSteps", &TrainingJobStatus::total_steps},
    {"restarts", &TrainingJobStatus::restarts},
    {"checkpointStep", &TrainingJobStatus::checkpoint_step},
    {"evictions", &TrainingJobStatus::evictions},
    {"maxDrift", &TrainingJobStatus::max_drift},
    {"driftLimit", &TrainingJobStatus::drift_limit},
    {"accumulation", &TrainingJobStatus::accumulation},
    {"globalBatch", &TrainingJobStatus::global_batch},
    {"warmupSteps", &TrainingJobStatus::warmup_steps},
    {"resizes", &TrainingJobStatus::resizes},
    {"tokensPerSecond", &TrainingJobStatus::tokens_per_second}};
const Member<std::optional<double>> kNumbers[] = {
    {"trainLoss", &TrainingJobStatus::train_loss},
    {"validationLoss", &TrainingJobStatus::validation_loss}};
// Read by hand below.
constexpr const char* kStructured[] = {"conditions", "stages", "parity"};

void PutString(json& object, const char* key, const std::string& value) {
  if (!value.empty()) object[key] = value;
}
template <typename T>
void PutOptional(json& object, const char* key, const std::optional<T>& value) {
  if (value) object[key] = *value;
}

StageStatus ParseStage(const json& s) {
  return {IntField(s, "stage", 0),          IntField(s, "replica", 0),
          StringField(s, "pod"),            IntField(s, "maxDrift", 0),
          IntField(s, "driftBound", 0),     NumberField(s, "idleFraction"),
          NumberField(s, "tokensPerSecond")};
}

json StageJson(const StageStatus& s) {
  json entry = {{"stage", s.stage},
                {"replica", s.replica},
                {"maxDrift", s.max_drift},
                {"driftBound", s.drift_bound}};
  PutString(entry, "pod", s.pod);
  PutOptional(entry, "idleFraction", s.idle_fraction);
  PutOptional(entry, "tokensPerSecond", s.tokens_per_second);
  return entry;
}

ParityRunStatus ParseParityRun(const json& r) {
  ParityRunStatus run;
  run.seed = IntField(r, "seed", 0);
  run.role = StringField(r, "role");
  run.coordinator_job = StringField(r, "coordinatorJob");
  run.schedule = StringField(r, "schedule");
  run.num_stages = IntField(r, "numStages", 0);
  run.steps = IntField(r, "steps", 0);
  run.global_batch = IntField(r, "globalBatch", 0);
  run.drift_correction = StringField(r, "driftCorrection");
  run.warmup_steps = IntField(r, "warmupSteps", 0);
  run.tokens_per_second = NumberField(r, "tokensPerSecond");
  run.validation_loss = NumberField(r, "validationLoss");
  if (const json& curve = Field(r, "curve"); curve.is_array()) {
    for (const json& point : curve) {
      run.curve.push_back(
          {IntField(point, "step", 0), NumberField(point, "seconds"), NumberField(point, "loss")});
    }
  }
  return run;
}

json ParityRunJson(const ParityRunStatus& run) {
  json curve = json::array();
  for (const LossPointStatus& point : run.curve) {
    json entry = {{"step", point.step}};
    PutOptional(entry, "seconds", point.seconds);
    PutOptional(entry, "loss", point.loss);
    curve.push_back(std::move(entry));
  }
  json record = {{"seed", run.seed},
                 {"role", run.role},
                 {"coordinatorJob", run.coordinator_job},
                 {"schedule", run.schedule},
                 {"numStages", run.num_stages},
                 {"steps", run.steps},
                 {"globalBatch", run.global_batch},
                 {"driftCorrection", run.drift_correction},
                 {"warmupSteps", run.warmup_steps},
                 {"curve", std::move(curve)}};
  PutOptional(record, "tokensPerSecond", run.tokens_per_second);
  PutOptional(record, "validationLoss", run.validation_loss);
  return record;
}

ParityStatus ParseParityStatus(const json& p) {
  ParityStatus parity;
  parity.run = OptionalIntField(p, "run");
  parity.total_runs = OptionalIntField(p, "totalRuns");
  parity.spec_digest = StringField(p, "specDigest");
  if (const json& runs = Field(p, "runs"); runs.is_array()) {
    parity.runs.emplace();
    for (const json& run : runs) parity.runs->push_back(ParseParityRun(run));
  }
  if (const json& seeds = Field(p, "seeds"); seeds.is_array()) {
    parity.seeds.emplace();
    for (const json& s : seeds) {
      parity.seeds->push_back({IntField(s, "seed", 0), NumberField(s, "gapPercent").value_or(0),
                               NumberField(s, "validationLoss").value_or(0),
                               NumberField(s, "flushValidationLoss").value_or(0),
                               NumberField(s, "speedupTo75"),
                               NumberField(s, "speedupToFinal")});
    }
  }
  parity.mean_gap_percent = NumberField(p, "meanGapPercent");
  parity.gap_spread_percent = NumberField(p, "gapSpreadPercent");
  parity.flush_loss_spread = NumberField(p, "flushLossSpread");
  parity.throughput_ratio = NumberField(p, "throughputRatio");
  parity.speedup_to_75 = NumberField(p, "speedupTo75");
  parity.speedup_to_final = NumberField(p, "speedupToFinal");
  parity.summary = StringField(p, "summary");
  return parity;
}

json ParityStatusJson(const ParityStatus& parity) {
  json p = json::object();
  PutOptional(p, "run", parity.run);
  PutOptional(p, "totalRuns", parity.total_runs);
  PutString(p, "specDigest", parity.spec_digest);
  if (parity.runs) {
    p["runs"] = json::array();
    for (const ParityRunStatus& run : *parity.runs) p["runs"].push_back(ParityRunJson(run));
  }
  if (parity.seeds) {
    p["seeds"] = json::array();
    for (const ParitySeedStatus& s : *parity.seeds) {
      json entry = {{"seed", s.seed},
                    {"gapPercent", s.gap_percent},
                    {"validationLoss", s.validation_loss},
                    {"flushValidationLoss", s.flush_validation_loss}};
      PutOptional(entry, "speedupTo75", s.speedup_to_75);
      PutOptional(entry, "speedupToFinal", s.speedup_to_final);
      p["seeds"].push_back(std::move(entry));
    }
  }
  PutOptional(p, "meanGapPercent", parity.mean_gap_percent);
  PutOptional(p, "gapSpreadPercent", parity.gap_spread_percent);
  PutOptional(p, "flushLossSpread", parity.flush_loss_spread);
  PutOptional(p, "throughputRatio", parity.throughput_ratio);
  PutOptional(p, "speedupTo75", parity.speedup_to_75);
  PutOptional(p, "speedupToFinal", parity.speedup_to_final);
  PutString(p, "summary", parity.summary);
  return p;
}

bool Known(const std::string& key) {
  for (const auto& [name, member] : kStrings) {
    if (key == name) return true;
  }
  for (const auto& [name, member] : kInts) {
    if (key == name) return true;
  }
  for (const auto& [name, member] : kNumbers) {
    if (key == name) return true;
  }
  return std::find(std::begin(kStructured), std::end(kStructured), key) != std::end(kStructured);
}

}  // namespace

TrainingJobStatus ParseTrainingJobStatus(const json& object) {
  const json& status = Field(object, "status");
  TrainingJobStatus s;
  for (const auto& [key, member] : kStrings) s.*member = StringField(status, key);
  for (const auto& [key, member] : kInts) s.*member = OptionalIntField(status, key);
  for (const auto& [key, member] : kNumbers) s.*member = NumberField(status, key);
  s.conditions = kube::ParseConditions(Field(status, "conditions"));
  if (const json& stages = Field(status, "stages"); stages.is_array()) {
    s.stages.emplace();
    for (const json& stage : stages) s.stages->push_back(ParseStage(stage));
  }
  if (const json& parity = Field(status, "parity");
      status.is_object() && status.contains("parity") && parity.is_object()) {
    s.parity = ParseParityStatus(parity);
  }
  if (status.is_object()) {
    for (auto it = status.begin(); it != status.end(); ++it) {
      if (!Known(it.key())) s.unknown[it.key()] = *it;
    }
  }
  return s;
}

json StatusJson(const TrainingJobStatus& s) {
  json status = s.unknown.is_object() ? s.unknown : json::object();
  for (const auto& [key, member] : kStrings) PutString(status, key, s.*member);
  for (const auto& [key, member] : kInts) PutOptional(status, key, s.*member);
  for (const auto& [key, member] : kNumbers) PutOptional(status, key, s.*member);
  if (!s.conditions.empty()) status["conditions"] = kube::ConditionsJson(s.conditions);
  if (s.stages) {
    status["stages"] = json::array();
    for (const StageStatus& stage : *s.stages) status["stages"].push_back(StageJson(stage));
  }
  if (s.parity) status["parity"] = ParityStatusJson(*s.parity);
  return status;
}

}  // namespace paci::op
