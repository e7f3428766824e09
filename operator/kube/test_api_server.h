#pragma once

// For tests: the test API server (tests/kube/apiserver.py) as a real process
// on 127.0.0.1, killed when the TestApiServer goes. Needs PACI_SOURCE_DIR
// (every paci_cc_test defines it) and links cpp-httplib.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
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
    const std::string port_file = dir_ + "/port";
    const std::string script = std::string(PACI_SOURCE_DIR) + "/tests/kube/apiserver.py";
    const std::string log = dir_ + "/apiserver.log";
    std::vector<std::string> args = {"/bin/sh", "-c",
                                     absl::StrCat("exec /usr/bin/python3 ", script,
                                                  " --port 0 --port-file ", port_file,
                                                  " --history 1000 2>", log)};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, argv.data(), environ);
    // The port file appears once the server listens.
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      std::ifstream in(port_file);
      if (!(in >> port_)) port_ = 0;
      if (port_ == 0) absl::SleepFor(absl::Milliseconds(50));
    }
  }
  ~TestApiServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  TestApiServer(const TestApiServer&) = delete;
  TestApiServer& operator=(const TestApiServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  // A client's options for this server (which takes any token).
  KubeClientOptions client_options() const {
    KubeClientOptions options;
    options.server = url();
    options.bearer_token = "test-token";
    return options;
  }
  // Watches the server has open now (GET /testing/watches).
  int OpenWatches() {
    httplib::Client client("127.0.0.1", port_);
    auto result = client.Get("/testing/watches");
    if (!result || result->status != 200) return -1;
    return nlohmann::json::parse(result->body, nullptr, false).value("open", -1);
  }
  // POST /testing/<what> (see tests/kube/apiserver.py), e.g. "drop-watches",
  // or "inject-error" with {"verb": "update", "resource": "leases", "code": 500}.
  void Control(const std::string& what, const nlohmann::json& body = nlohmann::json()) {
    httplib::Client client("127.0.0.1", port_);
    auto result =
        client.Post("/testing/" + what, body.is_null() ? "" : body.dump(), "application/json");
    ASSERT_TRUE(result) << what;
    ASSERT_EQ(result->status, 200) << what << ": " << result->body;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace paci::op
