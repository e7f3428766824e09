#pragma once

// pacictl parity: the loss-parity check. It trains a job and its flush twin
// (the same model, data, global batch, optimizer and seeds on 1f1b-flush, no
// drift) for a short schedule over several seeds, and reports what an
// asynchronous method costs in loss and gains in time: the gap of the final
// validation loss to the flush's, paired by seed, with its spread; tokens/s;
// the speed-up in wall seconds to the flush's own losses. A table (Markdown),
// the figures (JSON) and a plot of both loss curves against time (PNG, with
// gnuplot).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "paci/v1/job.pb.h"
#include "paci/v1/summary.pb.h"
#include "tools/local_launcher.h"

namespace paci {

// The spec of one parity run, from the spec as written (before the
// defaults, so that what they derive follows): model.init_seed and data.seed
// set to `seed`, `steps` optimizer steps when above 0 (and then a validation
// pass every steps / 20, at least 1, and a warm-up of at most the run), no
// checkpoint (a parity run neither resumes from nor writes over the job's),
// and the name "<name>-<role>-s<seed>".
void MakeParityRun(int seed, int64_t steps, const std::string& role, v1::JobSpec* spec);

// The flush twin, of a spec as written: 1f1b-flush with the same global batch
// (the same accumulation, or the global batch it is derived from), no drift
// limit, correction or warm-up.
void MakeFlushTwin(v1::JobSpec* spec);

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

// The report as a Markdown table with a line under it saying what was run,
// and as JSON.
std::string ParityTable(const ParityReport& report);
std::string ParityJson(const ParityReport& report);

// The plot's data (one block per run: seconds and validation loss) and a
// gnuplot script that draws it to `png_path` from `data_path`.
std::string ParityPlotData(const std::vector<ParityPair>& pairs);
std::string ParityPlotScript(const ParityReport& report, const std::vector<ParityPair>& pairs,
                             const std::string& data_path, const std::string& png_path);

struct ParityOptions {
  std::string spec_path;
  std::vector<int> seeds = {1, 2, 3};
  int64_t steps = 0;  // 0: the spec's training.steps
  std::string out_dir;  // "": parity-<job name>
  // Every run's launcher: the binaries, where progress goes (the table too),
  // the shutdown signal; RunParity sets each run's spec and summary.
  LocalLauncherOptions launch;
};

// Runs every pair through LocalLauncher, one run at a time, and writes
// parity.md, parity.json, parity.dat, parity.gp and (when gnuplot is on the
// PATH) parity.png into the out folder with each run's spec and summary.
// Returns pacictl's exit code (ExitCodeOf): kExitUsage for a bad spec or
// seeds, kExitTrainingFailed when a run failed (naming it), else
// kExitSucceeded.
int RunParity(const ParityOptions& options);

}  // namespace paci
