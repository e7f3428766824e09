// pacictl train, parity, sample and export: what runs on this machine beside
// pacictl (paci_coordinator and paci_worker, paci_model).

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/shutdown_signal.h"
#include "tools/exit_codes.h"
#include "tools/local_launcher.h"
#include "tools/pacictl/commands.h"
#include "tools/parity.h"

ABSL_FLAG(std::string, summary, "", "train: write the run summary as JSON to this path");
ABSL_FLAG(std::string, trace, "",
          "train: record a timeline of every stage and write it to this path as Chrome trace "
          "JSON (open in ui.perfetto.dev or chrome://tracing)");
ABSL_FLAG(int, trace_max_spans, 100000,
          "with --trace: spans kept per stage, the first ones (about 6 per micro-batch)");
ABSL_FLAG(std::string, worker_flags, "",
          "train: extra flags for every worker, separated by spaces");
ABSL_FLAG(double, linger_seconds, 0,
          "train: keep the processes and their /metrics up this long after the job ends");
ABSL_FLAG(std::string, worker_binary, "", "train: paci_worker; default: beside pacictl");
ABSL_FLAG(std::string, coordinator_binary, "",
          "train: paci_coordinator; default: beside pacictl");
ABSL_FLAG(std::string, model_binary, "", "sample, export: paci_model; default: beside pacictl");
ABSL_FLAG(std::string, seeds, "1,2,3",
          "parity: the seeds (model.init_seed and data.seed) of the pairs of runs");
ABSL_FLAG(int64_t, steps, 0, "parity: optimizer steps of every run (0: the spec's training.steps)");

namespace paci::pacictl {
namespace {

std::string Sibling(const std::string& flag, const std::string& name, const std::string& subdir) {
  if (!flag.empty()) return access(flag.c_str(), X_OK) == 0 ? flag : "";
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const absl::StatusOr<std::string> found = FindSiblingBinary(self.string(), name, subdir);
  return found.ok() ? *found : "";
}

// What every local run of train and parity takes from the flags and the
// terminal: the binaries (false, having said why, when they cannot be
// found), progress on stderr, `shutdown` to stop it.
bool LauncherFromFlags(const ShutdownSignal* shutdown, LocalLauncherOptions* options) {
  options->worker_binary = Sibling(absl::GetFlag(FLAGS_worker_binary), "paci_worker", "worker");
  options->coordinator_binary =
      Sibling(absl::GetFlag(FLAGS_coordinator_binary), "paci_coordinator", "server");
  if (options->worker_binary.empty() || options->coordinator_binary.empty()) {
    std::cerr << "pacictl: cannot find paci_worker and paci_coordinator beside pacictl; pass "
                 "--worker_binary and --coordinator_binary\n";
    return false;
  }
  options->out = &std::cerr;
  options->redraw_in_place = isatty(STDERR_FILENO) == 1;
  options->shutdown = shutdown;
  return true;
}

}  // namespace

int Train(const std::string& spec_path) {
  LocalLauncherOptions options;
  options.spec_path = spec_path;
  options.summary_path = absl::GetFlag(FLAGS_summary);
  options.trace_path = absl::GetFlag(FLAGS_trace);
  options.trace_max_spans = absl::GetFlag(FLAGS_trace_max_spans);
  if (options.trace_max_spans < 1) {
    std::cerr << "pacictl: --trace_max_spans: must be at least 1\n";
    return kExitUsage;
  }
  options.worker_flags = absl::StrSplit(absl::GetFlag(FLAGS_worker_flags), ' ', absl::SkipEmpty());
  options.linger = absl::Seconds(absl::GetFlag(FLAGS_linger_seconds));
  ShutdownSignal shutdown;  // SIGINT and SIGTERM stop the run, exit 130
  if (!LauncherFromFlags(&shutdown, &options)) return kExitUsage;
  return LocalLauncher(options).Run();
}

int Parity(const std::string& spec_path) {
  ParityOptions options;
  options.spec_path = spec_path;
  options.seeds.clear();
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_seeds), ',', absl::SkipWhitespace())) {
    int seed = 0;
    if (!absl::SimpleAtoi(item, &seed)) {
      std::cerr << "pacictl: --seeds: must be integers separated by commas, got \""
                << absl::GetFlag(FLAGS_seeds) << "\"\n";
      return kExitUsage;
    }
    options.seeds.push_back(seed);
  }
  options.steps = absl::GetFlag(FLAGS_steps);
  options.out_dir = absl::GetFlag(FLAGS_out);
  ShutdownSignal shutdown;  // SIGINT and SIGTERM stop the run in progress, exit 130
  if (!LauncherFromFlags(&shutdown, &options.launch)) return kExitUsage;
  return RunParity(options);
}

int RunModelCommand(int argc, char** argv) {
  std::vector<char*> own = {argv[0]};
  std::vector<char*> passed = {const_cast<char*>("paci_model"), argv[1]};
  for (int i = 2; i < argc; ++i) {
    const absl::string_view flag = argv[i];
    if (absl::StartsWith(flag, "--model_binary=") || absl::StartsWith(flag, "-model_binary=")) {
      own.push_back(argv[i]);
    } else if ((flag == "--model_binary" || flag == "-model_binary") && i + 1 < argc) {
      own.push_back(argv[i]);
      own.push_back(argv[++i]);
    } else {
      passed.push_back(argv[i]);
    }
  }
  absl::ParseCommandLine(static_cast<int>(own.size()), own.data());
  const std::string binary = Sibling(absl::GetFlag(FLAGS_model_binary), "paci_model", "worker");
  if (binary.empty()) {
    std::cerr << "pacictl: cannot find paci_model beside pacictl; pass --model_binary\n";
    return kExitUsage;
  }
  passed.push_back(nullptr);
  execv(binary.c_str(), passed.data());
  std::cerr << "pacictl: cannot run " << binary << ": " << std::strerror(errno) << "\n";
  return kExitTrainingFailed;
}

}  // namespace paci::pacictl
