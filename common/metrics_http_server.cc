#include "common/metrics_http_server.h"

#include <httplib.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace paci {

MetricsHttpServer::MetricsHttpServer(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)), server_(std::make_unique<httplib::Server>()) {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(prometheus::TextSerializer().Serialize(registry_->Collect()),
                         "text/plain; version=0.0.4");
  });
}

void MetricsHttpServer::AddHandler(const std::string& path,
                                   std::function<std::pair<int, std::string>()> handler) {
  server_->Get(path, [handler = std::move(handler)](const httplib::Request&,
                                                     httplib::Response& response) {
    auto [code, text] = handler();
    response.status = code;
    response.set_content(text + "\n", "text/plain");
  });
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

absl::StatusOr<int> MetricsHttpServer::Start(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", address, "\" is not host:port"));
  }
  const std::string host = address.substr(0, colon);
  if (port == 0) {
    port = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  // httplib makes its task queue once its accept loop runs, and only from
  // then on does stop() end the loop: waiting for that here keeps a server
  // destroyed right after Start() (a main failing on its next line) from
  // hanging in the destructor.
  auto accepting = std::make_shared<absl::Notification>();
  server_->new_task_queue = [accepting] {
    if (!accepting->HasBeenNotified()) accepting->Notify();
    return new httplib::ThreadPool(CPPHTTPLIB_THREAD_POOL_COUNT);
  };
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  accepting->WaitForNotificationWithTimeout(absl::Seconds(30));
  return port;
}

}  // namespace paci
