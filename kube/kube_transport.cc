#include "kube/kube_transport.h"

#include <glog/logging.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "common/read_file.h"
#include "common/status_macros.h"

namespace paci::kube {
namespace {

// With the CA certificates given, and no system roots: httplib adds the
// system's roots unless told a CA file or folder, so it is told a folder
// that holds none (OpenSSL looks certificates up there by hash, lazily).
constexpr char kNoCaFolder[] = "/nonexistent/paci-only-the-given-ca";

}  // namespace

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

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> NewClient(const KubeClientOptions& options,
                                                                const ServerUrl& url,
                                                                const RequestAuth& auth,
                                                                absl::Duration read_timeout,
                                                                bool keep_alive) {
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
  client->set_keep_alive(keep_alive);
  // A request's headers and body go out as separate writes: without this, on
  // a kept connection Nagle's algorithm holds the body for the server's
  // delayed ACK (tens of milliseconds a request).
  client->set_tcp_nodelay(true);
  return client;
}

std::unique_ptr<httplib::ClientImpl> ConnectionPool::Take(const RequestAuth& auth) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    if (it->identity == auth.identity && it->ca == auth.ca) {
      std::unique_ptr<httplib::ClientImpl> client = std::move(it->client);
      idle_.erase(std::next(it).base());
      return client;
    }
  }
  return nullptr;
}

void ConnectionPool::Give(const RequestAuth& auth, std::unique_ptr<httplib::ClientImpl> client) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() >= kMaxIdle) idle_.erase(idle_.begin());  // the longest idle goes
  idle_.push_back({auth.identity, auth.ca, std::move(client)});
}

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

absl::StatusOr<RequestAuth> KubeCredentials::Get() {
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

void KubeCredentials::Answered(const RequestAuth& auth, int code) {
  if (code == 401 && auth.exec != nullptr) options_.exec_plugin->Refused(auth.exec);
}

absl::Status KubeCredentials::FromOptions(RequestAuth& auth) {
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

absl::StatusOr<std::string> KubeCredentials::Read(File& file, const std::string& path,
                                                  const char* what) {
  const absl::Time now = absl::Now();
  if (file.read && now - file.read_at < options_.credential_reload) return file.text;
  absl::StatusOr<std::string> text = ReadFileToString(path);
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

}  // namespace paci::kube
