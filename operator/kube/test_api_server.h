#pragma once

// For tests: a real kube-apiserver with its etcd (tests/harness/control_plane.py,
// the binaries scripts/kube-toolchain.sh built into build/kube-bin, or
// $PACI_KUBE_BIN), reached through tests/harness/fault_proxy.py, which forwards
// every request and adds faults on command (cut watches, injected errors,
// etcd compaction). The server's watch cache is off, so a compacted
// resourceVersion is 410 Expired at once, as the server answers when its
// history is gone. Stopped, and its folder removed, when the TestApiServer goes. Needs PACI_SOURCE_DIR
// (every paci_cc_test defines it) and links cpp-httplib.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "operator/kube/kube_client.h"

extern char** environ;

namespace paci::op {

class TestApiServer {
 public:
  TestApiServer() {
    char dir_template[] = "/tmp/paci-kube-XXXXXX";
    dir_ = mkdtemp(dir_template);
    const std::string ready = dir_ + "/ready.json";
    const std::string source = PACI_SOURCE_DIR;
    std::vector<std::string> args = {
        "/usr/bin/python3", source + "/tests/harness/control_plane.py", "--workdir", dir_,
        "--build-dir", source + "/build", "--ready-file", ready, "--apiserver-arg=--watch-cache=false"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, (dir_ + "/control-plane.log").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    posix_spawn(&pid_, argv[0], &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
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
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  ~TestApiServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);  // it stops etcd and the API server, then exits
      bool ended = false;
      for (int i = 0; i < 300 && !ended; ++i) {
        ended = waitpid(pid_, nullptr, WNOHANG) == pid_;
        if (!ended) absl::SleepFor(absl::Milliseconds(100));
      }
      if (!ended) {  // its children die with it (PR_SET_PDEATHSIG)
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
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
  // POST /fault-proxy/<what> (see tests/harness/fault_proxy.py): "drop-watches",
  // "compact", or "inject-error" with {"verb": "update", "resource": "leases",
  // "code": 500, "count": 1}. Whether the proxy took it.
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
  pid_t pid_ = -1;
  std::string url_;
  std::string token_;
};

}  // namespace paci::op
