#pragma once

// For tests: a real kube-apiserver with its etcd (tests/harness/control_plane.py,
// the binaries scripts/kube-toolchain.sh built into build/kube-bin, or
// $PACI_KUBE_BIN), reached through tests/harness/fault_proxy.py, which forwards
// every request and adds faults on command (cut watches, injected errors,
// etcd compaction). The server's watch cache is off, so a compacted
// resourceVersion is 410 Expired at once, as the server answers when its
// history is gone. Stopped, and its folder removed, when the TestApiServer goes. Needs PACI_SOURCE_DIR
// (every paci_cc_test defines it) and links cpp-httplib.

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process.h"
#include "kube/kube_client.h"

namespace paci::kube {

class TestApiServer {
 public:
  TestApiServer() {
    char dir_template[] = "/tmp/paci-kube-XXXXXX";
    dir_ = mkdtemp(dir_template);
    const std::string ready = dir_ + "/ready.json";
    const std::string source = PACI_SOURCE_DIR;
    ProcessCommand control_plane{
        "/usr/bin/python3",
        {source + "/tests/harness/control_plane.py", "--workdir", dir_, "--build-dir",
         source + "/build", "--ready-file", ready, "--apiserver-arg=--watch-cache=false"},
        {}};
    control_plane.output = ProcessCommand::Output::kFile;
    control_plane.output_file = log_path();
    if (!processes_.Start(control_plane).ok()) return;  // ok() stays false
    // The ready file appears once the API server serves (seconds).
    for (int i = 0; i < 1200 && url_.empty(); ++i) {
      std::ifstream in(ready);
      std::stringstream text;
      text << in.rdbuf();
      const nlohmann::json info = nlohmann::json::parse(text.str(), nullptr, false);
      if (info.is_object()) {
        url_ = info.value("url", "");
        token_ = info.value("token", "");
        break;
      }
      if (!processes_.PollExits().empty()) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  ~TestApiServer() {
    // SIGTERM: it stops etcd and the API server, then exits; its children die
    // with it (PR_SET_PDEATHSIG) if it has to be killed.
    processes_.StopAll(absl::Seconds(30));
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestApiServer(const TestApiServer&) = delete;
  TestApiServer& operator=(const TestApiServer&) = delete;

  // Whether it serves; the log says why not.
  bool ok() const { return !url_.empty(); }
  std::string log_path() const { return dir_ + "/control-plane.log"; }
  std::string url() const { return url_; }
  // A client's options for this server: cluster-admin's token.
  KubeClientOptions client_options() const {
    KubeClientOptions options;
    options.server = url();
    options.bearer_token = token_;
    return options;
  }
  // Watch streams open through the proxy now.
  int OpenWatches() {
    auto result = Client().Get("/fault-proxy/watches");
    if (!result || result->status != 200) return -1;
    return nlohmann::json::parse(result->body, nullptr, false).value("open", -1);
  }
  // Requests the proxy holds (after Control("hold", ...)), once at least
  // `at_least` are (the proxy answers within 30 s either way).
  int HeldRequests(int at_least = 0) {
    auto result = Client().Get("/fault-proxy/held?at_least=" + std::to_string(at_least));
    if (!result || result->status != 200) return -1;
    return nlohmann::json::parse(result->body, nullptr, false).value("held", -1);
  }
  // POST /fault-proxy/<what> (see tests/harness/fault_proxy.py): "drop-watches",
  // "compact", "inject-error" with {"verb": "update", "resource": "leases",
  // "code": 500, "count": 1}, "hold" with {"verb": ..., "resource": ...} (the
  // request waits until "release"). Whether the proxy took it.
  bool Control(const std::string& what, const nlohmann::json& body = nlohmann::json()) {
    auto result = Client().Post("/fault-proxy/" + what, body.is_null() ? "" : body.dump(),
                                "application/json");
    return result && result->status == 200;
  }

 private:
  httplib::Client Client() const {
    httplib::Client client(url_);
    client.set_read_timeout(30, 0);
    return client;
  }

  std::string dir_;
  ChildProcesses processes_;
  std::string url_;
  std::string token_;
};

}  // namespace paci::kube
