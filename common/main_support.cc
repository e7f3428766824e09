#include "common/main_support.h"

#include <glog/logging.h>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/crash_handler.h"
#include "common/flag_usage.h"
#include "common/status_macros.h"

namespace paci {

std::vector<char*> InitMain(int argc, char** argv, const char* program, const char* usage) {
  SetUsage(usage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  InstallCrashHandler(program);
  FLAGS_logtostderr = true;
  return args;
}

int MainExitCode(const absl::Status& status, absl::string_view program) {
  if (status.ok()) return 0;
  absl::ConsumePrefix(&program, "paci_");
  LOG(ERROR) << program << " failed: " << status.message();
  return 1;
}

int RunMain(int argc, char** argv, const char* program, const char* usage,
            absl::FunctionRef<absl::Status(const ShutdownSignal&)> run) {
  InitMain(argc, argv, program, usage);
  ShutdownSignal shutdown;
  return MainExitCode(run(shutdown), program);
}

absl::Status WritePortFile(const std::string& path, int port) {
  return WriteFileAtomically(path, absl::StrCat(port, "\n"));
}

absl::StatusOr<int> ServeMetrics(MetricsHttpServer& server, const std::string& address,
                                 const std::string& port_file) {
  ASSIGN_OR_RETURN(const int port, server.Start(address));
  if (!port_file.empty()) RETURN_IF_ERROR(WritePortFile(port_file, port));
  return port;
}

}  // namespace paci
