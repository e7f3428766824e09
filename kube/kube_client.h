#pragma once

// A small client of the Kubernetes REST API: JSON objects in and out, list
// and watch with resourceVersion, the status subresource with conflict retry.
// HTTP errors become absl::Status here and nowhere else:
//   404 NotFound, 409 AlreadyExists (create) or Aborted (stale
//   resourceVersion), 410 OutOfRange (resourceVersion expired), 400/422
//   InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 429/5xx and
//   connection failures Unavailable. The message carries the server's.
// A credential that cannot be had (an exec plugin that fails, an unreadable
// certificate file) fails the call that needed it with Unauthenticated.
//
// Thread-safe: every call opens its own connection, so calls may run
// concurrently from several threads. Calls block.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/exec_credential.h"

namespace paci::kube {

class KubeCredentials;  // kube_transport.h

struct KubeClientOptions {
  // "https://host:port" or "http://host:port", perhaps with a path prefix
  // that every request path is put under (a proxy's "/k8s/clusters/c-1").
  std::string server;
  std::string bearer_token;
  // Read again every `credential_reload` (client-go: a minute), so a rotated
  // token (a projected service-account token) is picked up; bearer_token
  // serves until the file has been read. Wins over bearer_token.
  std::string token_file;
  std::string ca_file;  // PEM bundle that signed the server (https)
  std::string ca_data;  // or the PEM itself (kubeconfig certificate-authority-data)
  // A client certificate (PEM, the certificate then its chain) and its
  // private key, each as a file (read again every `credential_reload`, for
  // rotation) or as the PEM itself; the data wins over the file.
  std::string client_cert_file;
  std::string client_key_file;
  std::string client_cert_data;
  std::string client_key_data;
  // A credential plugin (kubeconfig users[].user.exec), asked when neither a
  // token nor a client certificate is given; shared by copies of the options.
  std::shared_ptr<ExecCredentialPlugin> exec_plugin;
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  absl::Duration request_timeout = absl::Seconds(30);
  absl::Duration credential_reload = absl::Minutes(1);
};

// The current context of a kubeconfig file, read as kubectl reads it:
// server and CA (file or data), and the user's token or tokenFile, client
// certificate and key (files or data) or exec credential plugin. Relative
// file paths (and an exec command with a '/') are relative to the
// kubeconfig's folder. InvalidArgument naming the key ("users[0].user.
// client-key-data: not valid base64") for a missing, malformed or unreadable
// value; Unimplemented for what this client does not speak (auth-provider,
// basic auth, impersonation, tls-server-name, proxy-url).
absl::StatusOr<KubeClientOptions> LoadKubeconfig(const std::string& path);

// In a pod: https://<host>:<port> with the service account's token (read
// again every minute: kubelet rotates it) and CA (the caller passes
// KUBERNETES_SERVICE_HOST/PORT; files are read here).
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
  std::string field_selector;  // "metadata.name=NAME": one object's events
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

class ConnectionPool;  // kube_transport.h

class KubeClient {
 public:
  explicit KubeClient(KubeClientOptions options, KubeRequestObserver* observer = nullptr);

  const KubeClientOptions& options() const { return options_; }

  // `path` is the URL path of an object or a collection, e.g.
  // "/api/v1/namespaces/default/pods/p" or "/apis/paci.dev/v1alpha1/trainingjobs".
  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  // A path that answers text, not an object: a pod's log
  // (".../pods/<name>/log?tailLines=1").
  absl::StatusOr<std::string> GetText(const std::string& path);
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

  // A GET whose body is handed to `on_data` as it arrives (a followed log:
  // ".../pods/<name>/log?follow=true"), until the server ends it (OK), `on_data`
  // returns false (OK) or `canceller` is cancelled (Cancelled). Unavailable
  // when the connection drops or stays silent for `idle_timeout`; the
  // server's refusal as the mapping above says. Blocks.
  absl::Status Stream(const std::string& path, absl::Duration idle_timeout,
                      const std::function<bool(std::string_view)>& on_data,
                      WatchCanceller* canceller = nullptr);

 private:
  absl::StatusOr<nlohmann::json> Call(const std::string& verb, const std::string& path,
                                      const std::string& body, const std::string& content_type);
  absl::StatusOr<std::string> CallForBody(const std::string& verb, const std::string& path,
                                          const std::string& body, const std::string& content_type,
                                          const std::string& accept);
  // Watch's and Stream's GET: `what` names it in errors ("watch <path>"),
  // `verb` in the request metrics.
  absl::Status StreamGet(const std::string& what, const std::string& verb, const std::string& path,
                         absl::Duration read_timeout,
                         const std::function<bool(const char*, size_t)>& on_data,
                         WatchCanceller* canceller);
  void Observe(const std::string& verb, int code);

  KubeClientOptions options_;
  KubeRequestObserver* observer_;
  std::shared_ptr<KubeCredentials> credentials_;
  // The connections kept open for the next request (not a watch's or a stream's).
  std::shared_ptr<ConnectionPool> connections_;
};

// The Status for an HTTP error response (see the mapping above).
absl::Status StatusFromHttp(int code, const std::string& body);

// "/api/v1/namespaces/<ns>/<plural>" for group "" and
// "/apis/<group>/<version>/namespaces/<ns>/<plural>" otherwise; all
// namespaces when `ns` is empty.
std::string CollectionPath(const std::string& group, const std::string& version,
                           const std::string& ns, const std::string& plural);

}  // namespace paci::kube
