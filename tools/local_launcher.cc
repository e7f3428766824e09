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
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "tools/chrome_trace.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "tools/job_view.h"
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

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->set_wait_for_ready(true);
  return context;
}

// A folder of its own under the system's temporary directory, removed with it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "pacictl-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

// Prints process output as it comes until a process exits, at most
// `timeout`. The exits are polled every few milliseconds, so that a crash is
// seen before its neighbours' complaints about the broken link.
std::vector<ProcessExit> LocalLauncher::WaitForOutputOrExits(WorkerLogRelay& relay,
                                                             WorkerProcesses& processes,
                                                             ProgressPrinter& printer,
                                                             absl::Duration timeout) const {
  constexpr absl::Duration kExitPollInterval = absl::Milliseconds(10);
  const absl::Time until = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = until - absl::Now();
    for (const std::string& line : relay.Poll(std::min(left, kExitPollInterval))) {
      printer.PrintAbove(line);
    }
    std::vector<ProcessExit> exits = processes.PollExits();
    if (!exits.empty() || absl::Now() >= until || processes.running() == 0) return exits;
    if (options_.stop_requested != nullptr && options_.stop_requested->load()) return exits;
  }
}

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {}

int LocalLauncher::Run() {
  std::ostream& out = *options_.out;
  absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(options_.spec_path);
  if (!spec.ok()) {
    out << "pacictl: " << options_.spec_path << ": " << spec.status().message() << "\n";
    return kExitUsage;
  }
  if (!options_.trace_path.empty()) {
    spec->mutable_runtime()->set_trace_max_spans(options_.trace_max_spans);
  }
  const int num_stages = spec->pipeline().num_stages();
  const absl::Time start = absl::Now();
  TempDir scratch;
  if (scratch.path().empty()) {
    out << "pacictl: cannot create a temporary directory\n";
    return kExitTrainingFailed;
  }

  // Process 0 is the coordinator, process 1 + s the worker meant for stage s.
  WorkerProcesses processes;
  WorkerLogRelay relay;
  ProgressPrinter printer(out, options_.redraw_in_place, options_.line_interval);
  const std::string port_file = scratch.path() + "/port";
  ProcessCommand coordinator{options_.coordinator_binary,
                             {"--listen=127.0.0.1:0", "--db=" + scratch.path() + "/jobs.db",
                              "--port_file=" + port_file},
                             {},
                             /*capture_output=*/true};
  absl::StatusOr<int> started = processes.Start(coordinator);
  if (!started.ok()) {
    out << "pacictl: cannot start the coordinator: " << started.status().message() << "\n";
    return kExitTrainingFailed;
  }
  relay.Add(processes.output_fd(*started), "[coordinator] ");
  std::string address;
  while (address.empty()) {
    std::ifstream file(port_file);
    int port = 0;
    if (file >> port && port > 0) address = absl::StrCat("127.0.0.1:", port);
    if (!WaitForOutputOrExits(relay, processes, printer, absl::Milliseconds(50)).empty() ||
        absl::Now() - start > options_.start_timeout) {
      processes.StopAll(options_.stop_grace);
      for (const std::string& line : relay.Drain(absl::Seconds(2))) printer.PrintAbove(line);
      out << "pacictl: the coordinator did not start\n";
      return kExitTrainingFailed;
    }
  }
  out << "pacictl: job " << spec->name() << ": " << num_stages << " stages, "
      << spec->pipeline().schedule() << ", coordinator at " << address << "\n";

  const std::string threads = absl::StrCat(spec->runtime().threads_per_stage());
  for (int s = 0; s < num_stages; ++s) {
    ProcessCommand worker{options_.worker_binary,
                          {"--coordinator=" + address,
                           absl::StrCat("--worker_id=", spec->name(), "-w", s)},
                          {{"OMP_NUM_THREADS", threads}, {"OPENBLAS_NUM_THREADS", threads}},
                          /*capture_output=*/true};
    worker.args.insert(worker.args.end(), options_.worker_flags.begin(),
                       options_.worker_flags.end());
    started = processes.Start(worker);
    if (!started.ok()) {
      processes.StopAll(options_.stop_grace);
      out << "pacictl: cannot start a worker: " << started.status().message() << "\n";
      return kExitTrainingFailed;
    }
    relay.Add(processes.output_fd(*started), absl::StrCat("[worker ", s, "] "));
  }

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Coordinator::Stub> stub = v1::Coordinator::NewStub(channel);
  v1::Job job;
  {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = *spec;
    grpc::Status submitted = stub->SubmitJob(Context(absl::Seconds(30)).get(), request, &job);
    if (!submitted.ok()) {
      processes.StopAll(options_.stop_grace);
      out << "pacictl: the coordinator refused the job: " << submitted.error_message() << "\n";
      return submitted.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? kExitUsage
                                                                          : kExitTrainingFailed;
    }
  }

  std::string failure;  // a process died: the run cannot go on
  bool interrupted = false;
  bool told_stages = false;
  while (!IsTerminal(job.status().phase())) {
    if (options_.stop_requested != nullptr && options_.stop_requested->load()) {
      interrupted = true;
      break;
    }
    for (const ProcessExit& exit :
         WaitForOutputOrExits(relay, processes, printer, options_.poll_interval)) {
      if (!failure.empty()) continue;
      if (exit.index == 0) {
        failure = absl::StrCat("the coordinator ", exit.ToString());
        continue;
      }
      // Name the stage the worker ran, if the job got that far.
      const std::string id = absl::StrCat(spec->name(), "-w", exit.index - 1);
      std::string who = absl::StrCat("worker ", id);
      for (const auto& stage : job.status().stages()) {
        if (stage.worker_id() == id) who = absl::StrCat("stage ", stage.stage(), ": worker ", id);
      }
      failure = absl::StrCat(who, " ", exit.ToString());
      printer.BreakLine();
      out << "pacictl: " << failure << "\n";
    }
    if (!failure.empty()) break;
    v1::GetJobRequest get;
    get.set_name(spec->name());
    v1::Job latest;
    if (stub->GetJob(Context(absl::Seconds(5)).get(), get, &latest).ok()) job = latest;
    if (!told_stages && job.status().phase() == v1::RUNNING && !job.status().stages().empty()) {
      told_stages = true;
      printer.BreakLine();
      for (const auto& stage : job.status().stages()) {
        out << "pacictl: stage " << stage.stage() << ": worker " << stage.worker_id() << " pid "
            << stage.pid() << " metrics=http://" << stage.metrics_address() << "/metrics\n";
      }
    }
    printer.Update(ViewOfJob(job, absl::Now()), absl::Now());
  }
  printer.Finish(ViewOfJob(job, absl::Now()));
  if (interrupted || !failure.empty()) {
    v1::CancelJobRequest cancel;
    cancel.set_name(spec->name());
    stub->CancelJob(Context(absl::Seconds(5)).get(), cancel, &job);
  }
  v1::JobTrace trace;
  if (!options_.trace_path.empty()) {
    v1::GetJobRequest get;
    get.set_name(spec->name());
    stub->GetJobTrace(Context(absl::Seconds(10)).get(), get, &trace);
  }
  if (!interrupted && failure.empty() && options_.linger > absl::ZeroDuration()) {
    WaitForOutputOrExits(relay, processes, printer, options_.linger);
  }
  processes.StopAll(options_.stop_grace);
  // Every process has exited: what they wrote last is in the pipes.
  for (const std::string& line : relay.Drain(absl::Seconds(5))) printer.PrintAbove(line);

  v1::RunSummary summary = SummaryOfJob(job, absl::ToDoubleSeconds(absl::Now() - start));
  int code = kExitSucceeded;
  if (interrupted) {
    summary.set_succeeded(false);
    summary.set_error("interrupted");
    out << "pacictl: interrupted; all workers stopped\n";
    code = kExitInterrupted;
  } else if (!failure.empty()) {
    summary.set_succeeded(false);
    summary.set_error(failure);
    out << "pacictl: training failed: " << failure << "\n";
    code = kExitTrainingFailed;
  } else if (summary.succeeded()) {
    out << "\n" << FormatSummaryTable(summary);
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
    std::vector<std::vector<v1::Span>> spans(num_stages);
    std::vector<int64_t> dropped(num_stages, 0);
    size_t count = 0;
    for (const v1::StageTrace& stage : trace.stages()) {
      if (stage.stage() < 0 || stage.stage() >= num_stages) continue;
      spans[stage.stage()].assign(stage.spans().begin(), stage.spans().end());
      dropped[stage.stage()] = stage.spans_dropped();
      count += stage.spans_size();
    }
    if (const absl::Status written =
            WriteChromeTrace(options_.trace_path, spec->name(), spans, dropped);
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
