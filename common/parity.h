#pragma once

// The loss-parity check's arithmetic, shared by `pacictl parity` (local runs,
// tools/parity.h) and a TrainingJob's spec.parity (the operator's runs on the
// job's pods): a job and its flush twin (the same model, data, global batch,
// optimizer and seeds on 1f1b-flush, no drift) trained for a short schedule
// over several seeds, and what an asynchronous method costs in loss and gains
// in time: the gap of the final validation loss to the flush's, paired by
// seed, with its spread; tokens/s; the speed-up in wall seconds to the flush's
// own losses. No Torch, no I/O.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paci/v1/job.pb.h"
#include "paci/v1/summary.pb.h"

namespace paci {

// The seeds of a check that names none.
inline const std::vector<int>& DefaultParitySeeds() {
  static const std::vector<int> seeds = {1, 2, 3};
  return seeds;
}

// The roles of a parity pair's runs: the job itself, and its flush twin.
inline constexpr char kParityJobRole[] = "job";
inline constexpr char kParityFlushRole[] = "flush";

// A shortened parity run validates no more often than every this many
// optimizer steps. A validation pass drains the pipeline as the flush does at
// every step (no micro-batch crosses it), so passes at every step would make
// PACI the flush: 5 steps apart, 4 of every 5 steps run asynchronously.
inline constexpr int64_t kMinParityEvalInterval = 5;

// The spec of one parity run, from the spec as written (before the
// defaults, so that what they derive follows): model.init_seed and data.seed
// set to `seed`, `steps` optimizer steps when above 0 (and then a validation
// pass every steps / 20 steps, but no more often than every
// kMinParityEvalInterval, and a warm-up of at most the run), no
// checkpoint (a parity run neither resumes from nor writes over the job's),
// and the name "<name>-<role>-s<seed>" (role: kParityJobRole or kParityFlushRole).
void MakeParityRun(int seed, int64_t steps, const std::string& role, v1::JobSpec* spec);

// The flush twin, of a spec as written: 1f1b-flush with the same global batch
// (the same accumulation, or the global batch it is derived from), no drift
// limit, correction or warm-up.
void MakeFlushTwin(v1::JobSpec* spec);

// OK when the (defaulted) spec's schedule can be checked against its flush;
// InvalidArgument naming pipeline.schedule when it flushes already.
absl::Status CheckParitySchedule(const v1::JobSpec& spec);

// One seed's pair of runs.
struct ParityPair {
  int seed = 0;
  v1::RunSummary job, flush;
};

// The figures of one seed, and of all.
struct ParitySeed {
  int seed = 0;
  double job_loss = 0, flush_loss = 0;  // final validation losses
  double gap_pct = 0;                   // 100 (job / flush - 1)
  double job_tokens_per_second = 0, flush_tokens_per_second = 0;
  // The flush's wall seconds to a loss over the job's (above 1: the job is
  // sooner): to the flush's loss at 75% of its steps, and to its final loss;
  // nullopt when the job never reached it.
  std::optional<double> speedup_75, speedup_final;
};
struct ParityReport {
  std::string job_name, schedule, correction;
  int num_stages = 0;
  int64_t steps = 0, global_batch = 0, warmup_steps = 0;
  std::vector<ParitySeed> seeds;
  double mean_gap_pct = 0, gap_spread_pct = 0;  // mean and max - min over the seeds
  double mean_job_loss = 0, mean_flush_loss = 0;
  double flush_loss_spread = 0;          // the flush's own seed spread (max - min)
  double throughput_ratio = 0;           // mean tokens/s, job over flush
  // Means over the seeds; nullopt when any seed did not reach the target.
  std::optional<double> mean_speedup_75, mean_speedup_final;
};

// The figures from the pairs' summaries. InvalidArgument when a summary has
// no validation loss (a run that did not evaluate) or the pairs are empty.
absl::StatusOr<ParityReport> CompareParity(const std::vector<ParityPair>& pairs);

// One line: the mean gap with its spread, the throughput ratio and the
// speed-ups ("+1.54% (spread 1.33 points) at 1.29x the flush's tokens/s; the
// flush's loss at 75% of its steps 1.08x sooner, its final loss not reached").
std::string ParitySummaryLine(const ParityReport& report);

}  // namespace paci
