#include "kube/exec_credential.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/process.h"
#include "common/status_macros.h"

namespace paci::kube {
namespace {

using nlohmann::json;

constexpr char kExecInfoEnv[] = "KUBERNETES_EXEC_INFO";
// As client-go says it when the command is missing.
constexpr char kInstallHelp[] =
    "\n\nIt looks like you are trying to use a client-go credential plugin that is not "
    "installed.\n\nTo learn more about this feature, consult the documentation available at:\n"
    "      https://kubernetes.io/docs/reference/access-authn-authz/authentication/"
    "#client-go-credential-plugins";
// Enough for any credential; a runaway plugin is cut off here.
constexpr size_t kMaxOutput = 4 << 20;

struct ProcessResult {
  int exit_code = 0;    // when it exited
  int signal = 0;       // when a signal ended it
  bool timed_out = false;
  std::string out;
  std::string err;      // empty when stderr was passed through
};

// Reads a child's stdout (fds[0]) and stderr (fds[1], or -1) into `result`
// until both reach their end, at most kMaxOutput each; past the deadline (not
// when interactive) it stops and sets timed_out. A finished descriptor
// becomes -1 here (its owner closes it).
void ReadOutput(int fds[2], bool interactive, absl::Time deadline, ProcessResult& result) {
  std::string* sinks[2] = {&result.out, &result.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd polls[2];
    int count = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      polls[count] = {fds[i], POLLIN, 0};
      which[count++] = i;
    }
    int wait_ms = -1;
    if (!interactive) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        result.timed_out = true;
        return;
      }
      wait_ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    }
    const int ready = poll(polls, count, wait_ms);
    if (ready < 0 && errno != EINTR) return;
    for (int p = 0; p < count && ready > 0; ++p) {
      if (polls[p].revents == 0) continue;
      char buffer[8192];
      const ssize_t n = read(polls[p].fd, buffer, sizeof(buffer));
      const int i = which[p];
      if (n > 0) {
        if (sinks[i]->size() < kMaxOutput) sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        fds[i] = -1;
      }
    }
  }
}

// Runs `command` with `env` added to this process's environment; stdin and
// stderr are this process's when `interactive`, else /dev/null and captured.
// NotFound when the command is not in PATH.
absl::StatusOr<ProcessResult> RunProcess(const std::string& command,
                                         const std::vector<std::string>& args,
                                         std::vector<std::pair<std::string, std::string>> env,
                                         bool interactive, absl::Duration timeout) {
  ProcessCommand plugin{command, args, std::move(env)};
  plugin.search_path = true;  // as Go's exec.LookPath does
  plugin.stdin_from_null = !interactive;
  plugin.output =
      interactive ? ProcessCommand::Output::kStdoutOnly : ProcessCommand::Output::kSeparate;
  plugin.own_process_group = false;  // an interactive login reads the terminal
  ChildProcesses processes;  // waited for before this returns, so this thread outlives it
  ASSIGN_OR_RETURN(const int child, processes.Start(plugin));
  ProcessResult result;
  int fds[2] = {processes.output_fd(child), processes.error_fd(child)};
  ReadOutput(fds, interactive, absl::Now() + timeout, result);
  if (result.timed_out) processes.Signal(child, SIGKILL);
  const ProcessExit exit = processes.Wait(child);
  if (exit.wait_status >= 0 && WIFEXITED(exit.wait_status)) {
    result.exit_code = WEXITSTATUS(exit.wait_status);
  }
  if (exit.wait_status >= 0 && WIFSIGNALED(exit.wait_status)) {
    result.signal = WTERMSIG(exit.wait_status);
  }
  return result;
}

std::string Tail(const std::string& text, size_t length) {
  std::string trimmed(absl::StripAsciiWhitespace(text));
  if (trimmed.size() > length) trimmed = "..." + trimmed.substr(trimmed.size() - length);
  return trimmed;
}

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("decoding stdout: ", what));
}

}  // namespace

ExecCredentialPlugin::ExecCredentialPlugin(ExecPluginConfig config) : config_(std::move(config)) {}

std::string ExecCredentialPlugin::ExecInfo(bool interactive) const {
  nlohmann::ordered_json spec = nlohmann::ordered_json::object();
  if (!config_.cluster.is_null()) spec["cluster"] = config_.cluster;
  spec["interactive"] = interactive;
  nlohmann::ordered_json info = {
      {"kind", "ExecCredential"}, {"apiVersion", config_.api_version}, {"spec", spec}};
  return info.dump();
}

absl::StatusOr<ExecCredential> ExecCredentialPlugin::ParseCredential(
    const std::string& stdout_text, const std::string& api_version) {
  const json parsed = json::parse(stdout_text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Malformed(absl::StrCat("not a JSON object: ", Tail(stdout_text, 200)));
  }
  const json& version = parsed.value("apiVersion", json());
  if (!version.is_string() || version.get<std::string>() != api_version) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exec plugin is configured to use API version ", api_version,
        ", plugin returned version ", version.is_string() ? version.get<std::string>() : "(none)"));
  }
  const json& kind = parsed.value("kind", json());
  if (!kind.is_string() || kind.get<std::string>() != "ExecCredential") {
    return Malformed(absl::StrCat("kind is ", kind.dump(), ", not \"ExecCredential\""));
  }
  const json& status = parsed.value("status", json());
  if (status.is_null()) {
    return absl::InvalidArgumentError("exec plugin didn't return a status field");
  }
  if (!status.is_object()) return Malformed("status: not an object");
  auto text = [&](const char* key, std::string* out) -> absl::Status {
    const json& value = status.value(key, json());
    if (value.is_null()) return absl::OkStatus();
    if (!value.is_string()) return Malformed(absl::StrCat("status.", key, ": not a string"));
    *out = value.get<std::string>();
    return absl::OkStatus();
  };
  ExecCredential credential;
  std::string cert;
  std::string key;
  std::string expiry;
  const std::pair<const char*, std::string*> fields[] = {{"token", &credential.token},
                                                         {"clientCertificateData", &cert},
                                                         {"clientKeyData", &key},
                                                         {"expirationTimestamp", &expiry}};
  for (const auto& [name, out] : fields) {
    if (absl::Status s = text(name, out); !s.ok()) return s;
  }
  if (credential.token.empty() && cert.empty() && key.empty()) {
    return absl::InvalidArgumentError("exec plugin didn't return a token or cert/key pair");
  }
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("exec plugin returned only certificate or key, not both");
  }
  if (!expiry.empty()) {
    absl::Time when;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, expiry, &when, &error)) {
      return Malformed(
          absl::StrCat("status.expirationTimestamp: \"", expiry, "\" is not RFC 3339: ", error));
    }
    credential.expiry = when;
  }
  if (!cert.empty()) {
    absl::StatusOr<std::shared_ptr<const ClientIdentity>> identity = ClientIdentity::Parse(
        cert, key, "status.clientCertificateData", "status.clientKeyData");
    if (!identity.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("failed parsing client key/certificate: ", identity.status().message()));
    }
    credential.identity = *std::move(identity);
  }
  return credential;
}

absl::StatusOr<ExecCredential> ExecCredentialPlugin::Run() {
  const std::string& mode = config_.interactive_mode;
  const bool terminal = isatty(STDIN_FILENO) == 1;
  bool interactive = false;
  if (mode == "Never") {
    interactive = false;
  } else if (mode == "IfAvailable" || mode.empty()) {
    interactive = terminal;
  } else if (mode == "Always") {
    if (!terminal) {
      return absl::FailedPreconditionError(
          "exec plugin cannot support interactive mode: standard input is not a terminal");
    }
    interactive = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "exec plugin cannot support interactive mode: unknown interactiveMode: \"", mode, "\""));
  }

  std::vector<std::pair<std::string, std::string>> env = config_.env;
  env.emplace_back(kExecInfoEnv, ExecInfo(interactive));
  ++runs_;
  absl::StatusOr<ProcessResult> result =
      RunProcess(config_.command, config_.args, std::move(env), interactive, config_.timeout);
  if (!result.ok()) {
    if (absl::IsNotFound(result.status())) {
      std::string message =
          absl::StrCat("exec: executable ", config_.command, " not found", kInstallHelp);
      if (!config_.install_hint.empty()) absl::StrAppend(&message, "\n\n", config_.install_hint);
      return absl::FailedPreconditionError(message);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("exec: ", config_.command, ": ", result.status().message()));
  }
  const std::string stderr_tail =
      result->err.empty() ? "" : absl::StrCat(" (stderr: ", Tail(result->err, 500), ")");
  if (result->timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("exec: executable ", config_.command, " did not finish within ",
                     absl::FormatDuration(config_.timeout), " and was killed", stderr_tail));
  }
  if (result->signal != 0) {
    return absl::UnavailableError(absl::StrCat("exec: executable ", config_.command,
                                               " was killed by signal ", result->signal,
                                               stderr_tail));
  }
  if (result->exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("exec: executable ", config_.command,
                                               " failed with exit code ", result->exit_code,
                                               stderr_tail));
  }
  absl::StatusOr<ExecCredential> credential = ParseCredential(result->out, config_.api_version);
  if (!credential.ok()) {
    return absl::Status(credential.status().code(),
                        absl::StrCat("exec: executable ", config_.command, ": ",
                                     credential.status().message(), stderr_tail));
  }
  return credential;
}

absl::StatusOr<std::shared_ptr<const ExecCredential>> ExecCredentialPlugin::Get() {
  absl::MutexLock lock(&mutex_);
  if (cached_ != nullptr && !(cached_->expiry.has_value() && clock_->Now() > *cached_->expiry)) {
    return cached_;
  }
  cached_.reset();
  absl::StatusOr<ExecCredential> fresh = Run();
  if (!fresh.ok()) return fresh.status();
  cached_ = std::make_shared<const ExecCredential>(*std::move(fresh));
  return cached_;
}

void ExecCredentialPlugin::Refused(const std::shared_ptr<const ExecCredential>& used) {
  absl::MutexLock lock(&mutex_);
  if (cached_ == used) cached_.reset();
}

int ExecCredentialPlugin::runs() const {
  absl::MutexLock lock(&mutex_);
  return runs_;
}

void ExecCredentialPlugin::set_clock(const Clock* clock) {
  absl::MutexLock lock(&mutex_);
  clock_ = clock;
}

}  // namespace paci::kube
