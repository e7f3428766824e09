#pragma once

// How the KubeClient's requests reach the API server and what they present:
// the server URL, the credentials (tokens, CA and client certificates read
// again as they rotate, or an exec plugin's), one HTTP client per request,
// and why a request got no answer.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <httplib.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/exec_credential.h"
#include "kube/kube_client.h"
#include "kube/pem.h"

namespace paci::kube {

// The parts of KubeClientOptions::server.
struct ServerUrl {
  bool https = false;
  std::string host;  // without the brackets of an IPv6 address
  int port = 0;
  std::string prefix;  // "" or "/some/path", no trailing '/'
};
// InvalidArgument naming the server for a URL that is not http(s)://HOST[:PORT][/PREFIX].
absl::StatusOr<ServerUrl> ParseServer(const std::string& server);

// What one request presents, and whom it trusts.
struct RequestAuth {
  std::string token;
  std::shared_ptr<const ClientIdentity> identity;
  std::shared_ptr<const PemCertificates> ca;
  std::shared_ptr<const ExecCredential> exec;  // where token/identity came from, if a plugin
};

// A client to `url` presenting `auth`, reads timing out after
// `read_timeout`; with `keep_alive` its connection stays open for the next
// request (ConnectionPool). Internal with OpenSSL's reason when TLS cannot be
// set up.
absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> NewClient(const KubeClientOptions& options,
                                                                const ServerUrl& url,
                                                                const RequestAuth& auth,
                                                                absl::Duration read_timeout,
                                                                bool keep_alive = false);

// Clients whose connections stay open between requests (HTTP keep-alive), so
// that a request does not pay a TCP and TLS handshake and the API server does
// not either: each serves one request at a time, taken for it and given back
// once its answer has been read whole. A client of other credentials (a
// rotated certificate or CA) is not reused. At most kMaxIdle are kept.
// Thread-safe.
class ConnectionPool {
 public:
  static constexpr size_t kMaxIdle = 8;
  // An idle client of these credentials, or null.
  std::unique_ptr<httplib::ClientImpl> Take(const RequestAuth& auth);
  void Give(const RequestAuth& auth, std::unique_ptr<httplib::ClientImpl> client);

 private:
  struct Idle {
    std::shared_ptr<const ClientIdentity> identity;
    std::shared_ptr<const PemCertificates> ca;
    std::unique_ptr<httplib::ClientImpl> client;
  };
  std::mutex mutex_;
  std::vector<Idle> idle_;  // guarded by mutex_
};

// Why no response came, with what TLS knows. `before_response`: nothing
// came back at all (not a stream that ended).
std::string ConnectionError(httplib::Error error, httplib::ClientImpl& client,
                            const ServerUrl& url, const RequestAuth& auth, bool before_response);

// The credentials of the requests: files read again once `reload` has
// passed (a failed read keeps the last good text), PEM parsed once per text,
// the exec plugin asked when nothing else is given. Thread-safe.
class KubeCredentials {
 public:
  explicit KubeCredentials(const KubeClientOptions& options)
      : options_(options), server_(ParseServer(options.server)) {}

  const absl::StatusOr<ServerUrl>& server() const { return server_; }

  // What the next request presents. Errors name the file or the plugin.
  absl::StatusOr<RequestAuth> Get() ABSL_LOCKS_EXCLUDED(mutex_);

  // After the server answered `code` to a request made with `auth`: a 401 to
  // an exec plugin's credential makes the plugin be asked again.
  void Answered(const RequestAuth& auth, int code);

 private:
  struct File {
    std::string text;
    bool read = false;
    absl::Time read_at = absl::InfinitePast();
  };

  // The token, CA and client certificate the options give.
  absl::Status FromOptions(RequestAuth& auth) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::StatusOr<std::string> Read(File& file, const std::string& path, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const KubeClientOptions options_;
  const absl::StatusOr<ServerUrl> server_;
  absl::Mutex mutex_;
  File token_file_ ABSL_GUARDED_BY(mutex_);
  File ca_file_ ABSL_GUARDED_BY(mutex_);
  File cert_file_ ABSL_GUARDED_BY(mutex_);
  File key_file_ ABSL_GUARDED_BY(mutex_);
  std::string ca_pem_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const PemCertificates> ca_ ABSL_GUARDED_BY(mutex_);
  std::string identity_cert_ ABSL_GUARDED_BY(mutex_);
  std::string identity_key_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<const ClientIdentity> identity_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace paci::kube
