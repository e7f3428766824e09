#pragma once

// A client-go credential plugin (kubeconfig users[].user.exec): a command
// that prints an ExecCredential (client.authentication.k8s.io/v1 or v1beta1)
// whose status carries a bearer token or a client certificate and key, as
// kind, GKE (gke-gcloud-auth-plugin) and EKS (aws eks get-token) use.
//
// As client-go does: the command runs with the process's environment plus
// the configured env and KUBERNETES_EXEC_INFO (an ExecCredential whose spec
// says whether it may be interactive and, with provideClusterInfo, the
// cluster); its credential is kept until its expirationTimestamp (forever
// without one) and fetched again once that has passed or after the API
// server answered 401 to it. One run at a time.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kube/pem.h"

namespace paci::kube {

inline constexpr char kExecApiV1[] = "client.authentication.k8s.io/v1";
inline constexpr char kExecApiV1Beta1[] = "client.authentication.k8s.io/v1beta1";

struct ExecPluginConfig {
  std::string api_version;  // kExecApiV1 or kExecApiV1Beta1
  // Looked up in PATH unless it holds a '/' (the kubeconfig reader makes a
  // relative one absolute against the kubeconfig's folder, as kubectl does).
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string install_hint;  // shown when the command is not found
  // "Never", "IfAvailable" (interactive when stdin is a terminal) or "Always".
  std::string interactive_mode = "IfAvailable";
  // spec.cluster of KUBERNETES_EXEC_INFO; null unless provideClusterInfo.
  nlohmann::json cluster;
  // A plugin that has not answered by then is killed (client-go waits
  // forever; an operator must not hang on a stuck login). Non-interactive
  // runs only.
  absl::Duration timeout = absl::Minutes(2);
};

struct ExecCredential {
  std::string token;                               // empty when a certificate is given
  std::shared_ptr<const ClientIdentity> identity;  // or null
  std::optional<absl::Time> expiry;                // status.expirationTimestamp
};

class ExecCredentialPlugin {
 public:
  explicit ExecCredentialPlugin(ExecPluginConfig config);

  const ExecPluginConfig& config() const { return config_; }

  // The cached credential while it has not expired, else the plugin's
  // answer. Errors say what failed: "exec: executable X not found" (with the
  // install hint), "... failed with exit code N" (with its stderr), a
  // malformed ExecCredential naming the field.
  absl::StatusOr<std::shared_ptr<const ExecCredential>> Get() ABSL_LOCKS_EXCLUDED(mutex_);

  // The API server refused `used` (HTTP 401): the next Get runs the plugin
  // again, unless another caller has already replaced `used`.
  void Refused(const std::shared_ptr<const ExecCredential>& used) ABSL_LOCKS_EXCLUDED(mutex_);

  // How often the command has run.
  int runs() const ABSL_LOCKS_EXCLUDED(mutex_);

  // The clock expirationTimestamp is judged by (Clock::Real(); tests give a
  // FakeClock). It must outlive the plugin.
  void set_clock(const Clock* clock) ABSL_LOCKS_EXCLUDED(mutex_);

  // The KUBERNETES_EXEC_INFO value for one run.
  std::string ExecInfo(bool interactive) const;

  // Reads a plugin's stdout; public for tests.
  static absl::StatusOr<ExecCredential> ParseCredential(const std::string& stdout_text,
                                                        const std::string& api_version);

 private:
  absl::StatusOr<ExecCredential> Run() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const ExecPluginConfig config_;
  mutable absl::Mutex mutex_;
  std::shared_ptr<const ExecCredential> cached_ ABSL_GUARDED_BY(mutex_);
  int runs_ ABSL_GUARDED_BY(mutex_) = 0;
  const Clock* clock_ ABSL_GUARDED_BY(mutex_) = &Clock::Real();
};

}  // namespace paci::kube
