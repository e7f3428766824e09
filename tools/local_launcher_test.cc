#include "tools/local_launcher.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "paci/v1/summary.pb.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] = R"yaml(
name: launcher-test
model: {vocab_size: 80, num_layers: 4, d_model: 32, num_heads: 4, seq_len: 32}
pipeline: {num_stages: NUM_STAGES, schedule: paci, accumulation: 2, micro_batch_size: 4}
optimizer: {lr: 3e-3}
training: {steps: 8, eval_interval: 4}
data: {corpus_path: CORPUS}
runtime: {threads_per_stage: 3}
)yaml";

// Runs LocalLauncher over the fake worker (tools/testing/fake_worker_main.cc),
// real processes and a real JobControl server.
class LocalLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("launcher-", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    WriteSpec(2);
    options_.spec_path = (dir_ / "spec.yaml").string();
    options_.worker_binary = FAKE_WORKER_PATH;
    options_.summary_path = (dir_ / "out" / "summary.json").string();
    options_.out = &out_;
    options_.poll_interval = absl::Milliseconds(20);
    options_.stop_grace = absl::Seconds(2);
  }

  void WriteSpec(int num_stages) {
    std::ofstream(dir_ / "spec.yaml") << absl::StrReplaceAll(
        kSpec, {{"NUM_STAGES", absl::StrCat(num_stages)},
                {"CORPUS", PACI_SOURCE_DIR "/tests/data/kjv-genesis.txt"}});
  }

  int Run(std::vector<std::string> worker_flags = {}) {
    options_.worker_flags = std::move(worker_flags);
    const int code = LocalLauncher(options_).Run();
    // No worker outlives the run: nothing is left to reap.
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
    return code;
  }

  v1::RunSummary Summary() {
    std::ifstream file(options_.summary_path);
    std::stringstream json;
    json << file.rdbuf();
    v1::RunSummary summary;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json.str(), &summary).ok())
        << json.str();
    return summary;
  }

  std::filesystem::path dir_;
  std::ostringstream out_;
  LocalLauncherOptions options_;
};

TEST_F(LocalLauncherTest, SuccessfulRunPrintsTheTableAndWritesTheSummary) {
  WriteSpec(3);
  ASSERT_EQ(Run(), kExitSucceeded) << out_.str();
  EXPECT_THAT(out_.str(), HasSubstr("step 8/8 | train 3.200 | val 3.500"));
  EXPECT_THAT(out_.str(), HasSubstr("steps              8/8\n"));
  EXPECT_THAT(out_.str(), HasSubstr("summary written to"));

  const v1::RunSummary summary = Summary();
  EXPECT_TRUE(summary.succeeded());
  EXPECT_EQ(summary.error(), "");
  EXPECT_EQ(summary.job_name(), "launcher-test");
  EXPECT_EQ(summary.num_stages(), 3);
  EXPECT_EQ(summary.steps_completed(), 8);
  ASSERT_EQ(summary.train_loss_size(), 8);  // every point once, in order
  for (int i = 0; i < 8; ++i) EXPECT_EQ(summary.train_loss(i).step(), i + 1);
  EXPECT_EQ(summary.validation_loss_size(), 1);
  EXPECT_GT(summary.tokens_per_second(), 0);
  EXPECT_GT(summary.wall_seconds(), 0);
  ASSERT_EQ(summary.stages_size(), 3);
  EXPECT_EQ(summary.stages(2).link_address(), "127.0.0.1:20002");
  EXPECT_EQ(summary.stages(0).drift_bound(), 2);

  std::ifstream file(options_.summary_path);
  std::stringstream json;
  json << file.rdbuf();
  EXPECT_THAT(json.str(), HasSubstr("\"final_validation_loss\": 3.5"));  // proto names
  EXPECT_THAT(json.str(), HasSubstr("\"error\": \"\""));                  // defaults printed
  EXPECT_THAT(json.str(), HasSubstr("\"steps\": 8,"));                     // numbers
}

TEST_F(LocalLauncherTest, WorkerOutputIsPrintedLineByLineWithTheStage) {
  ASSERT_EQ(Run(), kExitSucceeded) << out_.str();
  for (int s = 0; s < 2; ++s) {
    EXPECT_THAT(out_.str(), HasSubstr(absl::StrCat("[stage ", s, "] fake worker job=launcher-test stage=",
                                                   s, "/2 pid=")));
  }
}

TEST_F(LocalLauncherTest, TraceCollectsEveryStagesSpansIntoChromeTraceJson) {
  options_.trace_path = (dir_ / "out" / "trace.json").string();
  ASSERT_EQ(Run(), kExitSucceeded) << out_.str();
  EXPECT_THAT(out_.str(), HasSubstr("spans written to " + options_.trace_path));
  std::ifstream file(options_.trace_path);
  std::stringstream json;
  json << file.rdbuf();
  google::protobuf::Struct trace;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.str(), &trace).ok()) << json.str();
  int spans[2] = {0, 0};
  for (const google::protobuf::Value& event : trace.fields().at("traceEvents").list_value().values()) {
    const auto& fields = event.struct_value().fields();
    if (fields.at("ph").string_value() != "X") continue;
    ++spans[static_cast<int>(fields.at("tid").number_value())];
  }
  // The fake worker sends 2 spans with each of its 4 reports.
  EXPECT_EQ(spans[0], 8);
  EXPECT_EQ(spans[1], 8);
}

TEST_F(LocalLauncherTest, WithoutTraceWorkersAreNotAskedForSpans) {
  ASSERT_EQ(Run(), kExitSucceeded) << out_.str();
  EXPECT_THAT(out_.str(), ::testing::Not(HasSubstr("spans written")));
}

TEST_F(LocalLauncherTest, StageErrorStopsEveryWorkerAndIsReported) {
  EXPECT_EQ(Run({"--mode=error", "--fail_stage=1"}), kExitTrainingFailed);
  EXPECT_THAT(out_.str(), HasSubstr("training failed: stage 1: injected failure at step 2"));
  const v1::RunSummary summary = Summary();
  EXPECT_FALSE(summary.succeeded());
  EXPECT_EQ(summary.error(), "stage 1: injected failure at step 2");
}

TEST_F(LocalLauncherTest, CrashedWorkerIsNamed) {
  EXPECT_EQ(Run({"--mode=crash", "--fail_stage=0"}), kExitTrainingFailed);
  EXPECT_THAT(out_.str(), HasSubstr("stage 0: worker killed by signal 6"));
  EXPECT_FALSE(Summary().succeeded());
}

TEST_F(LocalLauncherTest, WorkerExitingCleanlyBeforeFinishingIsAFailure) {
  EXPECT_EQ(Run({"--mode=early_exit", "--fail_stage=1"}), kExitTrainingFailed);
  EXPECT_THAT(out_.str(), HasSubstr("stage 1: worker exited with status 0 before finishing"));
}

TEST_F(LocalLauncherTest, InterruptStopsTheWorkersAndWritesTheSummary) {
  std::atomic<bool> stop{true};
  options_.stop_requested = &stop;
  EXPECT_EQ(Run({"--mode=hang"}), kExitInterrupted);
  EXPECT_THAT(out_.str(), HasSubstr("interrupted"));
  const v1::RunSummary summary = Summary();
  EXPECT_FALSE(summary.succeeded());
  EXPECT_EQ(summary.error(), "interrupted");
}

TEST_F(LocalLauncherTest, InvalidSpecIsAUsageErrorNamingTheField) {
  WriteSpec(0);
  EXPECT_EQ(Run(), kExitUsage);
  EXPECT_THAT(out_.str(), HasSubstr("pipeline.num_stages"));
  EXPECT_FALSE(std::filesystem::exists(options_.summary_path));
}

TEST_F(LocalLauncherTest, MissingWorkerBinaryFailsTheRun) {
  options_.worker_binary = (dir_ / "no-such-worker").string();
  EXPECT_EQ(Run(), kExitTrainingFailed);
  EXPECT_THAT(out_.str(), HasSubstr("cannot execute"));
}

TEST(FindWorkerBinaryTest, LooksBesidePacictlThenInTheBuildTree) {
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "find-worker";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "tools");
  std::filesystem::create_directories(root / "worker");
  const auto make_executable = [](const std::filesystem::path& path) {
    std::ofstream(path) << "#!/bin/sh\n";
    chmod(path.c_str(), 0755);
  };
  const std::string pacictl = (root / "tools" / "pacictl").string();
  EXPECT_EQ(FindWorkerBinary(pacictl).status().code(), absl::StatusCode::kNotFound);
  make_executable(root / "worker" / "paci_worker");
  EXPECT_EQ(FindWorkerBinary(pacictl).value(), (root / "worker" / "paci_worker").string());
  make_executable(root / "tools" / "paci_worker");
  EXPECT_EQ(FindWorkerBinary(pacictl).value(), (root / "tools" / "paci_worker").string());
}

}  // namespace
}  // namespace paci
