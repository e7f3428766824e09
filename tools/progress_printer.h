#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/time/time.h"
#include "paci/v1/summary.pb.h"
#include <optional>
#include <vector>

namespace paci {

// What the live progress line shows.
struct ProgressView {
  int num_stages = 0;           // workers the job needs: P x R (pipeline.data_parallel)
  int joined = 0;               // of them, placed so far
  int64_t step = 0;             // min optimizer steps over all stages
  int64_t total_steps = 0;      // training.steps
  std::optional<double> train_loss;       // the latest point, if any
  std::optional<double> validation_loss;  // the latest point, if any
  double tokens_per_second = 0;           // 0 until the last stage reports tokens
  std::optional<absl::Duration> eta;      // unknown until a step is taken
  std::vector<int64_t> drift_max;         // per stage
};

// "4,120": an integer with thousands separators.
std::string FormatThousands(int64_t value);

// "0:45", "12:03", "1:02:03": minutes and seconds, hours only when needed.
std::string FormatEta(absl::Duration duration);

// The live line, e.g.
//   step 120/300 | train 2.104 | val 2.231 | 4,120 tok/s | drift max [1 0] | ETA 0:45
// or "waiting for stages: 1/2 joined" before every stage has joined. Unknown
// values print as "-".
std::string FormatProgressLine(const ProgressView& view);

// The end-of-run table: the job's settings and results, then one row per
// stage. Ends with a newline.
std::string FormatSummaryTable(const v1::RunSummary& summary);

// A job that had nothing left to train, resumed from its checkpoint in
// `checkpoint_directory` at its last step (IsAlreadyComplete): which step, the
// validation loss of the weights it resumed, and how to train again.
bool IsAlreadyComplete(const v1::RunSummary& summary);
std::string FormatAlreadyComplete(const v1::RunSummary& summary,
                                  const std::string& checkpoint_directory);

// Writes the live line to a stream: redrawn in place with '\r' on a terminal,
// otherwise a full line at most every `line_interval`.
//
// Not thread-safe: owned by the launcher's loop. `out` must outlive it.
class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream& out, bool redraw_in_place,
                  absl::Duration line_interval = absl::Seconds(5));

  // Shows `view` as of `now` (redrawn, or printed if the interval passed).
  void Update(const ProgressView& view, absl::Time now);

  // Ends a line drawn in place so that other output starts on a fresh line.
  // Call before writing anything else to the stream.
  void BreakLine();

  // Prints `line` (without its '\n') so that it stays above the live line:
  // on a terminal the drawn line is cleared, `line` printed and the live line
  // drawn again below it; otherwise `line` is printed as it is.
  void PrintAbove(const std::string& line);

  // Shows the final state: redraws it, or prints it unless it is the line
  // printed last, and ends the line.
  void Finish(const ProgressView& view);

 private:
  std::ostream& out_;
  const bool redraw_in_place_;
  const absl::Duration line_interval_;
  size_t drawn_width_ = 0;  // width of the line currently drawn in place; 0: none
  std::string drawn_line_;  // the line currently drawn in place
  absl::Time last_line_time_ = absl::InfinitePast();
  std::string last_line_;   // the last full line printed when not redrawing
};

}  // namespace paci
