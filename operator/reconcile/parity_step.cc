#include "operator/reconcile/parity_step.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/parity.h"
#include "common/run_summary.h"

namespace paci::op {

using kube::Field;
using kube::IntField;
using kube::StringField;
using nlohmann::json;

namespace {

// At most as many seeds as the CRD allows, and steps as spec.training.steps.
constexpr size_t kMaxParitySeeds = 10;
constexpr int64_t kMaxParitySteps = 1'000'000'000;
// The validation points a recorded run keeps (the CRD's maxItems): a longer
// history is thinned, its last point kept, so the status stays small.
constexpr int kMaxCurvePoints = 100;

const json& ParitySpec(const json& spec) { return Field(spec, "parity"); }

double Rounded(double value, double scale) { return std::round(value * scale) / scale; }

std::string RunLabel(const ParityRun& run) {
  return absl::StrCat("run ", run.number, " of ", run.total, " (",
                      run.flush ? "the flush twin" : "the job", ", seed ", run.seed, ")");
}

// What status.parity.runs keeps of a finished run: enough to compare it.
json RecordOf(const ParityRun& run, const std::string& coordinator_job,
              const v1::RunSummary& summary) {
  json curve = json::array();
  const int points = summary.validation_loss_size();
  const int stride = (points + kMaxCurvePoints - 1) / kMaxCurvePoints;  // 1 up to 100 points
  for (int i = (points - 1) % std::max(stride, 1); i < points; i += std::max(stride, 1)) {
    const v1::LossPoint& point = summary.validation_loss(i);
    curve.push_back({{"step", point.step()},
                     {"seconds", Rounded(point.seconds(), 1e3)},
                     {"loss", Rounded(point.loss(), 1e6)}});
  }
  json record = {{"seed", run.seed},
                 {"role", run.flush ? kParityFlushRole : kParityJobRole},
                 {"coordinatorJob", coordinator_job},
                 {"schedule", summary.schedule()},
                 {"numStages", summary.num_stages()},
                 {"steps", summary.steps()},
                 {"globalBatch", summary.global_batch()},
                 {"driftCorrection", summary.drift_correction()},
                 {"warmupSteps", summary.warmup_steps()},
                 {"curve", std::move(curve)}};
  if (std::isfinite(summary.tokens_per_second())) {
    record["tokensPerSecond"] = Rounded(summary.tokens_per_second(), 1);
  }
  if (!summary.validation_loss().empty()) {
    record["validationLoss"] = Rounded(summary.validation_loss().rbegin()->loss(), 1e6);
  }
  return record;
}

// The summary CompareParity reads, back from a record.
v1::RunSummary SummaryOf(const json& record) {
  v1::RunSummary summary;
  summary.set_job_name(StringField(record, "coordinatorJob"));
  summary.set_schedule(StringField(record, "schedule"));
  summary.set_num_stages(static_cast<int32_t>(IntField(record, "numStages", 0)));
  summary.set_steps(IntField(record, "steps", 0));
  summary.set_global_batch(IntField(record, "globalBatch", 0));
  summary.set_drift_correction(StringField(record, "driftCorrection"));
  summary.set_warmup_steps(IntField(record, "warmupSteps", 0));
  if (const json& tps = Field(record, "tokensPerSecond"); tps.is_number()) {
    summary.set_tokens_per_second(tps.get<double>());
  }
  const json& curve = Field(record, "curve");
  if (curve.is_array()) {
    for (const json& point : curve) {
      v1::LossPoint* added = summary.add_validation_loss();
      added->set_step(IntField(point, "step", 0));
      if (const json& s = Field(point, "seconds"); s.is_number()) added->set_seconds(s.get<double>());
      if (const json& l = Field(point, "loss"); l.is_number()) added->set_loss(l.get<double>());
    }
  }
  return summary;
}

void SetOptional(json& object, const char* key, const std::optional<double>& value) {
  if (value && std::isfinite(*value)) {
    object[key] = Rounded(*value, 1e4);
  } else {
    object.erase(key);
  }
}

// The report of the recorded runs into status.parity; what CompareParity
// refused otherwise.
absl::Status WriteReport(json& parity) {
  std::vector<ParityPair> pairs;
  for (const json& record : parity["runs"]) {
    const bool flush = StringField(record, "role") == kParityFlushRole;
    if (!flush) {
      pairs.emplace_back();
      pairs.back().seed = static_cast<int>(IntField(record, "seed", 0));
      pairs.back().job = SummaryOf(record);
    } else if (!pairs.empty()) {
      pairs.back().flush = SummaryOf(record);
    }
  }
  const absl::StatusOr<ParityReport> report = CompareParity(pairs);
  if (!report.ok()) return report.status();
  json seeds = json::array();
  for (const ParitySeed& seed : report->seeds) {
    json entry = {{"seed", seed.seed},
                  {"gapPercent", Rounded(seed.gap_pct, 1e4)},
                  {"validationLoss", Rounded(seed.job_loss, 1e4)},
                  {"flushValidationLoss", Rounded(seed.flush_loss, 1e4)}};
    SetOptional(entry, "speedupTo75", seed.speedup_75);
    SetOptional(entry, "speedupToFinal", seed.speedup_final);
    seeds.push_back(std::move(entry));
  }
  parity["seeds"] = std::move(seeds);
  parity["meanGapPercent"] = Rounded(report->mean_gap_pct, 1e4);
  parity["gapSpreadPercent"] = Rounded(report->gap_spread_pct, 1e4);
  parity["flushLossSpread"] = Rounded(report->flush_loss_spread, 1e4);
  parity["throughputRatio"] = Rounded(report->throughput_ratio, 1e4);
  SetOptional(parity, "speedupTo75", report->mean_speedup_75);
  SetOptional(parity, "speedupToFinal", report->mean_speedup_final);
  parity["summary"] = ParitySummaryLine(*report);
  return absl::OkStatus();
}

}  // namespace

bool HasParityCheck(const json& spec) {
  return spec.is_object() && spec.contains("parity") && spec["parity"].is_object();
}

std::string ParitySpecDigest(const v1::JobSpec& job_spec) {
  v1::JobSpec trained = job_spec;
  trained.clear_name();
  trained.clear_run_policy();
  trained.clear_checkpoint();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream output(&bytes);
    google::protobuf::io::CodedOutputStream coded(&output);
    coded.SetSerializationDeterministic(true);
    trained.SerializeToCodedStream(&coded);
  }
  uint64_t hash = 14695981039346656037ull;  // 64-bit FNV-1a
  for (const unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", hash);
}

absl::StatusOr<ParityRun> NextParityRun(const json& spec, const json& status,
                                        const std::string& spec_digest) {
  const json& parity = ParitySpec(spec);
  std::vector<int> seeds = DefaultParitySeeds();
  if (parity.contains("seeds")) {
    const json& given = parity["seeds"];
    if (!given.is_array() || given.empty() || given.size() > kMaxParitySeeds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.parity.seeds: give 1 to ", kMaxParitySeeds, " seeds, got ", given.dump()));
    }
    seeds.clear();
    for (const json& seed : given) {
      if (!seed.is_number_integer() || seed.get<int64_t>() < 0 ||
          seed.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec.parity.seeds: ", seed.dump(), " is not a seed (an integer from 0 to 2^31 - 1)"));
      }
      seeds.push_back(seed.get<int>());
    }
  }
  if (parity.contains("steps")) {
    const json& steps = parity["steps"];
    if (!steps.is_number_integer() || steps.get<int64_t>() < 0 ||
        steps.get<int64_t>() > kMaxParitySteps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.parity.steps: ", steps.dump(), " is not a number of steps (1 to ", kMaxParitySteps,
          ", or 0 for spec.training.steps)"));
    }
  }
  const json& recorded = Field(status, "parity");
  const json& runs = Field(recorded, "runs");
  ParityRun run;
  run.spec_digest = spec_digest;
  run.restart = runs.is_array() && !runs.empty() &&
                StringField(recorded, "specDigest") != spec_digest;
  const size_t done = runs.is_array() && !run.restart ? runs.size() : 0;
  run.total = static_cast<int>(2 * seeds.size());
  if (done >= static_cast<size_t>(run.total)) {
    return absl::OutOfRangeError(
        absl::StrCat("every run of the parity check (", run.total, ") has ended"));
  }
  run.number = static_cast<int>(done) + 1;
  run.seed = seeds[done / 2];
  run.flush = done % 2 == 1;
  return run;
}

std::function<void(v1::JobSpec*)> ParityRunEdit(const ParityRun& run, const json& spec) {
  const int64_t steps = IntField(ParitySpec(spec), "steps", 0);
  return [run, steps](v1::JobSpec* written) {
    MakeParityRun(run.seed, steps, run.flush ? kParityFlushRole : kParityJobRole, written);
    if (run.flush) MakeFlushTwin(written);
  };
}

void StartParityRun(Reconciliation& r, const ParityRun& run) {
  json& parity = r.desired["parity"];
  if (!parity.is_object() || run.restart) {
    if (run.restart) {
      r.Event("Normal", "ParityRestarted",
              absl::StrCat("parity check: the spec changed since its ",
                           Field(parity, "runs").size(),
                           " recorded runs (edited while suspended): it starts over"));
    }
    parity = json::object();
  }
  parity["specDigest"] = run.spec_digest;
  const bool starting = IntField(parity, "run", 0) != run.number;
  parity["run"] = run.number;
  parity["totalRuns"] = run.total;
  if (starting) {
    r.Event("Normal", "ParityRun",
            absl::StrCat("parity check: ", RunLabel(run), " starts"));
  }
}

bool ParityRunEnded(Reconciliation& r, const std::string& phase, const ParityRun& run) {
  if (phase != kPhaseSucceeded) {
    r.Event("Warning", "ParityRunEnded",
            absl::StrCat("parity check: ", RunLabel(run), " ended ", phase, ": ",
                         r.coordinator->status().message()));
    return false;
  }
  const v1::RunSummary summary = RunSummaryOfJob(*r.coordinator);
  if (summary.validation_loss().empty()) {
    FailJob(r, "ParityFailed",
            absl::StrCat("parity check: ", RunLabel(run),
                         " ended with no validation loss to compare (it evaluated at no step)"));
    r.StopWorkers();
    return true;
  }
  json& parity = r.desired["parity"];
  if (run.restart || !parity["runs"].is_array()) parity["runs"] = json::array();
  parity["specDigest"] = run.spec_digest;
  parity["runs"].push_back(RecordOf(run, r.coordinator_name, summary));
  r.Event("Normal", "ParityRunEnded",
          absl::StrFormat("parity check: %s ended: validation loss %.4f at %.0f tokens/s",
                          RunLabel(run), summary.validation_loss().rbegin()->loss(),
                          summary.tokens_per_second()));
  if (run.number < run.total) {
    // The next run goes to the coordinator at once, on the same pods.
    r.desired.erase("coordinatorJob");
    r.desired.erase("completionTime");
    r.desired["phase"] = kPhaseRunning;
    r.SetCondition("Running", true, "ParityCheck",
                   absl::StrCat("parity check: ", run.number, " of ", run.total,
                                " runs ended; the next starts"));
    r.actions.requeue_after = absl::ZeroDuration();
    return true;
  }
  if (const absl::Status written = WriteReport(parity); !written.ok()) {
    FailJob(r, "ParityFailed", absl::StrCat("parity check: ", written.message()));
    r.StopWorkers();
    return true;
  }
  r.Event("Normal", "ParityChecked",
          absl::StrCat("parity check: the gap to the flush ", StringField(parity, "summary")));
  return false;
}

std::string ParityOutcome(const Reconciliation& r) {
  const std::string summary = StringField(Field(r.desired, "parity"), "summary");
  return summary.empty() ? "" : absl::StrCat("the gap to the flush ", summary);
}

}  // namespace paci::op
