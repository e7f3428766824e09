#include "common/main_support.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "common/net_address.h"
#include "common/shutdown_signal.h"
#include "common/temp_dir.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostOfAddressTest, DropsThePort) {
  EXPECT_EQ(HostOfAddress("10.0.0.1:7070"), "10.0.0.1");
  EXPECT_EQ(HostOfAddress("worker-0.paci.svc:7000"), "worker-0.paci.svc");
  EXPECT_EQ(HostOfAddress("0.0.0.0:0"), "0.0.0.0");
}

TEST(HostOfAddressTest, KeepsTheBracketsOfAnIpv6Host) {
  EXPECT_EQ(HostOfAddress("[::1]:7070"), "[::1]");
  EXPECT_EQ(HostOfAddress("[fe80::1%eth0]:80"), "[fe80::1%eth0]");
  EXPECT_EQ(HostOfAddress("[::1]"), "[::1]");
}

TEST(HostOfAddressTest, AnAddressWithoutAPortIsItsOwnHost) {
  EXPECT_EQ(HostOfAddress("example.org"), "example.org");
  EXPECT_EQ(HostOfAddress(""), "");
}

class PortFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  static std::string Read(const std::string& path) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  // The names in the folder: a temporary file left behind shows here.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  const TempDir temp_{"port-file"};
  const std::string dir_ = temp_.path();
};

TEST_F(PortFileTest, WritesThePortAndLeavesNoTemporaryFile) {
  const std::string path = dir_ + "/port";
  ASSERT_TRUE(WritePortFile(path, 7070).ok());
  EXPECT_EQ(Read(path), "7070\n");
  EXPECT_THAT(Names(), ElementsAre("port"));
  ASSERT_TRUE(WritePortFile(path, 42).ok());  // replaces the old one
  EXPECT_EQ(Read(path), "42\n");
}

TEST_F(PortFileTest, AFileThatCannotBeWrittenIsAnErrorNamingIt) {
  const std::string path = dir_ + "/no-such-dir/port";
  const absl::Status status = WritePortFile(path, 7070);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("No such file"));
}

TEST_F(PortFileTest, AFileThatCannotBeRenamedIsAnErrorAndLeavesNoTemporaryFile) {
  const std::string path = dir_ + "/taken";
  std::filesystem::create_directories(path + "/not-empty");  // rename onto it fails
  const absl::Status status = WritePortFile(path, 7070);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot rename"));
  EXPECT_THAT(Names(), ElementsAre("taken"));
}

TEST_F(PortFileTest, ServeMetricsWritesTheBoundPort) {
  MetricsHttpServer server(std::make_shared<prometheus::Registry>());
  const std::string path = dir_ + "/metrics.port";
  absl::StatusOr<int> port = ServeMetrics(server, "127.0.0.1:0", path);
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_EQ(Read(path), std::to_string(*port) + "\n");
}

TEST(ServeMetricsTest, ABadAddressIsAnError) {
  MetricsHttpServer server(std::make_shared<prometheus::Registry>());
  EXPECT_EQ(ServeMetrics(server, "no-port").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShutdownSignalTest, NotRequestedUntilASignalComes) {
  ShutdownSignal shutdown;
  EXPECT_FALSE(shutdown.requested());
  EXPECT_FALSE(shutdown.WaitFor(absl::Milliseconds(20)));
  EXPECT_EQ(shutdown.signal_number(), 0);
}

TEST(ShutdownSignalTest, SigtermRequestsTheShutdown) {
  ShutdownSignal shutdown;
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // the process survives: the signal is taken
  EXPECT_TRUE(shutdown.WaitFor(absl::Seconds(10)));
  EXPECT_EQ(shutdown.signal_number(), SIGTERM);
}

TEST(ShutdownSignalTest, SigintRequestsTheShutdownAndASecondSignalIsAbsorbed) {
  ShutdownSignal shutdown;
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  shutdown.Wait();
  EXPECT_EQ(shutdown.signal_number(), SIGINT);
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  ASSERT_TRUE(shutdown.AwaitSignalsTaken(2, absl::Seconds(10)));
  EXPECT_TRUE(shutdown.requested());
  EXPECT_EQ(shutdown.signal_number(), SIGINT);
}

TEST(ShutdownSignalTest, RequestIsLikeASignal) {
  ShutdownSignal shutdown;
  shutdown.Request();
  shutdown.Request();
  EXPECT_TRUE(shutdown.requested());
  EXPECT_EQ(shutdown.signal_number(), 0);
}

}  // namespace
}  // namespace paci
