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
  std::string coordinator_binary;  // paci_coordinator
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
  // Keep every process (and its /metrics) up this long after the job ended,
  // so that a scraper catches the final values.
  absl::Duration linger = absl::ZeroDuration();
  absl::Duration start_timeout = absl::Seconds(60);  // the coordinator's first breath
};

// Runs one job on this machine through the whole system: a paci_coordinator
// on 127.0.0.1 with a throw-away job store, one paci_worker per stage
// registered with it, the job submitted and followed through the
// Coordinator API like any client would. It prints progress with each
// process's output above it (line by line, prefixed "[coordinator] " or
// "[worker S] "), cancels the job and stops every process when one dies
// (there is no spare worker to restart on) or when asked to, and writes the
// RunSummary and, if asked, the trace.
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
                                                ProgressPrinter& printer,
                                                absl::Duration timeout) const;

  const LocalLauncherOptions options_;
};

// A sibling binary of the pacictl at `self_exe`: `name` in the same
// directory, or ../<subdir>/<name> (the build tree). NotFound naming both
// candidates when neither is executable.
absl::StatusOr<std::string> FindSiblingBinary(const std::string& self_exe, const std::string& name,
                                              const std::string& subdir);

}  // namespace paci
