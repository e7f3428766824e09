#pragma once

// A small client of the Kubernetes REST API: JSON objects in and out, list
// and watch with resourceVersion, the status subresource with conflict retry.
// HTTP errors become absl::Status here and nowhere else:
//   404 NotFound, 409 AlreadyExists (create) or Aborted (stale
//   resourceVersion), 410 OutOfRange (resourceVersion expired), 400/422
//   InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 429/5xx and
//   connection failures Unavailable. The message carries the server's.
//
// Thread-safe: every call opens its own connection, so calls may run
// concurrently from several threads. Calls block.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paci::op {

struct KubeClientOptions {
  std::string server;  // "https://host:port" or "http://host:port"
  std::string bearer_token;
  std::string ca_file;  // PEM bundle that signed the server (https)
  std::string ca_data;  // or the PEM itself (kubeconfig certificate-authority-data)
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  absl::Duration request_timeout = absl::Seconds(30);
};

// The current context of a kubeconfig file: server, CA, token (or tokenFile).
// InvalidArgument naming the missing key; Unimplemented for client
// certificates and exec plugins, which this client does not speak.
absl::StatusOr<KubeClientOptions> LoadKubeconfig(const std::string& path);

// In a pod: https://<host>:<port> with the service account's token and CA
// (the caller passes KUBERNETES_SERVICE_HOST/PORT; files are read here).
absl::StatusOr<KubeClientOptions> InClusterConfig(
    const std::string& host, const std::string& port,
    const std::string& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
  nlohmann::json object;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
};

struct WatchOptions {
  std::string resource_version;  // resume after this version; empty: from now
  std::string label_selector;
  int timeout_seconds = 300;  // the server ends the watch after this
};

// Told about every request, for metrics.
class KubeRequestObserver {
 public:
  virtual ~KubeRequestObserver() = default;
  // `code` is the HTTP status, 0 when no response came.
  virtual void OnRequest(const std::string& verb, int code) = 0;
};

// Lets another thread end a Watch that is blocked reading.
class WatchCanceller {
 public:
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class KubeClient;
  void Attach(std::function<void()> stop);
  void Detach();
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::function<void()> stop_;
};

class KubeClient {
 public:
  explicit KubeClient(KubeClientOptions options, KubeRequestObserver* observer = nullptr);

  const KubeClientOptions& options() const { return options_; }

  // `path` is the URL path of an object or a collection, e.g.
  // "/api/v1/namespaces/default/pods/p" or "/apis/paci.dev/v1alpha1/trainingjobs".
  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  // A collection; its metadata.resourceVersion is where a watch resumes.
  absl::StatusOr<nlohmann::json> List(const std::string& path, const ListOptions& options = {});
  absl::StatusOr<nlohmann::json> Create(const std::string& collection_path,
                                        const nlohmann::json& object);
  // PUT; Aborted when object's metadata.resourceVersion is stale.
  absl::StatusOr<nlohmann::json> Update(const std::string& path, const nlohmann::json& object);
  // application/merge-patch+json.
  absl::StatusOr<nlohmann::json> MergePatch(const std::string& path, const nlohmann::json& patch);
  // Deletes with propagationPolicy Background. NotFound when it is gone.
  absl::Status Delete(const std::string& path);

  // Lets `mutate` change the .status of `current` (the object as last seen,
  // perhaps stale) and PUTs it to path + "/status". On a conflict (409) it
  // reads the object again, mutates the fresh copy and retries, up to
  // `attempts` writes. Returns the object as written.
  absl::StatusOr<nlohmann::json> UpdateStatus(const std::string& path,
                                              const nlohmann::json& current,
                                              const std::function<void(nlohmann::json&)>& mutate,
                                              int attempts = 5);

  // Streams the events of the collection at `path` to `on_event` until the
  // server ends the watch (OK), `on_event` returns false (OK), `canceller` is
  // cancelled (Cancelled), the connection drops (Unavailable), or the server
  // says the resourceVersion is too old (OutOfRange, by HTTP 410 or an ERROR
  // event with code 410). Blocks.
  absl::Status Watch(const std::string& path, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     WatchCanceller* canceller = nullptr);

 private:
  absl::StatusOr<nlohmann::json> Call(const std::string& verb, const std::string& path,
                                      const std::string& body, const std::string& content_type);
  void Observe(const std::string& verb, int code);

  KubeClientOptions options_;
  KubeRequestObserver* observer_;
};

// The Status for an HTTP error response (see the mapping above).
absl::Status StatusFromHttp(int code, const std::string& body);

// "/api/v1/namespaces/<ns>/<plural>" for group "" and
// "/apis/<group>/<version>/namespaces/<ns>/<plural>" otherwise; all
// namespaces when `ns` is empty.
std::string CollectionPath(const std::string& group, const std::string& version,
                           const std::string& ns, const std::string& plural);

}  // namespace paci::op
