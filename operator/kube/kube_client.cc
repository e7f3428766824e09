#include "operator/kube/kube_client.h"

#include <fstream>
#include <sstream>

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

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

// An X509 store from PEM text; nullptr when it holds no certificate.
X509_STORE* StoreFromPem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  X509_STORE* store = X509_STORE_new();
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    added += X509_STORE_add_cert(store, cert);
    X509_free(cert);
  }
  BIO_free(bio);
  if (added == 0) {
    X509_STORE_free(store);
    return nullptr;
  }
  return store;
}

std::unique_ptr<httplib::Client> NewClient(const KubeClientOptions& options,
                                           absl::Duration read_timeout) {
  auto client = std::make_unique<httplib::Client>(options.server);
  if (!options.bearer_token.empty()) client->set_bearer_token_auth(options.bearer_token);
  if (!options.ca_file.empty()) client->set_ca_cert_path(options.ca_file.c_str());
  if (!options.ca_data.empty()) {
    if (X509_STORE* store = StoreFromPem(options.ca_data)) client->set_ca_cert_store(store);
  }
  client->enable_server_certificate_verification(!options.insecure_skip_tls_verify);
  client->set_connection_timeout(5, 0);
  const int64_t seconds = absl::ToInt64Seconds(read_timeout);
  client->set_read_timeout(seconds, 0);
  client->set_write_timeout(seconds, 0);
  client->set_keep_alive(false);
  return client;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
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

absl::StatusOr<KubeClientOptions> LoadKubeconfig(const std::string& path) {
  YAML::Node config;
  try {
    config = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
  auto find_named = [&](const char* list, const std::string& name) -> YAML::Node {
    for (const YAML::Node& entry : config[list]) {
      if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
    }
    return YAML::Node();
  };
  if (!config["current-context"]) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": no current-context"));
  }
  const std::string context_name = config["current-context"].as<std::string>();
  YAML::Node context = find_named("contexts", context_name);
  if (!context || !context["context"]) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", path, ": context \"", context_name, "\" is not defined"));
  }
  KubeClientOptions options;
  const YAML::Node& ctx = context["context"];
  if (ctx["namespace"]) options.default_namespace = ctx["namespace"].as<std::string>();
  const std::string cluster_name = ctx["cluster"] ? ctx["cluster"].as<std::string>() : "";
  YAML::Node cluster = find_named("clusters", cluster_name);
  if (!cluster || !cluster["cluster"] || !cluster["cluster"]["server"]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig ", path, ": cluster \"", cluster_name, "\" has no clusters[].cluster.server"));
  }
  const YAML::Node& c = cluster["cluster"];
  options.server = c["server"].as<std::string>();
  if (c["certificate-authority"]) options.ca_file = c["certificate-authority"].as<std::string>();
  if (c["certificate-authority-data"]) {
    if (!absl::Base64Unescape(c["certificate-authority-data"].as<std::string>(),
                              &options.ca_data)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kubeconfig ", path, ": clusters[].cluster.certificate-authority-data is not base64"));
    }
  }
  if (c["insecure-skip-tls-verify"]) {
    options.insecure_skip_tls_verify = c["insecure-skip-tls-verify"].as<bool>();
  }
  const std::string user_name = ctx["user"] ? ctx["user"].as<std::string>() : "";
  YAML::Node user = find_named("users", user_name);
  if (user && user["user"]) {
    const YAML::Node& u = user["user"];
    if (u["client-certificate"] || u["client-certificate-data"] || u["exec"]) {
      return absl::UnimplementedError(absl::StrCat(
          "kubeconfig ", path, ": user \"", user_name,
          "\" authenticates with a client certificate or an exec plugin; use a token"));
    }
    if (u["token"]) options.bearer_token = u["token"].as<std::string>();
    if (u["tokenFile"]) {
      options.bearer_token =
          std::string(absl::StripTrailingAsciiWhitespace(ReadFile(u["tokenFile"].as<std::string>())));
    }
  }
  return options;
}

absl::StatusOr<KubeClientOptions> InClusterConfig(const std::string& host, const std::string& port,
                                                  const std::string& account_dir) {
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set; pass --kubeconfig");
  }
  KubeClientOptions options;
  options.server = absl::StrCat("https://", host, ":", port);
  options.bearer_token =
      std::string(absl::StripTrailingAsciiWhitespace(ReadFile(account_dir + "/token")));
  if (options.bearer_token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no service account token in ", account_dir, "/token"));
  }
  options.ca_file = account_dir + "/ca.crt";
  const std::string ns(absl::StripTrailingAsciiWhitespace(ReadFile(account_dir + "/namespace")));
  if (!ns.empty()) options.default_namespace = ns;
  return options;
}

KubeClient::KubeClient(KubeClientOptions options, KubeRequestObserver* observer)
    : options_(std::move(options)), observer_(observer) {}

void KubeClient::Observe(const std::string& verb, int code) {
  if (observer_ != nullptr) observer_->OnRequest(verb, code);
}

absl::StatusOr<json> KubeClient::Call(const std::string& verb, const std::string& path,
                                      const std::string& body, const std::string& content_type) {
  std::unique_ptr<httplib::Client> client = NewClient(options_, options_.request_timeout);
  const httplib::Headers headers = {{"Accept", "application/json"}};
  httplib::Result result =
      verb == "GET"     ? client->Get(path, headers)
      : verb == "POST"  ? client->Post(path, headers, body, content_type)
      : verb == "PUT"   ? client->Put(path, headers, body, content_type)
      : verb == "PATCH" ? client->Patch(path, headers, body, content_type)
                        : client->Delete(path, headers, body, content_type);
  if (!result) {
    Observe(verb, 0);
    return absl::UnavailableError(absl::StrCat(verb, " ", options_.server, path, ": ",
                                               httplib::to_string(result.error())));
  }
  Observe(verb, result->status);
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

absl::Status KubeClient::Watch(const std::string& path, const WatchOptions& options,
                               const std::function<bool(const WatchEvent&)>& on_event,
                               WatchCanceller* canceller) {
  std::string query = absl::StrCat("?watch=true&allowWatchBookmarks=true&timeoutSeconds=",
                                   options.timeout_seconds);
  if (!options.resource_version.empty()) {
    absl::StrAppend(&query, "&resourceVersion=", UrlEncode(options.resource_version));
  }
  if (!options.label_selector.empty()) {
    absl::StrAppend(&query, "&labelSelector=", UrlEncode(options.label_selector));
  }
  std::unique_ptr<httplib::Client> client =
      NewClient(options_, absl::Seconds(options.timeout_seconds + 30));
  if (canceller != nullptr) {
    if (canceller->cancelled()) return absl::CancelledError("watch cancelled");
    canceller->Attach([c = client.get()] { c->stop(); });
  }

  int code = 0;
  std::string buffer;
  std::string error_body;
  absl::Status stream_status;
  bool stopped = false;
  const httplib::Headers headers = {{"Accept", "application/json"}};
  httplib::Result result = client->Get(
      path + query, headers,
      [&](const httplib::Response& response) {
        code = response.status;
        return true;
      },
      [&](const char* data, size_t length) {
        if (code != 200) {
          error_body.append(data, length);
          return true;
        }
        buffer.append(data, length);
        size_t newline;
        while ((newline = buffer.find('\n')) != std::string::npos) {
          const std::string line = buffer.substr(0, newline);
          buffer.erase(0, newline + 1);
          if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
          json event = json::parse(line, nullptr, false);
          if (!event.is_object() || !event.value("type", json()).is_string()) {
            stream_status = absl::InternalError(
                absl::StrCat("watch ", path, ": malformed event: ", line.substr(0, 200)));
            return false;
          }
          const std::string type = event["type"].get<std::string>();
          if (type == "ERROR") {
            const json& object = event.value("object", json::object());
            const int error_code =
                object.is_object() && object.value("code", json()).is_number_integer()
                    ? object["code"].get<int>()
                    : 500;
            stream_status = StatusFromHttp(error_code, object.dump());
            return false;
          }
          if (!on_event(WatchEvent{type, event.value("object", json::object())})) {
            stopped = true;
            return false;
          }
        }
        return true;
      });
  if (canceller != nullptr) canceller->Detach();
  Observe("WATCH", code);
  if (!stream_status.ok()) {
    return absl::Status(stream_status.code(),
                        absl::StrCat("watch ", path, ": ", stream_status.message()));
  }
  if (stopped) return absl::OkStatus();
  if (canceller != nullptr && canceller->cancelled()) {
    return absl::CancelledError("watch cancelled");
  }
  if (code != 0 && code != 200) {
    absl::Status status = StatusFromHttp(code, error_body);
    return absl::Status(status.code(), absl::StrCat("watch ", path, ": ", status.message()));
  }
  if (!result) {
    return absl::UnavailableError(absl::StrCat("watch ", path, ": the connection ended: ",
                                               httplib::to_string(result.error())));
  }
  return absl::OkStatus();
}

}  // namespace paci::op
