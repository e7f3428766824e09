#include "operator/reconcile/parity_step.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/parity.h"
#include "common/run_summary.h"

namespace paci::op {

namespace {

// The validation points a recorded run keeps (the CRD's maxItems): a longer
// history is thinned, its last point kept, so the status stays small.
constexpr int kMaxCurvePoints = 100;

double Rounded(double value, double scale) { return std::round(value * scale) / scale; }

std::optional<double> RoundedIfFinite(const std::optional<double>& value) {
  if (!value || !std::isfinite(*value)) return std::nullopt;
  return Rounded(*value, 1e4);
}

std::string RunLabel(const ParityRun& run) {
  return absl::StrCat("run ", run.number, " of ", run.total, " (",
                      run.flush ? "the flush twin" : "the job", ", seed ", run.seed, ")");
}

// What status.parity.runs keeps of a finished run: enough to compare it.
ParityRunStatus RecordOf(const ParityRun& run, const std::string& coordinator_job,
                         const v1::RunSummary& summary) {
  ParityRunStatus record;
  const int points = summary.validation_loss_size();
  const int stride = (points + kMaxCurvePoints - 1) / kMaxCurvePoints;  // 1 up to 100 points
  for (int i = (points - 1) % std::max(stride, 1); i < points; i += std::max(stride, 1)) {
    const v1::LossPoint& point = summary.validation_loss(i);
    record.curve.push_back(
        {point.step(), Rounded(point.seconds(), 1e3), Rounded(point.loss(), 1e6)});
  }
  record.seed = run.seed;
  record.role = run.flush ? kParityFlushRole : kParityJobRole;
  record.coordinator_job = coordinator_job;
  record.schedule = summary.schedule();
  record.num_stages = summary.num_stages();
  record.steps = summary.steps();
  record.global_batch = summary.global_batch();
  record.drift_correction = summary.drift_correction();
  record.warmup_steps = summary.warmup_steps();
  if (std::isfinite(summary.tokens_per_second())) {
    record.tokens_per_second = Rounded(summary.tokens_per_second(), 1);
  }
  if (!summary.validation_loss().empty()) {
    record.validation_loss = Rounded(summary.validation_loss().rbegin()->loss(), 1e6);
  }
  return record;
}

// The summary CompareParity reads, back from a record.
v1::RunSummary SummaryOf(const ParityRunStatus& record) {
  v1::RunSummary summary;
  summary.set_job_name(record.coordinator_job);
  summary.set_schedule(record.schedule);
  summary.set_num_stages(static_cast<int32_t>(record.num_stages));
  summary.set_steps(record.steps);
  summary.set_global_batch(record.global_batch);
  summary.set_drift_correction(record.drift_correction);
  summary.set_warmup_steps(record.warmup_steps);
  if (record.tokens_per_second) summary.set_tokens_per_second(*record.tokens_per_second);
  for (const LossPointStatus& point : record.curve) {
    v1::LossPoint* added = summary.add_validation_loss();
    added->set_step(point.step);
    if (point.seconds) added->set_seconds(*point.seconds);
    if (point.loss) added->set_loss(*point.loss);
  }
  return summary;
}

// The report of the recorded runs into status.parity; what CompareParity
// refused otherwise.
absl::Status WriteReport(ParityStatus& parity) {
  std::vector<ParityPair> pairs;
  for (const ParityRunStatus& record : parity.runs.value_or(std::vector<ParityRunStatus>{})) {
    if (record.role != kParityFlushRole) {
      pairs.emplace_back();
      pairs.back().seed = static_cast<int>(record.seed);
      pairs.back().job = SummaryOf(record);
    } else if (!pairs.empty()) {
      pairs.back().flush = SummaryOf(record);
    }
  }
  const absl::StatusOr<ParityReport> report = CompareParity(pairs);
  if (!report.ok()) return report.status();
  parity.seeds.emplace();
  for (const ParitySeed& seed : report->seeds) {
    parity.seeds->push_back({seed.seed, Rounded(seed.gap_pct, 1e4), Rounded(seed.job_loss, 1e4),
                             Rounded(seed.flush_loss, 1e4), RoundedIfFinite(seed.speedup_75),
                             RoundedIfFinite(seed.speedup_final)});
  }
  parity.mean_gap_percent = Rounded(report->mean_gap_pct, 1e4);
  parity.gap_spread_percent = Rounded(report->gap_spread_pct, 1e4);
  parity.flush_loss_spread = Rounded(report->flush_loss_spread, 1e4);
  parity.throughput_ratio = Rounded(report->throughput_ratio, 1e4);
  parity.speedup_to_75 = RoundedIfFinite(report->mean_speedup_75);
  parity.speedup_to_final = RoundedIfFinite(report->mean_speedup_final);
  parity.summary = ParitySummaryLine(*report);
  return absl::OkStatus();
}

}  // namespace

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

absl::StatusOr<ParityRun> NextParityRun(const TrainingJobSpec& spec,
                                        const TrainingJobStatus& status,
                                        const std::string& spec_digest) {
  if (!spec.parity_error.ok()) return spec.parity_error;
  const std::vector<int>& seeds = spec.parity ? spec.parity->seeds : DefaultParitySeeds();
  const std::optional<ParityStatus>& recorded = status.parity;
  const size_t recorded_runs = recorded && recorded->runs ? recorded->runs->size() : 0;
  ParityRun run;
  run.spec_digest = spec_digest;
  run.restart = recorded_runs > 0 && recorded->spec_digest != spec_digest;
  const size_t done = run.restart ? 0 : recorded_runs;
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

std::function<void(v1::JobSpec*)> ParityRunEdit(const ParityRun& run, const ParitySpec& parity) {
  const int64_t steps = parity.steps;
  return [run, steps](v1::JobSpec* written) {
    MakeParityRun(run.seed, steps, run.flush ? kParityFlushRole : kParityJobRole, written);
    if (run.flush) MakeFlushTwin(written);
  };
}

void StartParityRun(Reconciliation& r, const ParityRun& run) {
  std::optional<ParityStatus>& parity = r.desired.parity;
  if (!parity || run.restart) {
    if (run.restart) {
      r.Event("Normal", "ParityRestarted",
              absl::StrCat("parity check: the spec changed since its ",
                           parity && parity->runs ? parity->runs->size() : 0,
                           " recorded runs (edited while suspended): it starts over"));
    }
    parity.emplace();
  }
  parity->spec_digest = run.spec_digest;
  const bool starting = parity->run.value_or(0) != run.number;
  parity->run = run.number;
  parity->total_runs = run.total;
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
  if (!r.desired.parity) r.desired.parity.emplace();
  ParityStatus& parity = *r.desired.parity;
  if (run.restart || !parity.runs) parity.runs.emplace();
  parity.spec_digest = run.spec_digest;
  parity.runs->push_back(RecordOf(run, r.coordinator_name, summary));
  r.Event("Normal", "ParityRunEnded",
          absl::StrFormat("parity check: %s ended: validation loss %.4f at %.0f tokens/s",
                          RunLabel(run), summary.validation_loss().rbegin()->loss(),
                          summary.tokens_per_second()));
  if (run.number < run.total) {
    // The next run goes to the coordinator at once, on the same pods.
    r.desired.coordinator_job.clear();
    r.desired.completion_time.clear();
    r.desired.phase = kPhaseRunning;
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
          absl::StrCat("parity check: the gap to the flush ", parity.summary));
  return false;
}

std::string ParityOutcome(const Reconciliation& r) {
  const std::string summary = r.desired.parity ? r.desired.parity->summary : "";
  return summary.empty() ? "" : absl::StrCat("the gap to the flush ", summary);
}

}  // namespace paci::op
