#pragma once

// pacictl parity: the loss-parity check (common/parity.h) run locally, one
// run after another through LocalLauncher, and what it writes: a table
// (Markdown), the figures (JSON) and a plot of both loss curves against time
// (PNG, with gnuplot).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/parity.h"
#include "tools/local_launcher.h"

namespace paci {

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
  std::vector<int> seeds = DefaultParitySeeds();
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
