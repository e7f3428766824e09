#include "tools/local_launcher.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "tools/chrome_trace.h"
#include "tools/job_control_service.h"
#include "tools/job_progress.h"
#include "tools/progress_printer.h"
#include "tools/summary_json.h"
#include "tools/worker_log_relay.h"
#include "tools/worker_processes.h"

namespace paci {
namespace {

absl::Status WriteSummary(const v1::RunSummary& summary, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string json, RunSummaryToJson(summary));
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  std::ofstream file(path, std::ios::trunc);
  file << json;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write the summary to ", path));
  return absl::OkStatus();
}

std::vector<int> StagesNotJoined(const JobProgress& progress) {
  std::vector<int> missing;
  const std::vector<std::string> addresses = progress.stage_addresses();
  for (int s = 0; s < static_cast<int>(addresses.size()); ++s) {
    if (addresses[s].empty()) missing.push_back(s);
  }
  return missing;
}

}  // namespace

// Prints worker output as it comes until a worker exits, at most
// poll_interval. The exits are polled every few milliseconds, so that a
// crash is seen before its neighbours' complaints about the broken link.
std::vector<ProcessExit> LocalLauncher::WaitForOutputOrExits(WorkerLogRelay& relay,
                                                             WorkerProcesses& workers,
                                                             ProgressPrinter& printer) const {
  constexpr absl::Duration kExitPollInterval = absl::Milliseconds(10);
  const absl::Time until = absl::Now() + options_.poll_interval;
  while (true) {
    const absl::Duration left = until - absl::Now();
    for (const std::string& line : relay.Poll(std::min(left, kExitPollInterval))) {
      printer.PrintAbove(line);
    }
    std::vector<ProcessExit> exits = workers.PollExits();
    if (!exits.empty() || absl::Now() >= until || workers.running() == 0) return exits;
    if (options_.stop_requested != nullptr && options_.stop_requested->load()) return exits;
  }
}

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {}

int LocalLauncher::Run() {
  std::ostream& out = *options_.out;
  const absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(options_.spec_path);
  if (!spec.ok()) {
    out << "pacictl: " << options_.spec_path << ": " << spec.status().message() << "\n";
    return kExitUsage;
  }
  const int num_stages = spec->pipeline().num_stages();
  const absl::Time start = absl::Now();

  JobProgress progress(*spec, [] { return absl::Now(); });
  JobControlServiceOptions service_options;
  service_options.join_timeout = options_.join_timeout;
  service_options.trace_max_spans = options_.trace_path.empty() ? 0 : options_.trace_max_spans;
  JobControlService service(*spec, progress, service_options);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    out << "pacictl: cannot start the job control server on 127.0.0.1\n";
    return kExitTrainingFailed;
  }
  const std::string job_control = absl::StrCat("127.0.0.1:", port);
  LOG(INFO) << "job=" << spec->name() << " job_control=" << job_control;

  out << "pacictl: job " << spec->name() << ": " << num_stages << " stages, "
      << spec->pipeline().schedule() << ", control at " << job_control << "\n";

  WorkerProcesses workers;
  WorkerLogRelay relay;
  const std::string threads = absl::StrCat(spec->runtime().threads_per_stage());
  for (int s = 0; s < num_stages; ++s) {
    ProcessCommand command{
        options_.worker_binary,
        {absl::StrCat("--job_control=", job_control), absl::StrCat("--stage=", s)},
        {{"OMP_NUM_THREADS", threads}, {"OPENBLAS_NUM_THREADS", threads}},
        /*capture_output=*/true};
    command.args.insert(command.args.end(), options_.worker_flags.begin(),
                        options_.worker_flags.end());
    const absl::StatusOr<int> started = workers.Start(command);
    if (!started.ok()) {
      progress.RecordFailure({s, std::string(started.status().message())});
      break;
    }
    relay.Add(workers.output_fd(*started), absl::StrCat("[stage ", s, "] "));
  }

  ProgressPrinter printer(out, options_.redraw_in_place, options_.line_interval);
  bool interrupted = false;
  while (!progress.failure().has_value()) {
    if (options_.stop_requested != nullptr && options_.stop_requested->load()) {
      interrupted = true;
      // Before the workers are told to stop, so that their complaints about
      // being cancelled do not become the reason.
      progress.RecordFailure({-1, "interrupted"});
      break;
    }
    for (const ProcessExit& exit : WaitForOutputOrExits(relay, workers, printer)) {
      // A stage's own error report arrives before its exit and is kept first.
      // A crash is printed at once: its neighbours' complaints about the
      // broken link may reach us first and become the recorded failure.
      if (!exit.succeeded()) {
        printer.BreakLine();
        out << "pacictl: stage " << exit.index << ": worker " << exit.ToString() << "\n";
        progress.RecordFailure({exit.index, absl::StrCat("worker ", exit.ToString())});
      } else if (!progress.finished(exit.index)) {
        progress.RecordFailure({exit.index, "worker exited with status 0 before finishing"});
      }
    }
    if (workers.running() == 0 && progress.all_finished()) break;
    if (!progress.all_joined() && absl::Now() - start > options_.join_timeout) {
      progress.RecordFailure(
          {-1, absl::StrCat("stages [", absl::StrJoin(StagesNotJoined(progress), " "),
                            "] did not join within ", absl::FormatDuration(options_.join_timeout))});
    }
    printer.Update(progress.View(), absl::Now());
  }
  printer.Finish(progress.View());

  service.Stop();
  workers.StopAll(options_.stop_grace);
  // Every worker has exited: what they wrote last is in the pipes.
  for (const std::string& line : relay.Drain(absl::Seconds(5))) printer.PrintAbove(line);
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));

  const v1::RunSummary summary = progress.Summary();
  int code = kExitSucceeded;
  if (summary.succeeded()) {
    out << "\n" << FormatSummaryTable(summary);
  } else if (interrupted) {
    out << "pacictl: interrupted; all workers stopped\n";
    code = kExitInterrupted;
  } else {
    out << "pacictl: training failed: " << summary.error() << "\n";
    code = kExitTrainingFailed;
  }
  if (!options_.summary_path.empty()) {
    if (const absl::Status written = WriteSummary(summary, options_.summary_path); !written.ok()) {
      out << "pacictl: " << written.message() << "\n";
      if (code == kExitSucceeded) code = kExitTrainingFailed;
    } else {
      out << "pacictl: summary written to " << options_.summary_path << "\n";
    }
  }
  if (!options_.trace_path.empty()) {
    const std::vector<std::vector<v1::Span>> spans = progress.Spans();
    size_t count = 0;
    for (const auto& stage_spans : spans) count += stage_spans.size();
    if (const absl::Status written =
            WriteChromeTrace(options_.trace_path, spec->name(), spans, progress.SpansDropped());
        !written.ok()) {
      out << "pacictl: " << written.message() << "\n";
      if (code == kExitSucceeded) code = kExitTrainingFailed;
    } else {
      out << "pacictl: trace of " << count << " spans written to " << options_.trace_path
          << " (open it in ui.perfetto.dev or chrome://tracing)\n";
    }
  }
  return code;
}

absl::StatusOr<std::string> FindWorkerBinary(const std::string& self_exe) {
  const std::filesystem::path dir = std::filesystem::path(self_exe).parent_path();
  const std::vector<std::filesystem::path> candidates = {
      dir / "paci_worker", (dir / ".." / "worker" / "paci_worker").lexically_normal()};
  for (const std::filesystem::path& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return absl::NotFoundError(absl::StrCat("no paci_worker at ", candidates[0].string(), " or ",
                                          candidates[1].string(), "; pass --worker_binary"));
}

}  // namespace paci
