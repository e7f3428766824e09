#include "tools/local_launcher.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/coordinator_client.h"
#include "common/temp_dir.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

TEST(CoordinatorErrorTest, OnlyAnInvalidRequestIsAUsageError) {
  EXPECT_TRUE(CoordinatorFailure(FromGrpc(grpc::Status::OK, "submit")).ok());
  const absl::Status invalid = CoordinatorFailure(
      FromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad spec"), "refused"));
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.message(), "refused: bad spec");
  // Cancelled stands for a signal here, never for the coordinator's answer.
  EXPECT_EQ(ExitCodeOf(CoordinatorFailure(FromGrpc(grpc::Status::CANCELLED, "cancel"))),
            kExitTrainingFailed);
  EXPECT_EQ(ExitCodeOf(CoordinatorFailure(FromGrpc(
                grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "too slow"), "trace"))),
            kExitTrainingFailed);
  // The mapping itself keeps the code and names the call.
  const absl::Status mapped = FromGrpc(grpc::Status(grpc::StatusCode::NOT_FOUND, "no job"), "get");
  EXPECT_EQ(mapped.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(mapped.message(), "get: no job");
}

class LocalLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    std::ofstream(spec_) << "name: tiny\n"
                            "model: {vocab_size: 80, num_layers: 2, d_model: 16, num_heads: 2, "
                            "seq_len: 16}\n"
                            "pipeline: {num_stages: 2, accumulation: 1, micro_batch_size: 2}\n"
                            "optimizer: {lr: 3e-3}\n"
                            "training: {steps: 2, eval_interval: 2, eval_micro_batches: 1}\n"
                            "data: {corpus_path: " PACI_SOURCE_DIR "/tests/data/kjv-genesis.txt}\n";
  }

  // Runs a launcher with `coordinator` as paci_coordinator; its exit code.
  int Run(const std::string& spec, const std::string& coordinator) {
    LocalLauncherOptions options;
    options.spec_path = spec;
    options.coordinator_binary = coordinator;
    options.worker_binary = "/bin/true";
    options.summary_path = dir_ + "/summary.json";
    options.out = &out_;
    options.start_timeout = absl::Seconds(10);
    options.stop_grace = absl::Seconds(1);
    return LocalLauncher(options).Run();
  }

  const TempDir temp_{"launcher-test"};
  const std::string dir_ = temp_.path();
  const std::string spec_ = dir_ + "/job.yaml";
  std::ostringstream out_;
};

TEST_F(LocalLauncherTest, AnInvalidSpecIsAUsageErrorNamingTheField) {
  EXPECT_EQ(Run(PACI_SOURCE_DIR "/tests/data/bad-specs/zero-stages.yaml", "/bin/true"),
            kExitUsage);
  EXPECT_THAT(out_.str(), HasSubstr("zero-stages.yaml: pipeline.num_stages"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/summary.json"));
}

TEST_F(LocalLauncherTest, AMissingSpecIsAUsageError) {
  EXPECT_EQ(Run(dir_ + "/none.yaml", "/bin/true"), kExitUsage);
}

TEST_F(LocalLauncherTest, ACoordinatorThatCannotRunFailsTheRun) {
  EXPECT_EQ(Run(spec_, dir_ + "/no-such-coordinator"), kExitTrainingFailed);
  EXPECT_THAT(out_.str(), HasSubstr("pacictl: cannot start the coordinator: "));
}

TEST_F(LocalLauncherTest, ACoordinatorThatExitsAtOnceDidNotStart) {
  EXPECT_EQ(Run(spec_, "/bin/false"), kExitTrainingFailed);
  EXPECT_THAT(out_.str(), HasSubstr("pacictl: the coordinator did not start\n"));
}

TEST(FindSiblingBinaryTest, NamesBothCandidatesWhenNeitherIsThere) {
  const absl::StatusOr<std::string> found =
      FindSiblingBinary("/nonexistent/tools/pacictl", "paci_worker", "worker");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("/nonexistent/tools/paci_worker"));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("/nonexistent/worker/paci_worker"));
}

}  // namespace
}  // namespace paci
