// pacictl: runs a training job locally, one worker process per stage.
//
//   pacictl train SPEC.yaml [--summary=PATH] [--trace=PATH] [--worker_binary=PATH]
//                 [--worker_flags=...]
//   pacictl help

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "tools/local_launcher.h"

ABSL_FLAG(std::string, summary, "", "write the run summary as JSON to this path");
ABSL_FLAG(std::string, trace, "",
          "record a timeline of every stage and write it to this path as Chrome trace JSON "
          "(open in ui.perfetto.dev or chrome://tracing)");
ABSL_FLAG(int, trace_max_spans, 100000,
          "with --trace: spans kept per stage, the first ones (about 6 per micro-batch)");
ABSL_FLAG(std::string, worker_flags, "",
          "extra flags for every worker, separated by spaces, e.g. --exit_delay_seconds=2");
ABSL_FLAG(std::string, worker_binary, "",
          "the paci_worker binary; default: next to pacictl, or ../worker/paci_worker");

namespace {

constexpr char kUsage[] =
    "usage: pacictl train SPEC.yaml [--summary=PATH] [--trace=PATH] [--trace_max_spans=N]\n"
    "                     [--worker_binary=PATH] [--worker_flags='--flag=value ...']\n"
    "       pacictl help\n"
    "\n"
    "train   runs the job in SPEC.yaml on this machine: one paci_worker process per\n"
    "        pipeline stage, live progress on stderr, a summary table at the end.\n"
    "        Worker output is printed line by line, prefixed \"[stage S] \".\n"
    "        --summary=PATH also writes the run summary as JSON.\n"
    "        --trace=PATH also writes a timeline of every stage (forward, backward,\n"
    "        optimizer step, send, idle, eval, checkpoint spans) as Chrome trace JSON.\n"
    "Exit codes: 0 success, 1 training failed, 2 usage or spec error, 130 interrupted.\n";

std::atomic<bool> stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

extern "C" void OnStopSignal(int) { stop_requested.store(true); }

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);

  if (args.size() == 2 && std::string(args[1]) == "help") {
    std::cout << kUsage;
    return paci::kExitSucceeded;
  }
  if (args.size() != 3 || std::string(args[1]) != "train") {
    std::cerr << kUsage;
    return paci::kExitUsage;
  }

  paci::LocalLauncherOptions options;
  options.spec_path = args[2];
  options.summary_path = absl::GetFlag(FLAGS_summary);
  options.trace_path = absl::GetFlag(FLAGS_trace);
  options.trace_max_spans = absl::GetFlag(FLAGS_trace_max_spans);
  if (options.trace_max_spans < 1) {
    std::cerr << "pacictl: --trace_max_spans: must be at least 1, got " << options.trace_max_spans
              << "\n";
    return paci::kExitUsage;
  }
  options.worker_flags = absl::StrSplit(absl::GetFlag(FLAGS_worker_flags), ' ', absl::SkipEmpty());
  options.worker_binary = absl::GetFlag(FLAGS_worker_binary);
  if (options.worker_binary.empty()) {
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    const absl::StatusOr<std::string> found = paci::FindWorkerBinary(self.string());
    if (!found.ok()) {
      std::cerr << "pacictl: " << found.status().message() << "\n";
      return paci::kExitUsage;
    }
    options.worker_binary = *found;
  } else if (access(options.worker_binary.c_str(), X_OK) != 0) {
    std::cerr << "pacictl: --worker_binary: " << options.worker_binary
              << " is not an executable file\n";
    return paci::kExitUsage;
  }
  options.out = &std::cerr;
  options.redraw_in_place = isatty(STDERR_FILENO) == 1;
  options.stop_requested = &stop_requested;

  InstallStopHandlers();
  return paci::LocalLauncher(options).Run();
}
