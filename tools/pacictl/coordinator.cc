// pacictl submit, get, list, watch and cancel: the coordinator's client.

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "common/job_spec.h"
#include "common/text_formats.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "tools/exit_codes.h"
#include "tools/job_view.h"
#include "tools/local_launcher.h"  // CoordinatorFailure
#include "tools/pacictl/commands.h"
#include "tools/progress_printer.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "the coordinator to talk to");
ABSL_FLAG(std::string, phase, "", "list: only jobs in this phase (QUEUED, RUNNING, ...)");
ABSL_FLAG(std::string, selector, "", "list: only jobs with these labels, K=V[,K=V...]");
ABSL_FLAG(std::string, name_prefix, "", "list: only jobs whose name starts with this");
ABSL_FLAG(int, limit, 0, "list: at most this many jobs (0: every job, page after page)");
ABSL_FLAG(int, page_size, 0, "list: jobs per request (0: the coordinator's default, 100; max 1000)");
ABSL_FLAG(std::string, page_token, "", "list: start at this page (printed by a --limit list)");
ABSL_FLAG(std::string, labels, "", "submit: the job's labels, K=V[,K=V...]");

namespace paci::pacictl {
namespace {

// --labels or --selector into `labels`; false, having said why, when an item is not K=V.
bool ParseLabels(const std::string& text, const std::string& flag,
                 google::protobuf::Map<std::string, std::string>* labels) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> pairs =
      ParseKeyValues(text, flag);
  if (!pairs.ok()) {
    std::cerr << "pacictl: " << pairs.status().message() << "\n";
    return false;
  }
  for (auto& [key, value] : *pairs) (*labels)[key] = std::move(value);
  return true;
}

// The client commands.
class Client {
 public:
  explicit Client(std::unique_ptr<CoordinatorClient> coordinator)
      : coordinator_(std::move(coordinator)) {}

  int Fail(const absl::Status& status) const {
    std::cerr << "pacictl: " << status.message() << " ("
              << (status.code() == absl::StatusCode::kUnavailable
                      ? "is a coordinator running at " + coordinator_->address() + "?"
                      : absl::StrCat("code ", static_cast<int>(status.code())))
              << ")\n";
    return ExitCodeOf(CoordinatorFailure(status));
  }

  int Submit(const std::string& path) {
    absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(path);
    if (!spec.ok()) {
      std::cerr << "pacictl: " << path << ": " << spec.status().message() << "\n";
      return kExitUsage;
    }
    v1::SubmitJobRequest request;
    *request.mutable_spec() = *spec;
    if (!ParseLabels(absl::GetFlag(FLAGS_labels), "--labels", request.mutable_labels())) {
      return kExitUsage;
    }
    absl::StatusOr<v1::Job> job = coordinator_->Submit(request, absl::Seconds(30));
    return job.ok() ? PrintPhase(*job) : Fail(job.status());
  }

  int Get(const std::string& name) {
    v1::GetJobRequest request;
    request.set_name(name);
    absl::StatusOr<v1::Job> job = coordinator_->Get(request, absl::Seconds(30));
    if (!job.ok()) return Fail(job.status());
    std::cout << FormatJobDetails(*job, absl::Now());
    return kExitSucceeded;
  }

  int List() {
    v1::ListJobsRequest request;
    const std::string phase = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_phase));
    if (!phase.empty()) {
      v1::JobPhase value;
      if (!v1::JobPhase_Parse(phase, &value)) {
        std::cerr << "pacictl: --phase: one of QUEUED, RUNNING, RESTARTING, SUCCEEDED, FAILED, "
                     "CANCELLED\n";
        return kExitUsage;
      }
      request.set_phase(value);
    }
    if (!ParseLabels(absl::GetFlag(FLAGS_selector), "--selector",
                     request.mutable_label_selector())) {
      return kExitUsage;
    }
    const int limit = absl::GetFlag(FLAGS_limit);
    if (limit < 0 || absl::GetFlag(FLAGS_page_size) < 0) {
      std::cerr << "pacictl: --limit and --page_size: must not be negative\n";
      return kExitUsage;
    }
    request.set_name_prefix(absl::GetFlag(FLAGS_name_prefix));
    request.set_page_size(absl::GetFlag(FLAGS_page_size));
    request.set_page_token(absl::GetFlag(FLAGS_page_token));
    request.set_omit_loss_history(true);  // the table needs only the latest losses
    // Page after page (AIP-158) until the end or --limit.
    std::vector<v1::Job> jobs;
    std::string next;
    do {
      if (limit > 0) {
        const int left = limit - static_cast<int>(jobs.size());
        if (request.page_size() == 0 || request.page_size() > left) request.set_page_size(left);
      }
      absl::StatusOr<v1::ListJobsResponse> response =
          coordinator_->List(request, absl::Seconds(30));
      if (!response.ok()) return Fail(response.status());
      for (v1::Job& job : *response->mutable_jobs()) jobs.push_back(std::move(job));
      next = response->next_page_token();
      request.set_page_token(next);
    } while (!next.empty() && (limit == 0 || static_cast<int>(jobs.size()) < limit));
    std::cout << FormatJobTable(jobs, absl::Now());
    if (!next.empty()) std::cerr << "more jobs follow: --page_token=" << next << "\n";
    return kExitSucceeded;
  }

  int Watch(const std::string& name) {
    v1::WatchJobRequest request;
    request.set_name(name);
    auto context = coordinator_->Context(absl::InfiniteDuration());
    auto reader = coordinator_->jobs().WatchJob(context.get(), request);
    ProgressPrinter printer(std::cerr, isatty(STDERR_FILENO) == 1);
    v1::Job job;
    v1::JobPhase last_phase = v1::JOB_PHASE_UNSPECIFIED;
    while (reader->Read(&job)) {
      if (job.status().phase() != last_phase) {
        last_phase = job.status().phase();
        printer.PrintAbove("job " + job.name() + " " + v1::JobPhase_Name(last_phase) +
                           (job.status().message().empty() ? "" : ": " + job.status().message()));
      }
      printer.Update(ViewOfJob(job, absl::Now()), absl::Now());
    }
    printer.Finish(ViewOfJob(job, absl::Now()));
    const absl::Status status = FromGrpc(reader->Finish(), "coordinator WatchJob " + name);
    if (!status.ok()) return Fail(status);
    if (job.status().phase() == v1::SUCCEEDED) {
      std::cerr << "\n" << FormatSummaryTable(SummaryOfJob(job, 0));
      return kExitSucceeded;
    }
    return kExitTrainingFailed;
  }

  int Cancel(const std::string& name) {
    absl::StatusOr<v1::Job> job = coordinator_->Cancel(name, absl::Seconds(30));
    return job.ok() ? PrintPhase(*job) : Fail(job.status());
  }

 private:
  // "job NAME PHASE" on stdout.
  static int PrintPhase(const v1::Job& job) {
    std::cout << "job " << job.name() << " " << v1::JobPhase_Name(job.status().phase())
              << "\n";
    return kExitSucceeded;
  }

  const std::unique_ptr<CoordinatorClient> coordinator_;
};

}  // namespace

bool IsCoordinatorCommand(const std::string& command) {
  return command == "submit" || command == "get" || command == "list" || command == "watch" ||
         command == "cancel";
}

int CoordinatorCommand(const std::string& command, const std::string& argument) {
  absl::StatusOr<CoordinatorClientOptions> options =
      CoordinatorClientOptionsFromFlags(absl::GetFlag(FLAGS_coordinator),
                                        /*reconnect_quickly=*/false);
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> coordinator =
      options.ok() ? CoordinatorClient::Connect(*options)
                   : absl::StatusOr<std::unique_ptr<CoordinatorClient>>(options.status());
  if (!coordinator.ok()) {
    std::cerr << "pacictl: " << coordinator.status().message() << "\n";
    return kExitUsage;
  }
  Client client(*std::move(coordinator));
  if (command == "submit") return client.Submit(argument);
  if (command == "get") return client.Get(argument);
  if (command == "list") return client.List();
  if (command == "watch") return client.Watch(argument);
  if (command == "cancel") return client.Cancel(argument);
  return kExitUsage;  // not one of IsCoordinatorCommand's
}

}  // namespace paci::pacictl
