#include "tools/local_launcher.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "common/shutdown_signal.h"
#include "common/status_macros.h"
#include "common/temp_dir.h"
#include "grpcpp/grpcpp.h"
#include "common/coordinator_client.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "tools/chrome_trace.h"
#include "tools/job_view.h"
#include "tools/progress_printer.h"
#include "tools/summary_json.h"
#include "tools/worker_log_relay.h"

namespace paci {
namespace {

// How long the processes' last output may take to arrive once they exited.
constexpr absl::Duration kDrainTimeout = absl::Seconds(5);

// The RunSummary as JSON at `path` (creating its folder); the line that says so.
absl::StatusOr<std::string> WriteSummary(const v1::RunSummary& summary, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string json, RunSummaryToJson(summary));
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  std::ofstream file(path, std::ios::trunc);
  file << json;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write the summary to ", path));
  return absl::StrCat("summary written to ", path);
}

// The job's timeline as Chrome trace JSON at `path`; the line that says so.
absl::StatusOr<std::string> WriteTrace(const v1::JobTrace& trace, const v1::JobSpec& spec,
                                       const std::string& path) {
  // One timeline per stage of each replica, at replica * P + stage.
  const int num_stages = spec.pipeline().num_stages();
  const int workers = WorkersOf(spec.pipeline());
  std::vector<std::vector<v1::Span>> spans(workers);
  std::vector<int64_t> dropped(workers, 0);
  std::vector<std::string> names;
  for (int w = 0; w < workers; ++w) names.push_back(StageName(spec.pipeline(), w % num_stages, w / num_stages));
  size_t count = 0;
  for (const v1::StageTrace& stage : trace.stages()) {
    const int w = stage.replica() * num_stages + stage.stage();
    if (stage.stage() < 0 || stage.stage() >= num_stages || w < 0 || w >= workers) continue;
    spans[w].assign(stage.spans().begin(), stage.spans().end());
    dropped[w] = stage.spans_dropped();
    count += stage.spans_size();
  }
  RETURN_IF_ERROR(WriteChromeTrace(path, spec.name(), spans, dropped, names));
  return absl::StrCat("trace of ", count, " spans written to ", path,
                      " (open it in ui.perfetto.dev or chrome://tracing)");
}

// One Run() from the coordinator's start on: the processes (process 0 is the
// coordinator, process 1 + s the worker meant for stage s), their output, the
// coordinator's stub and the job as last read. Its steps, in order:
// StartCoordinator, StartWorkers, Submit, Follow, Conclude; StopProcesses
// when a start fails.
class LocalRun {
 public:
  LocalRun(const LocalLauncherOptions& options, v1::JobSpec spec, std::string scratch,
           absl::Time start)
      : options_(options), spec_(std::move(spec)), scratch_(std::move(scratch)), start_(start),
        out_(*options.out), printer_(out_, options.redraw_in_place, options.line_interval) {}

  // Starts paci_coordinator on a free port and waits until it serves.
  absl::Status StartCoordinator();
  // One paci_worker per stage, registered with the coordinator.
  absl::Status StartWorkers();
  absl::Status Submit();
  // Follows the job until it ends (OK), a process exits (Aborted, naming it)
  // or the shutdown is requested (Cancelled).
  absl::Status Follow();
  // After Follow: cancels the job unless it ended, reads its trace, lingers,
  // stops every process, prints the outcome and writes the summary and the
  // trace. Returns the run's result: Follow's error, else the job's failure,
  // else the first error of reading or writing those files.
  absl::Status Conclude(const absl::Status& followed);
  // Stops every process and prints what they wrote last.
  void StopProcesses();

 private:
  void Print(absl::string_view message) { out_ << "pacictl: " << message << "\n"; }
  bool StopRequested() const {
    return options_.shutdown != nullptr && options_.shutdown->requested();
  }
  std::vector<ProcessExit> WaitForOutputOrExits(absl::Duration timeout);
  // The first exit as a failure (the run cannot go on without the process).
  absl::Status FailureOf(const std::vector<ProcessExit>& exits);
  // Reads the job; tells each stage's worker and /metrics once it runs.
  void Refresh();
  absl::Status Cancel();
  absl::StatusOr<v1::JobTrace> ReadTrace();
  // Prints the outcome of the job and marks the summary with it.
  absl::Status Outcome(const absl::Status& followed, v1::RunSummary& summary);
  // Prints what became of a file; an error fails a run that succeeded.
  void Settle(const absl::StatusOr<std::string>& written, absl::Status& result);

  const LocalLauncherOptions& options_;
  const v1::JobSpec spec_;
  const std::string scratch_;  // the coordinator's port file and job store
  const absl::Time start_;
  std::ostream& out_;
  ChildProcesses processes_;
  WorkerLogRelay relay_;
  ProgressPrinter printer_;
  std::string address_;  // the coordinator's
  std::unique_ptr<CoordinatorClient> client_;
  v1::Job job_;
  bool told_stages_ = false;
};

// Prints process output as it comes until a process exits, at most
// `timeout`. The exits are polled every few milliseconds, so that a crash is
// seen before its neighbours' complaints about the broken link.
std::vector<ProcessExit> LocalRun::WaitForOutputOrExits(absl::Duration timeout) {
  constexpr absl::Duration kExitPollInterval = absl::Milliseconds(10);
  const absl::Time until = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = until - absl::Now();
    for (const std::string& line : relay_.Poll(std::min(left, kExitPollInterval))) {
      printer_.PrintAbove(line);
    }
    std::vector<ProcessExit> exits = processes_.PollExits();
    if (!exits.empty() || absl::Now() >= until || processes_.running() == 0) return exits;
    if (StopRequested()) return exits;
  }
}

absl::Status LocalRun::StartCoordinator() {
  const std::string port_file = scratch_ + "/port";
  ProcessCommand coordinator{options_.coordinator_binary,
                             {"--listen=127.0.0.1:0", "--db=" + scratch_ + "/jobs.db",
                              "--port_file=" + port_file},
                             {},
                             ProcessCommand::Output::kCombined};
  absl::StatusOr<int> started = processes_.Start(coordinator);
  if (!started.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the coordinator: ", started.status().message()));
  }
  relay_.Add(processes_.output_fd(*started), "[coordinator] ");
  while (address_.empty()) {
    std::ifstream file(port_file);
    int port = 0;
    if (file >> port && port > 0) address_ = absl::StrCat("127.0.0.1:", port);
    if (!WaitForOutputOrExits(absl::Milliseconds(50)).empty() ||
        absl::Now() - start_ > options_.start_timeout) {
      return absl::UnavailableError("the coordinator did not start");
    }
  }
  out_ << "pacictl: job " << spec_.name() << ": " << spec_.pipeline().num_stages() << " stages"
       << (spec_.pipeline().data_parallel() > 1
               ? absl::StrCat(" x ", spec_.pipeline().data_parallel(), " replicas")
               : "")
       << ", " << spec_.pipeline().schedule() << ", coordinator at " << address_ << "\n";
  CoordinatorClientOptions client;  // on loopback: plaintext, no token
  client.address = address_;
  client.wait_for_ready = true;
  ASSIGN_OR_RETURN(client_, CoordinatorClient::Connect(client));
  return absl::OkStatus();
}

absl::Status LocalRun::StartWorkers() {
  const std::string threads = absl::StrCat(spec_.runtime().threads_per_stage());
  for (int s = 0; s < WorkersOf(spec_.pipeline()); ++s) {
    ProcessCommand worker{options_.worker_binary,
                          {"--coordinator=" + address_,
                           absl::StrCat("--worker_id=", spec_.name(), "-w", s)},
                          {{"OMP_NUM_THREADS", threads}, {"OPENBLAS_NUM_THREADS", threads}},
                          ProcessCommand::Output::kCombined};
    worker.args.insert(worker.args.end(), options_.worker_flags.begin(),
                       options_.worker_flags.end());
    absl::StatusOr<int> started = processes_.Start(worker);
    if (!started.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot start a worker: ", started.status().message()));
    }
    relay_.Add(processes_.output_fd(*started), absl::StrCat("[worker ", s, "] "));
  }
  return absl::OkStatus();
}

absl::Status LocalRun::Submit() {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec_;
  absl::StatusOr<v1::Job> submitted = client_->Submit(request, absl::Seconds(30));
  if (!submitted.ok()) return CoordinatorFailure(submitted.status());
  job_ = *std::move(submitted);
  return absl::OkStatus();
}

absl::Status LocalRun::Follow() {
  while (!IsTerminal(job_.status().phase())) {
    if (StopRequested()) return absl::CancelledError("interrupted");
    RETURN_IF_ERROR(FailureOf(WaitForOutputOrExits(options_.poll_interval)));
    Refresh();
  }
  return absl::OkStatus();
}

absl::Status LocalRun::FailureOf(const std::vector<ProcessExit>& exits) {
  if (exits.empty()) return absl::OkStatus();
  const ProcessExit& exit = exits.front();
  if (exit.index == 0) return absl::AbortedError(absl::StrCat("the coordinator ", exit.ToString()));
  // Name the stage the worker ran, if the job got that far.
  const std::string id = absl::StrCat(spec_.name(), "-w", exit.index - 1);
  std::string who = absl::StrCat("worker ", id);
  for (const auto& stage : job_.status().stages()) {
    if (stage.worker_id() == id) {
      who = absl::StrCat(StageName(spec_.pipeline(), stage.stage(), stage.replica()), ": worker ",
                         id);
    }
  }
  const std::string failure = absl::StrCat(who, " ", exit.ToString());
  printer_.BreakLine();
  Print(failure);
  return absl::AbortedError(failure);
}

void LocalRun::Refresh() {
  v1::GetJobRequest get;
  get.set_name(spec_.name());
  // A poll that fails is as good as a skipped one: the next one reads the job.
  if (absl::StatusOr<v1::Job> latest = client_->Get(get, absl::Seconds(5)); latest.ok()) {
    job_ = *std::move(latest);
  }
  if (!told_stages_ && job_.status().phase() == v1::RUNNING && !job_.status().stages().empty()) {
    told_stages_ = true;
    printer_.BreakLine();
    for (const auto& stage : job_.status().stages()) {
      out_ << "pacictl: " << StageName(spec_.pipeline(), stage.stage(), stage.replica())
           << ": worker " << stage.worker_id() << " pid "
           << stage.pid() << " metrics=http://" << stage.metrics_address() << "/metrics\n";
    }
  }
  printer_.Update(ViewOfJob(job_, absl::Now()), absl::Now());
}

absl::Status LocalRun::Cancel() {
  absl::StatusOr<v1::Job> cancelled = client_->Cancel(spec_.name(), absl::Seconds(5));
  if (!cancelled.ok()) return CoordinatorFailure(cancelled.status());
  job_ = *std::move(cancelled);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobTrace> LocalRun::ReadTrace() {
  absl::StatusOr<v1::JobTrace> trace = client_->Trace(spec_.name(), absl::Seconds(10));
  if (!trace.ok()) return CoordinatorFailure(trace.status());
  return trace;
}

void LocalRun::StopProcesses() {
  processes_.StopAll(options_.stop_grace);
  // Every process has exited: what they wrote last is in the pipes.
  for (const std::string& line : relay_.Drain(kDrainTimeout)) printer_.PrintAbove(line);
}

absl::Status LocalRun::Conclude(const absl::Status& followed) {
  printer_.Finish(ViewOfJob(job_, absl::Now()));
  if (!followed.ok()) {
    if (const absl::Status cancelled = Cancel(); !cancelled.ok()) Print(cancelled.message());
  }
  absl::StatusOr<v1::JobTrace> trace;
  if (!options_.trace_path.empty()) trace = ReadTrace();  // while the coordinator is up
  if (followed.ok() && options_.linger > absl::ZeroDuration()) {
    WaitForOutputOrExits(options_.linger);
  }
  StopProcesses();

  v1::RunSummary summary = SummaryOfJob(job_, absl::ToDoubleSeconds(absl::Now() - start_));
  absl::Status result = Outcome(followed, summary);
  if (options_.summary != nullptr) *options_.summary = summary;
  if (!options_.summary_path.empty()) {
    Settle(WriteSummary(summary, options_.summary_path), result);
  }
  if (!options_.trace_path.empty()) {
    Settle(trace.ok() ? WriteTrace(*trace, spec_, options_.trace_path) : trace.status(), result);
  }
  return result;
}

absl::Status LocalRun::Outcome(const absl::Status& followed, v1::RunSummary& summary) {
  if (absl::IsCancelled(followed)) {
    summary.set_succeeded(false);
    summary.set_error("interrupted");
    Print("interrupted; all workers stopped");
    return followed;
  }
  if (!followed.ok()) {
    summary.set_succeeded(false);
    summary.set_error(std::string(followed.message()));
    Print(absl::StrCat("training failed: ", followed.message()));
    return followed;
  }
  if (!summary.succeeded()) {
    Print(absl::StrCat("training failed: ", summary.error()));
    return absl::AbortedError(summary.error());
  }
  out_ << "\n"
       << (IsAlreadyComplete(summary)
               ? FormatAlreadyComplete(summary, spec_.checkpoint().directory())
               : FormatSummaryTable(summary));
  return absl::OkStatus();
}

void LocalRun::Settle(const absl::StatusOr<std::string>& written, absl::Status& result) {
  if (written.ok()) {
    Print(*written);
    return;
  }
  Print(written.status().message());
  if (result.ok()) result = absl::UnavailableError(written.status().message());
}

// Prints an error that ends the run before it got going; its exit code.
int StartFailed(std::ostream& out, const absl::Status& status) {
  out << "pacictl: " << status.message() << "\n";
  return ExitCodeOf(status);
}

}  // namespace

absl::Status CoordinatorFailure(const absl::Status& answer) {
  if (answer.ok()) return answer;
  return answer.code() == absl::StatusCode::kInvalidArgument
             ? answer
             : absl::UnavailableError(answer.message());
}

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {}

int LocalLauncher::Run() {
  absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(options_.spec_path);
  if (!spec.ok()) {
    return StartFailed(*options_.out, absl::InvalidArgumentError(absl::StrCat(
                                          options_.spec_path, ": ", spec.status().message())));
  }
  if (!options_.trace_path.empty()) {
    spec->mutable_runtime()->set_trace_max_spans(options_.trace_max_spans);
  }
  const absl::Time start = absl::Now();
  TempDir scratch("pacictl");
  if (scratch.path().empty()) {
    return StartFailed(*options_.out, absl::UnavailableError("cannot create a temporary directory"));
  }
  LocalRun run(options_, *std::move(spec), scratch.path(), start);
  absl::Status started = run.StartCoordinator();
  if (started.ok()) started = run.StartWorkers();
  if (started.ok()) started = run.Submit();
  if (!started.ok()) {
    run.StopProcesses();
    return StartFailed(*options_.out, started);
  }
  return ExitCodeOf(run.Conclude(run.Follow()));
}

absl::StatusOr<std::string> FindSiblingBinary(const std::string& self_exe, const std::string& name,
                                              const std::string& subdir) {
  const std::filesystem::path dir = std::filesystem::path(self_exe).parent_path();
  const std::vector<std::filesystem::path> candidates = {
      dir / name, (dir / ".." / subdir / name).lexically_normal()};
  for (const std::filesystem::path& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return absl::NotFoundError(absl::StrCat("no ", name, " at ", candidates[0].string(), " or ",
                                          candidates[1].string()));
}

}  // namespace paci
