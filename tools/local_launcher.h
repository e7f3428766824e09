#pragma once

#include <atomic>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paci {

class ProgressPrinter;
class WorkerLogRelay;
class WorkerProcesses;
struct ProcessExit;

// pacictl's exit codes.
inline constexpr int kExitSucceeded = 0;
inline constexpr int kExitTrainingFailed = 1;
inline constexpr int kExitUsage = 2;         // bad command line or spec
inline constexpr int kExitInterrupted = 130;  // SIGINT or SIGTERM

struct LocalLauncherOptions {
  std::string spec_path;
  std::string worker_binary;  // paci_worker
  std::vector<std::string> worker_flags;  // appended to every worker's command line
  std::string summary_path;   // where to write the RunSummary JSON; "": nowhere
  // Where to write the timeline of the run as Chrome trace JSON; "": the
  // workers record no timeline.
  std::string trace_path;
  int trace_max_spans = 100000;  // per stage: the first ones are kept
  std::ostream* out = &std::cerr;  // progress, failures and the final table
  bool redraw_in_place = false;    // `out` is a terminal: redraw the live line
  // Set (from a signal handler) to stop the run; may be null.
  const std::atomic<bool>* stop_requested = nullptr;

  absl::Duration poll_interval = absl::Milliseconds(200);  // loop and redraw period
  absl::Duration line_interval = absl::Seconds(5);  // progress lines when not redrawn
  absl::Duration stop_grace = absl::Seconds(5);     // SIGTERM to SIGKILL
  absl::Duration join_timeout = absl::Seconds(120);
};

// Runs one job on this machine: a JobControl server on 127.0.0.1 and one
// paci_worker process per stage. It watches the workers and their reports,
// prints progress with each worker's output above it (line by line, prefixed
// "[stage S] "), stops every worker when one fails or when asked to, and
// writes the RunSummary and, if asked, the trace.
//
// Not thread-safe; construct and Run() on the main thread (the workers are
// tied to the thread that starts them).
class LocalLauncher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options);

  // Runs the job to its end and returns the exit code: kExitSucceeded when
  // every stage finished and exited 0; kExitTrainingFailed when a stage
  // reported an error, a worker exited early or the summary could not be
  // written; kExitUsage when the spec is invalid (the message names the
  // field); kExitInterrupted when stop_requested was set. No worker outlives
  // it. Blocks.
  int Run();

 private:
  std::vector<ProcessExit> WaitForOutputOrExits(WorkerLogRelay& relay, WorkerProcesses& workers,
                                                ProgressPrinter& printer) const;

  const LocalLauncherOptions options_;
};

// The default worker binary for the pacictl at `self_exe`: paci_worker in
// the same directory, or ../worker/paci_worker (the build tree). NotFound
// naming both candidates when neither is executable.
absl::StatusOr<std::string> FindWorkerBinary(const std::string& self_exe);

}  // namespace paci
