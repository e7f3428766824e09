#include "operator/kube/kube_client.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <glog/logging.h>
#include <httplib.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "operator/kube/pem.h"

namespace paci::op {
namespace {

using nlohmann::json;

std::string UrlEncode(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::BytesToHexString(std::string(1, static_cast<char>(c))));
    }
  }
  return out;
}

// The parts of KubeClientOptions::server.
struct ServerUrl {
  bool https = false;
  std::string host;  // without the brackets of an IPv6 address
  int port = 0;
  std::string prefix;  // "" or "/some/path", no trailing '/'
};

absl::StatusOr<ServerUrl> ParseServer(const std::string& server) {
  ServerUrl url;
  absl::string_view rest = server;
  if (absl::ConsumePrefix(&rest, "https://")) {
    url.https = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", server, "\": not an http:// or https:// URL"));
  }
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    url.prefix = std::string(absl::StripSuffix(rest.substr(slash), "/"));
  }
  absl::string_view port;
  if (absl::ConsumePrefix(&authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\": no ']'"));
    }
    url.host = std::string(authority.substr(0, close));
    authority.remove_prefix(close + 1);
    if (absl::ConsumePrefix(&authority, ":")) port = authority;
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
  }
  url.port = url.https ? 443 : 80;
  if (!port.empty() && (!absl::SimpleAtoi(port, &url.port) || url.port <= 0 || url.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\": bad port"));
  }
  if (url.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\": no host"));
  }
  return url;
}

// What one request presents, and whom it trusts.
struct RequestAuth {
  std::string token;
  std::shared_ptr<const ClientIdentity> identity;
  std::shared_ptr<const PemCertificates> ca;
  std::shared_ptr<const ExecCredential> exec;  // where token/identity came from, if a plugin
};

// With the CA certificates given, and no system roots: httplib adds the
// system's roots unless told a CA file or folder, so it is told a folder
// that holds none (OpenSSL looks certificates up there by hash, lazily).
constexpr char kNoCaFolder[] = "/nonexistent/paci-only-the-given-ca";

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> NewClient(const KubeClientOptions& options,
                                                                const ServerUrl& url,
                                                                const RequestAuth& auth,
                                                                absl::Duration read_timeout) {
  std::unique_ptr<httplib::ClientImpl> client;
  if (url.https) {
    auto ssl = std::make_unique<httplib::SSLClient>(url.host, url.port);
    if (!ssl->is_valid()) {
      return absl::InternalError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
    }
    if (auth.identity != nullptr && !auth.identity->Install(ssl->ssl_context())) {
      return absl::InternalError(
          absl::StrCat("TLS: cannot use the client certificate: ", TakeOpenSslErrors()));
    }
    if (auth.ca != nullptr) {
      ssl->set_ca_cert_store(auth.ca->NewStore());  // owned by the client
      ssl->set_ca_cert_path("", kNoCaFolder);
    }
    ssl->enable_server_certificate_verification(!options.insecure_skip_tls_verify);
    client = std::move(ssl);
  } else {
    client = std::make_unique<httplib::ClientImpl>(url.host, url.port);
  }
  if (!auth.token.empty()) client->set_bearer_token_auth(auth.token);
  client->set_connection_timeout(5, 0);
  const int64_t seconds = absl::ToInt64Seconds(read_timeout);
  client->set_read_timeout(seconds, 0);
  client->set_write_timeout(seconds, 0);
  client->set_keep_alive(false);
  return client;
}

// Why no response came, with what TLS knows. `before_response`: nothing
// came back at all (not a stream that ended).
std::string ConnectionError(httplib::Error error, httplib::ClientImpl& client,
                            const ServerUrl& url, const RequestAuth& auth, bool before_response) {
  std::string message = httplib::to_string(error);
  // A server that refuses the client's certificate (or its lack of one)
  // closes the connection after the handshake; OpenSSL often has no more to
  // say than that writing or reading failed.
  if (url.https && before_response &&
      (error == httplib::Error::Write || error == httplib::Error::Read ||
       error == httplib::Error::SSLConnection)) {
    if (auth.identity != nullptr) {
      absl::StrAppend(&message, ": the server may have refused the client certificate (CN=",
                      auth.identity->CommonName(), ")");
    } else if (auth.token.empty()) {
      absl::StrAppend(&message, ": no credentials were presented (a server that requires a "
                                "client certificate closes the connection)");
    }
  }
  if (error == httplib::Error::SSLServerVerification) {
    const long result = static_cast<httplib::SSLClient&>(client).get_openssl_verify_result();
    if (result != X509_V_OK) {
      absl::StrAppend(&message, ": ", X509_verify_cert_error_string(result),
                      " (is the cluster's certificate-authority the one that signed it?)");
    } else {
      absl::StrAppend(&message, ": the server's certificate is not for ", url.host);
    }
  }
  const std::string tls = TakeOpenSslErrors();
  if (!tls.empty()) absl::StrAppend(&message, " (", tls, ")");
  return message;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string ServerMessage(const std::string& body) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("message") && parsed["message"].is_string()) {
    return parsed["message"].get<std::string>();
  }
  return body.substr(0, 300);
}

}  // namespace

void WatchCanceller::Cancel() {
  cancelled_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stop_) stop_();
}

void WatchCanceller::Attach(std::function<void()> stop) {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = std::move(stop);
  if (cancelled_) stop_();
}

void WatchCanceller::Detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = nullptr;
}

absl::Status StatusFromHttp(int code, const std::string& body) {
  const std::string message = absl::StrCat("HTTP ", code, ": ", ServerMessage(body));
  json parsed = json::parse(body, nullptr, false);
  const std::string reason =
      parsed.is_object() && parsed.value("reason", json()).is_string() ? parsed["reason"].get<std::string>() : "";
  switch (code) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return reason == "AlreadyExists" ? absl::AlreadyExistsError(message)
                                       : absl::AbortedError(message);
    case 410:
      return absl::OutOfRangeError(message);
    default:
      return absl::UnavailableError(message);
  }
}

std::string CollectionPath(const std::string& group, const std::string& version,
                           const std::string& ns, const std::string& plural) {
  std::string path = group.empty() ? absl::StrCat("/api/", version)
                                   : absl::StrCat("/apis/", group, "/", version);
  if (!ns.empty()) absl::StrAppend(&path, "/namespaces/", ns);
  return absl::StrCat(path, "/", plural);
}

// The credentials of the requests: files read again once `reload` has
// passed (a failed read keeps the last good text), PEM parsed once per text,
// the exec plugin asked when nothing else is given.
class KubeClient::Credentials {
 public:
  explicit Credentials(const KubeClientOptions& options)
      : options_(options), server_(ParseServer(options.server)) {}

  const absl::StatusOr<ServerUrl>& server() const { return server_; }

  absl::StatusOr<RequestAuth> Get() ABSL_LOCKS_EXCLUDED(mutex_) {
    RequestAuth auth;
    {
      absl::MutexLock lock(&mutex_);
      RETURN_IF_ERROR(FromOptions(auth));
    }
    if (auth.token.empty() && auth.identity == nullptr && options_.exec_plugin != nullptr) {
      absl::StatusOr<std::shared_ptr<const ExecCredential>> credential =
          options_.exec_plugin->Get();
      if (!credential.ok()) {
        return absl::Status(credential.status().code(),
                            absl::StrCat("getting credentials: ", credential.status().message()));
      }
      auth.exec = *credential;
      auth.token = auth.exec->token;
      auth.identity = auth.exec->identity;
    }
    return auth;
  }

  // After the server answered `code` to a request made with `auth`.
  void Answered(const RequestAuth& auth, int code) {
    if (code == 401 && auth.exec != nullptr) options_.exec_plugin->Refused(auth.exec);
  }

 private:
  struct File {
    std::string text;
    bool read = false;
    absl::Time read_at = absl::InfinitePast();
  };

  // The token, CA and client certificate the options give.
  absl::Status FromOptions(RequestAuth& auth) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    auth.token = options_.bearer_token;
    if (!options_.token_file.empty()) {
      absl::StatusOr<std::string> token = Read(token_file_, options_.token_file, "tokenFile");
      if (token.ok()) {
        auth.token = std::string(absl::StripAsciiWhitespace(*token));
      } else if (auth.token.empty()) {
        return token.status();
      }
    }
    if (!options_.ca_data.empty() || !options_.ca_file.empty()) {
      std::string pem = options_.ca_data;
      if (pem.empty()) {
        ASSIGN_OR_RETURN(pem, Read(ca_file_, options_.ca_file, "certificate-authority"));
      }
      if (ca_ == nullptr || pem != ca_pem_) {
        ASSIGN_OR_RETURN(ca_, PemCertificates::Parse(
                                  pem, options_.ca_data.empty()
                                           ? "certificate-authority " + options_.ca_file
                                           : "certificate-authority-data"));
        ca_pem_ = pem;
      }
      auth.ca = ca_;
    }
    if (options_.client_cert_data.empty() && options_.client_cert_file.empty()) {
      return absl::OkStatus();
    }
    std::string cert = options_.client_cert_data;
    std::string key = options_.client_key_data;
    if (cert.empty()) {
      ASSIGN_OR_RETURN(cert, Read(cert_file_, options_.client_cert_file, "client-certificate"));
    }
    if (key.empty()) {
      if (options_.client_key_file.empty()) {
        return absl::InvalidArgumentError(
            "client-certificate without client-key or client-key-data");
      }
      ASSIGN_OR_RETURN(key, Read(key_file_, options_.client_key_file, "client-key"));
    }
    if (identity_ == nullptr || cert != identity_cert_ || key != identity_key_) {
      ASSIGN_OR_RETURN(identity_,
                       ClientIdentity::Parse(cert, key, "client-certificate", "client-key"));
      identity_cert_ = cert;
      identity_key_ = key;
    }
    auth.identity = identity_;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Read(File& file, const std::string& path, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const absl::Time now = absl::Now();
    if (file.read && now - file.read_at < options_.credential_reload) return file.text;
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) {
      if (file.read) {
        LOG(WARNING) << what << ": " << text.status().message() << "; keeping the last one read";
        return file.text;
      }
      return absl::Status(text.status().code(), absl::StrCat(what, ": ", text.status().message()));
    }
    file.text = *std::move(text);
    file.read = true;
    file.read_at = now;
    return file.text;
  }

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

KubeClient::KubeClient(KubeClientOptions options, KubeRequestObserver* observer)
    : options_(std::move(options)),
      observer_(observer),
      credentials_(std::make_shared<Credentials>(options_)) {}

void KubeClient::Observe(const std::string& verb, int code) {
  if (observer_ != nullptr) observer_->OnRequest(verb, code);
}

absl::StatusOr<json> KubeClient::Call(const std::string& verb, const std::string& path,
                                      const std::string& body, const std::string& content_type) {
  const absl::StatusOr<ServerUrl>& url = credentials_->server();
  if (!url.ok()) return url.status();
  absl::StatusOr<RequestAuth> auth = credentials_->Get();
  if (!auth.ok()) {
    Observe(verb, 0);
    return absl::UnauthenticatedError(absl::StrCat(verb, " ", path, ": ", auth.status().message()));
  }
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> client =
      NewClient(options_, *url, *auth, options_.request_timeout);
  if (!client.ok()) return client.status();
  const std::string full_path = url->prefix + path;
  const httplib::Headers headers = {{"Accept", "application/json"}};
  ERR_clear_error();
  httplib::ClientImpl& http = **client;
  httplib::Result result =
      verb == "GET"     ? http.Get(full_path, headers)
      : verb == "POST"  ? http.Post(full_path, headers, body, content_type)
      : verb == "PUT"   ? http.Put(full_path, headers, body, content_type)
      : verb == "PATCH" ? http.Patch(full_path, headers, body, content_type)
                        : http.Delete(full_path, headers, body, content_type);
  if (!result) {
    Observe(verb, 0);
    return absl::UnavailableError(absl::StrCat(verb, " ", options_.server, path, ": ",
                                               ConnectionError(result.error(), http, *url, *auth, true)));
  }
  Observe(verb, result->status);
  credentials_->Answered(*auth, result->status);
  if (result->status < 200 || result->status >= 300) {
    absl::Status status = StatusFromHttp(result->status, result->body);
    return absl::Status(status.code(), absl::StrCat(verb, " ", path, ": ", status.message()));
  }
  json parsed = json::parse(result->body, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::InternalError(absl::StrCat(verb, " ", path, ": the response is not JSON"));
  }
  return parsed;
}

absl::StatusOr<json> KubeClient::Get(const std::string& path) { return Call("GET", path, "", ""); }

absl::StatusOr<json> KubeClient::List(const std::string& path, const ListOptions& options) {
  std::string query;
  if (!options.label_selector.empty()) {
    absl::StrAppend(&query, query.empty() ? "?" : "&", "labelSelector=",
                    UrlEncode(options.label_selector));
  }
  if (!options.field_selector.empty()) {
    absl::StrAppend(&query, query.empty() ? "?" : "&", "fieldSelector=",
                    UrlEncode(options.field_selector));
  }
  return Call("GET", path + query, "", "");
}

absl::StatusOr<json> KubeClient::Create(const std::string& collection_path, const json& object) {
  return Call("POST", collection_path, object.dump(), "application/json");
}

absl::StatusOr<json> KubeClient::Update(const std::string& path, const json& object) {
  return Call("PUT", path, object.dump(), "application/json");
}

absl::StatusOr<json> KubeClient::MergePatch(const std::string& path, const json& patch) {
  return Call("PATCH", path, patch.dump(), "application/merge-patch+json");
}

absl::Status KubeClient::Delete(const std::string& path) {
  const json options = {{"kind", "DeleteOptions"},
                        {"apiVersion", "v1"},
                        {"propagationPolicy", "Background"}};
  return Call("DELETE", path, options.dump(), "application/json").status();
}

absl::StatusOr<json> KubeClient::UpdateStatus(const std::string& path, const json& current,
                                              const std::function<void(json&)>& mutate,
                                              int attempts) {
  json object = current;
  absl::Status last;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) {
      ASSIGN_OR_RETURN(object, Get(path));
    }
    mutate(object);
    absl::StatusOr<json> written = Call("PUT", path + "/status", object.dump(), "application/json");
    if (written.ok() || !absl::IsAborted(written.status())) return written;
    last = written.status();
  }
  return absl::AbortedError(
      absl::StrCat("status of ", path, " still conflicts after ", attempts, " writes: ",
                   last.message()));
}

namespace {

// The query of a watch request.
std::string WatchQuery(const WatchOptions& options) {
  std::string query = absl::StrCat("?watch=true&allowWatchBookmarks=true&timeoutSeconds=",
                                   options.timeout_seconds);
  if (!options.resource_version.empty()) {
    absl::StrAppend(&query, "&resourceVersion=", UrlEncode(options.resource_version));
  }
  if (!options.label_selector.empty()) {
    absl::StrAppend(&query, "&labelSelector=", UrlEncode(options.label_selector));
  }
  return query;
}

// A watch response as it arrives: newline-delimited JSON events, each handed
// to on_event. It stops at a malformed or ERROR event (error()) or when
// on_event returns false (stopped()).
class WatchLines {
 public:
  explicit WatchLines(const std::function<bool(const WatchEvent&)>& on_event)
      : on_event_(on_event) {}

  // Returns false to end the stream.
  bool Feed(const char* data, size_t length) {
    buffer_.append(data, length);
    size_t newline;
    while ((newline = buffer_.find('\n')) != std::string::npos) {
      const std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      if (!Dispatch(line)) return false;
    }
    return true;
  }
  const absl::Status& error() const { return error_; }
  bool stopped() const { return stopped_; }

 private:
  bool Dispatch(const std::string& line) {
    json event = json::parse(line, nullptr, false);
    if (!event.is_object() || !event.value("type", json()).is_string()) {
      error_ = absl::InternalError(absl::StrCat("malformed event: ", line.substr(0, 200)));
      return false;
    }
    const std::string type = event["type"].get<std::string>();
    if (type == "ERROR") {
      const json& object = event.value("object", json::object());
      const int code = object.is_object() && object.value("code", json()).is_number_integer()
                           ? object["code"].get<int>()
                           : 500;
      error_ = StatusFromHttp(code, object.dump());
      return false;
    }
    if (!on_event_(WatchEvent{type, event.value("object", json::object())})) {
      stopped_ = true;
      return false;
    }
    return true;
  }

  const std::function<bool(const WatchEvent&)>& on_event_;
  std::string buffer_;
  absl::Status error_;
  bool stopped_ = false;
};

}  // namespace

absl::Status KubeClient::Watch(const std::string& path, const WatchOptions& options,
                               const std::function<bool(const WatchEvent&)>& on_event,
                               WatchCanceller* canceller) {
  const auto in_watch = [&](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat("watch ", path, ": ", status.message()));
  };
  const absl::StatusOr<ServerUrl>& url = credentials_->server();
  if (!url.ok()) return url.status();
  absl::StatusOr<RequestAuth> auth = credentials_->Get();
  if (!auth.ok()) {
    Observe("WATCH", 0);
    return absl::UnauthenticatedError(absl::StrCat("watch ", path, ": ", auth.status().message()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<httplib::ClientImpl> client,
                   NewClient(options_, *url, *auth, absl::Seconds(options.timeout_seconds + 30)));
  if (canceller != nullptr) {
    if (canceller->cancelled()) return absl::CancelledError("watch cancelled");
    canceller->Attach([c = client.get()] { c->stop(); });
  }

  int code = 0;
  std::string error_body;
  WatchLines lines(on_event);
  const httplib::Headers headers = {{"Accept", "application/json"}};
  ERR_clear_error();
  httplib::Result result = client->Get(
      url->prefix + path + WatchQuery(options), headers,
      [&](const httplib::Response& response) {
        code = response.status;
        return true;
      },
      [&](const char* data, size_t length) {
        if (code == 200) return lines.Feed(data, length);
        error_body.append(data, length);
        return true;
      });
  if (canceller != nullptr) canceller->Detach();
  Observe("WATCH", code);
  credentials_->Answered(*auth, code);
  if (!lines.error().ok()) return in_watch(lines.error());
  if (lines.stopped()) return absl::OkStatus();
  if (canceller != nullptr && canceller->cancelled()) {
    return absl::CancelledError("watch cancelled");
  }
  if (code != 0 && code != 200) return in_watch(StatusFromHttp(code, error_body));
  if (!result) {
    return absl::UnavailableError(absl::StrCat("watch ", path, ": the connection ended: ",
                                               ConnectionError(result.error(), *client, *url,
                                                               *auth, code == 0)));
  }
  return absl::OkStatus();
}

}  // namespace paci::op
