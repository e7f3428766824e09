#pragma once

#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "paci/v1/summary.pb.h"
#include "tools/exit_codes.h"

namespace paci {

class ShutdownSignal;

// A coordinator's answer (CoordinatorClient's) as such a result, its message
// kept: InvalidArgument stays InvalidArgument; any other error becomes
// Unavailable (never Cancelled, which stands for a signal).
absl::Status CoordinatorFailure(const absl::Status& answer);

struct LocalLauncherOptions {
  std::string spec_path;
  std::string coordinator_binary;  // paci_coordinator
  std::string worker_binary;  // paci_worker
  std::vector<std::string> worker_flags;  // appended to every worker's command line
  std::string summary_path;   // where to write the RunSummary JSON; "": nowhere
  v1::RunSummary* summary = nullptr;  // where to put the RunSummary as well; null: nowhere
  // Where to write the timeline of the run as Chrome trace JSON; "": the
  // workers record no timeline.
  std::string trace_path;
  int trace_max_spans = 100000;  // per stage: the first ones are kept
  std::ostream* out = &std::cerr;  // progress, failures and the final table
  bool redraw_in_place = false;    // `out` is a terminal: redraw the live line
  // Stops the run when requested (SIGINT or SIGTERM); may be null.
  const ShutdownSignal* shutdown = nullptr;

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

  // Runs the job to its end and returns the exit code (ExitCodeOf):
  // kExitSucceeded when every stage finished and exited 0;
  // kExitTrainingFailed when a stage reported an error, a worker exited
  // early, or the summary or the trace could not be read or written (a job
  // that could not be cancelled is reported too); kExitUsage when the spec is invalid (the message
  // names the field); kExitInterrupted when the shutdown was requested. No
  // worker outlives it. Blocks.
  int Run();

 private:
  const LocalLauncherOptions options_;
};

// A sibling binary of the pacictl at `self_exe`: `name` in the same
// directory, or ../<subdir>/<name> (the build tree). NotFound naming both
// candidates when neither is executable.
absl::StatusOr<std::string> FindSiblingBinary(const std::string& self_exe, const std::string& name,
                                              const std::string& subdir);

}  // namespace paci
