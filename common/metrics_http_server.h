#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"

namespace prometheus {
class Registry;
}
namespace httplib {
class Server;
}

namespace paci {

// Serves GET /metrics (Prometheus text format) of one registry over HTTP, on
// its own thread. We use cpp-httplib rather than prometheus-cpp's civetweb
// Exposer, which could not start its threads in a process that linked
// Debian's LibTorch 1.13 ("Cannot create threads"), and needs civetweb.
//
// Owns its thread: Start() begins serving, the destructor stops and joins.
class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(std::shared_ptr<prometheus::Registry> registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Also serves GET `path` with the status code and text `handler` returns
  // (health checks such as /healthz). Call before Start. The handler runs on
  // the server's thread.
  void AddHandler(const std::string& path, std::function<std::pair<int, std::string>()> handler);

  // Binds "host:port" (port 0 picks a free one) and starts serving. Returns
  // the bound port; Unavailable when the address cannot be bound.
  absl::StatusOr<int> Start(const std::string& address);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace paci
