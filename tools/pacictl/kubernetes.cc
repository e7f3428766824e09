// pacictl get|watch trainingjob/NAME and logs: TrainingJobs and their pods'
// logs on Kubernetes, through the API server as kubectl reads them.

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "kube/kube_client.h"
#include "tools/exit_codes.h"
#include "tools/kube_job.h"
#include "tools/kube_logs.h"
#include "tools/pacictl/commands.h"
#include "tools/progress_printer.h"

ABSL_FLAG(std::string, kubeconfig, "",
          "logs, get/watch trainingjob/NAME: the kubeconfig (default: $KUBECONFIG's first "
          "file, else ~/.kube/config)");
ABSL_FLAG(std::string, namespace, "",
          "logs, get/watch trainingjob/NAME: the TrainingJob's namespace (default: the "
          "kubeconfig's)");
ABSL_FLAG(int, stage, 0, "logs: the stage whose pod's log to print");
ABSL_FLAG(int, replica, 0, "logs: with pipeline.dataParallel, the replica of that stage");
ABSL_FLAG(bool, dataset, false, "logs: the dataset initializer's pod instead");
ABSL_FLAG(int, tail, 0, "logs: only the last N lines (0: all)");
ABSL_FLAG(bool, follow, false, "logs: go on printing what the pod writes until it ends");

namespace paci::pacictl {
namespace {

// The API server of --kubeconfig (as kubectl finds it); nullptr, having said
// why, when it cannot be read.
std::unique_ptr<kube::KubeClient> KubeFromFlags(const std::string& command) {
  const std::string kubeconfig = KubeconfigPath(absl::GetFlag(FLAGS_kubeconfig));
  absl::StatusOr<kube::KubeClientOptions> options = kube::LoadKubeconfig(kubeconfig);
  if (!options.ok()) {
    std::cerr << "pacictl: " << command << ": " << options.status().message() << "\n";
    return nullptr;
  }
  return std::make_unique<kube::KubeClient>(*std::move(options));
}

}  // namespace

int TrainingJobCommand(const std::string& command, const std::string& name) {
  std::unique_ptr<kube::KubeClient> kube = KubeFromFlags(command);
  if (kube == nullptr) return kExitUsage;
  const std::string ns = absl::GetFlag(FLAGS_namespace);
  absl::StatusOr<op::TrainingJob> job;
  if (command == "get") {
    job = GetTrainingJob(*kube, ns, name);
  } else {
    ProgressPrinter printer(std::cerr, isatty(STDERR_FILENO) == 1);
    std::string last_phase;
    job = WatchTrainingJob(*kube, ns, name, [&](const op::TrainingJob& now) {
      if (const std::string phase = PhaseLine(now.status); phase != last_phase) {
        printer.PrintAbove("trainingjob " + name + " " + phase);
        last_phase = phase;
      }
      printer.Update(ViewOfTrainingJob(now, absl::Now()), absl::Now());
    });
    if (job.ok()) printer.Finish(ViewOfTrainingJob(*job, absl::Now()));
  }
  if (!job.ok()) {
    std::cerr << "pacictl: " << command << ": " << job.status().message() << "\n";
    return ExitCodeOf(job.status());
  }
  std::cout << FormatTrainingJob(*job, absl::Now()) << std::flush;
  if (command == "get") return kExitSucceeded;
  return TrainingJobSucceeded(job->status) ? kExitSucceeded : kExitTrainingFailed;
}

int Logs(const std::string& job) {
  std::unique_ptr<kube::KubeClient> kube = KubeFromFlags("logs");
  if (kube == nullptr) return kExitUsage;
  LogsRequest request;
  request.job = job;
  request.namespace_ = absl::GetFlag(FLAGS_namespace);
  request.stage = absl::GetFlag(FLAGS_stage);
  request.replica = absl::GetFlag(FLAGS_replica);
  request.dataset = absl::GetFlag(FLAGS_dataset);
  request.tail_lines = absl::GetFlag(FLAGS_tail);
  absl::Status read;
  if (absl::GetFlag(FLAGS_follow)) {
    read = FollowLogs(*kube, request,
                            [](std::string_view data) { std::cout << data << std::flush; });
  } else {
    absl::StatusOr<std::string> log = ReadLogs(*kube, request);
    if (log.ok()) std::cout << *log << std::flush;
    read = log.status();
  }
  if (!read.ok()) {
    std::cerr << "pacictl: logs: " << read.message() << "\n";
    return ExitCodeOf(read);
  }
  return kExitSucceeded;
}

}  // namespace paci::pacictl
