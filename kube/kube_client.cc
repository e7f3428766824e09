#include "kube/kube_client.h"

#include <cctype>

#include <httplib.h>
#include <openssl/err.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kube/kube_transport.h"

namespace paci::kube {
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

KubeClient::KubeClient(KubeClientOptions options, KubeRequestObserver* observer)
    : options_(std::move(options)),
      observer_(observer),
      credentials_(std::make_shared<KubeCredentials>(options_)),
      connections_(std::make_shared<ConnectionPool>()) {}

void KubeClient::Observe(const std::string& verb, int code) {
  if (observer_ != nullptr) observer_->OnRequest(verb, code);
}

absl::StatusOr<json> KubeClient::Call(const std::string& verb, const std::string& path,
                                      const std::string& body, const std::string& content_type) {
  absl::StatusOr<std::string> answer =
      CallForBody(verb, path, body, content_type, "application/json");
  if (!answer.ok()) return answer.status();
  json parsed = json::parse(*answer, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::InternalError(absl::StrCat(verb, " ", path, ": the response is not JSON"));
  }
  return parsed;
}

absl::StatusOr<std::string> KubeClient::GetText(const std::string& path) {
  return CallForBody("GET", path, "", "", "*/*");
}

absl::StatusOr<std::string> KubeClient::CallForBody(const std::string& verb,
                                                    const std::string& path,
                                                    const std::string& body,
                                                    const std::string& content_type,
                                                    const std::string& accept) {
  const absl::StatusOr<ServerUrl>& url = credentials_->server();
  if (!url.ok()) return url.status();
  absl::StatusOr<RequestAuth> auth = credentials_->Get();
  if (!auth.ok()) {
    Observe(verb, 0);
    return absl::UnauthenticatedError(absl::StrCat(verb, " ", path, ": ", auth.status().message()));
  }
  const std::string full_path = url->prefix + path;
  const httplib::Headers headers = {{"Accept", accept}};
  const auto send = [&](httplib::ClientImpl& http) {
    if (!auth->token.empty()) http.set_bearer_token_auth(auth->token);  // the token of now
    ERR_clear_error();
    return verb == "GET"     ? http.Get(full_path, headers)
           : verb == "POST"  ? http.Post(full_path, headers, body, content_type)
           : verb == "PUT"   ? http.Put(full_path, headers, body, content_type)
           : verb == "PATCH" ? http.Patch(full_path, headers, body, content_type)
                             : http.Delete(full_path, headers, body, content_type);
  };
  // A connection kept open from an earlier request, else a new one.
  std::unique_ptr<httplib::ClientImpl> http = connections_->Take(*auth);
  const bool reused = http != nullptr;
  if (!reused) {
    ASSIGN_OR_RETURN(http, NewClient(options_, *url, *auth, options_.request_timeout,
                                     /*keep_alive=*/true));
  }
  httplib::Result result = send(*http);
  // The server closed a kept connection before this request went out (or,
  // for a GET, whenever): once more on a new one.
  if (!result && reused && (verb == "GET" || result.error() == httplib::Error::Write)) {
    ASSIGN_OR_RETURN(http, NewClient(options_, *url, *auth, options_.request_timeout,
                                     /*keep_alive=*/true));
    result = send(*http);
  }
  if (!result) {
    Observe(verb, 0);
    return absl::UnavailableError(absl::StrCat(verb, " ", options_.server, path, ": ",
                                               ConnectionError(result.error(), *http, *url, *auth, true)));
  }
  connections_->Give(*auth, std::move(http));  // its answer is read whole
  Observe(verb, result->status);
  credentials_->Answered(*auth, result->status);
  if (result->status < 200 || result->status >= 300) {
    absl::Status status = StatusFromHttp(result->status, result->body);
    return absl::Status(status.code(), absl::StrCat(verb, " ", path, ": ", status.message()));
  }
  return std::move(result->body);
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
  if (!options.field_selector.empty()) {
    absl::StrAppend(&query, "&fieldSelector=", UrlEncode(options.field_selector));
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

absl::Status KubeClient::StreamGet(const std::string& what, const std::string& verb,
                                   const std::string& path, absl::Duration read_timeout,
                                   const std::function<bool(const char*, size_t)>& on_data,
                                   WatchCanceller* canceller) {
  const absl::StatusOr<ServerUrl>& url = credentials_->server();
  if (!url.ok()) return url.status();
  absl::StatusOr<RequestAuth> auth = credentials_->Get();
  if (!auth.ok()) {
    Observe(verb, 0);
    return absl::UnauthenticatedError(absl::StrCat(what, ": ", auth.status().message()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<httplib::ClientImpl> client,
                   NewClient(options_, *url, *auth, read_timeout));
  if (canceller != nullptr) {
    if (canceller->cancelled()) return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    canceller->Attach([c = client.get()] { c->stop(); });
  }

  int code = 0;
  bool stopped = false;
  std::string error_body;
  const httplib::Headers headers = {{"Accept", verb == "WATCH" ? "application/json" : "*/*"}};
  ERR_clear_error();
  httplib::Result result = client->Get(
      url->prefix + path, headers,
      [&](const httplib::Response& response) {
        code = response.status;
        return true;
      },
      [&](const char* data, size_t length) {
        if (code != 200) {
          error_body.append(data, length);
          return true;
        }
        stopped = !on_data(data, length);
        return !stopped;
      });
  if (canceller != nullptr) canceller->Detach();
  Observe(verb, code);
  credentials_->Answered(*auth, code);
  if (stopped) return absl::OkStatus();
  if (canceller != nullptr && canceller->cancelled()) {
    return absl::CancelledError(absl::StrCat(what, ": cancelled"));
  }
  if (code != 0 && code != 200) {
    const absl::Status status = StatusFromHttp(code, error_body);
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  if (!result) {
    return absl::UnavailableError(absl::StrCat(what, ": the connection ended: ",
                                               ConnectionError(result.error(), *client, *url,
                                                               *auth, code == 0)));
  }
  return absl::OkStatus();
}

absl::Status KubeClient::Watch(const std::string& path, const WatchOptions& options,
                               const std::function<bool(const WatchEvent&)>& on_event,
                               WatchCanceller* canceller) {
  WatchLines lines(on_event);
  const absl::Status streamed = StreamGet(
      absl::StrCat("watch ", path), "WATCH", path + WatchQuery(options),
      absl::Seconds(options.timeout_seconds + 30),
      [&](const char* data, size_t length) { return lines.Feed(data, length); }, canceller);
  if (!lines.error().ok()) {
    return absl::Status(lines.error().code(),
                        absl::StrCat("watch ", path, ": ", lines.error().message()));
  }
  return streamed;
}

absl::Status KubeClient::Stream(const std::string& path, absl::Duration idle_timeout,
                                const std::function<bool(std::string_view)>& on_data,
                                WatchCanceller* canceller) {
  return StreamGet(
      absl::StrCat("GET ", path), "GET", path, idle_timeout,
      [&](const char* data, size_t length) { return on_data(std::string_view(data, length)); },
      canceller);
}

}  // namespace paci::kube
