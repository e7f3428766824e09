// StageHost: one assigned stage from start to end, with what it reports.
// A one-stage job of a tiny model on the CPU (no links to open), and the
// assignments it refuses before it trains, each reported with its error.

#include "worker/runtime/stage_host.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

// Keeps every report.
class RecordingSink final : public ReportSink {
 public:
  void Deliver(const v1::StageReport& report) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(report);
  }
  std::vector<v1::StageReport> reports() const {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::StageReport> reports_;
};

v1::StageAssignment OneStage(const std::string& corpus = "/tests/data/kjv-genesis.txt") {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(R"(
name: host-test
model: {vocab_size: 80, num_layers: 2, d_model: 16, num_heads: 2, seq_len: 16}
pipeline: {num_stages: 1, accumulation: 2, micro_batch_size: 2}
optimizer: {lr: 3e-3}
training: {steps: 4, eval_interval: 2, eval_micro_batches: 2}
runtime: {threads_per_stage: 1}
data: {corpus_path: )", PACI_SOURCE_DIR, corpus, "}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  v1::StageAssignment assignment;
  assignment.set_job_name("host-test");
  assignment.set_attempt(1);
  *assignment.mutable_spec() = *spec;
  assignment.set_stage(0);
  assignment.add_stage_addresses("127.0.0.1:1");  // its own: a single stage opens no link
  assignment.set_link_secret("secret");
  return assignment;
}

StageHostOptions Options() {
  StageHostOptions options;
  options.report_interval = absl::Milliseconds(10);
  return options;
}

TEST(StageHostTest, AOneStageJobTrainsToItsLastStepAndSaysSoInItsFinalReport) {
  StageLinkService links;
  prometheus::Registry registry;
  RecordingSink sink;
  StageHost host(OneStage(), links, registry, &sink, Options());
  ASSERT_TRUE(host.Run().ok());
  const std::vector<v1::StageReport> reports = sink.reports();
  ASSERT_FALSE(reports.empty());
  const v1::StageReport& last = reports.back();
  EXPECT_TRUE(last.finished());
  EXPECT_TRUE(last.error().empty()) << last.error();
  EXPECT_EQ(last.optimizer_steps(), 4);
  EXPECT_EQ(last.attempt(), 1);
  // Its metrics are the registry's: the stage registered its families there.
  EXPECT_FALSE(registry.Collect().empty());
}

// Refused before training, each with a report that names what is wrong.
TEST(StageHostTest, AnAssignmentItCannotRunFailsWithAReportNamingWhy) {
  v1::StageAssignment misplaced = OneStage();
  misplaced.set_stage(1);
  v1::StageAssignment huge = OneStage();
  huge.mutable_spec()->mutable_model()->set_d_model(8192);  // frames of 2 x 16 x 8192 x 4 bytes
  huge.mutable_spec()->mutable_model()->set_num_heads(4);
  v1::StageAssignment no_corpus = OneStage("/tests/data/no-such-corpus.txt");
  v1::StageAssignment small_vocabulary = OneStage();
  small_vocabulary.mutable_spec()->mutable_model()->set_vocab_size(8);
  StageHostOptions small_links = Options();
  small_links.max_link_message_bytes = 1 << 20;
  struct Case {
    v1::StageAssignment assignment;
    StageHostOptions options;
    absl::StatusCode code;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {misplaced, Options(), absl::StatusCode::kInvalidArgument,
            "stage 1 does not fit a job of 1 stages with 1 addresses"},
           {huge, small_links, absl::StatusCode::kFailedPrecondition,
            "more than this worker's --max_link_message_bytes 1048576"},
           {no_corpus, Options(), absl::StatusCode::kNotFound, "no-such-corpus.txt"},
           {small_vocabulary, Options(), absl::StatusCode::kInvalidArgument,
            "more than model.vocab_size 8"}}) {
    SCOPED_TRACE(c.message);
    StageLinkService links;
    prometheus::Registry registry;
    RecordingSink sink;
    StageHost host(c.assignment, links, registry, &sink, c.options);
    const absl::Status status = host.Run();
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    const std::vector<v1::StageReport> reports = sink.reports();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_THAT(reports[0].error(), HasSubstr(c.message));
    EXPECT_EQ(reports[0].error_code(), static_cast<int>(c.code));
    EXPECT_EQ(reports[0].job_name(), "host-test");
    EXPECT_FALSE(reports[0].finished());
  }
}

// Cancelled before it runs: it stops at once with a final report of the
// error, having trained nothing.
TEST(StageHostTest, ACancelledStageStopsAndReportsIt) {
  StageLinkService links;
  prometheus::Registry registry;
  RecordingSink sink;
  v1::StageAssignment assignment = OneStage();
  assignment.mutable_spec()->mutable_training()->set_steps(100000);
  StageHost host(assignment, links, registry, &sink, Options());
  host.Cancel();
  const absl::Status status = host.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  ASSERT_FALSE(sink.reports().empty());
  const v1::StageReport last = sink.reports().back();
  EXPECT_FALSE(last.finished());
  EXPECT_FALSE(last.error().empty());
  EXPECT_EQ(last.error_code(), static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(last.optimizer_steps(), 0);
}

}  // namespace
}  // namespace paci
