#pragma once

// What the binaries' main()s share: how they start and end (SIGINT and
// SIGTERM: common/shutdown_signal.h), the port file a launcher waits for, and
// their /metrics endpoint.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "common/metrics_http_server.h"
#include "common/shutdown_signal.h"

namespace paci {

// The start of a main(): parses the flags (`usage` for --help), starts glog,
// logging to stderr, and installs the crash handler under `program`'s name.
// Returns the positional arguments, argv[0] first.
std::vector<char*> InitMain(int argc, char** argv, const char* program, const char* usage);

// The end of a main(): 0 for OK; otherwise logs "<name> failed: <message>",
// the name being `program` without its "paci_", and returns 1.
int MainExitCode(const absl::Status& status, absl::string_view program);

// A whole main() of a binary that serves until SIGINT or SIGTERM: InitMain,
// a ShutdownSignal (before any thread starts), `run`, MainExitCode.
int RunMain(int argc, char** argv, const char* program, const char* usage,
            absl::FunctionRef<absl::Status(const ShutdownSignal&)> run);

// Writes `port` and a newline to `path` with WriteFileAtomically, so that a
// reader polling for the file never sees it half written. Unavailable naming
// the file and the reason when that fails (the temporary file is removed).
absl::Status WritePortFile(const std::string& path, int port);

// Starts `server` (with any handlers already added) on `address`
// ("host:port", port 0: any free one) and, when `port_file` is not empty,
// writes the bound port there. Returns the bound port; the error of
// MetricsHttpServer::Start or WritePortFile.
absl::StatusOr<int> ServeMetrics(MetricsHttpServer& server, const std::string& address,
                                 const std::string& port_file = "");

}  // namespace paci
