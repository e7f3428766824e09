#include "tools/summary_json.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::RunSummary SampleSummary() {
  v1::RunSummary summary;
  summary.set_job_name("kjv-small");
  summary.set_steps(300);
  summary.set_error("stage 1: bad \"step\": \"5\" in a quoted error");
  v1::LossPoint* point = summary.add_train_loss();
  point->set_step(-7);
  point->set_loss(2.5);
  v1::StageSummary* stage = summary.add_stages();
  stage->set_peak_rss_bytes(int64_t{5} << 40);
  stage->set_link_address("127.0.0.1:123");
  summary.add_checkpoints("/runs/step-00000300");
  return summary;
}

TEST(RunSummaryToJsonTest, WritesIntegersAsNumbersWithProtoNamesAndDefaults) {
  const absl::StatusOr<std::string> json = RunSummaryToJson(SampleSummary());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr("\"steps\": 300,"));
  EXPECT_THAT(*json, HasSubstr("\"step\": -7,"));
  EXPECT_THAT(*json, HasSubstr("\"peak_rss_bytes\": 5497558138880,"));
  EXPECT_THAT(*json, HasSubstr("\"drift_max\": 0,"));           // defaults are written
  EXPECT_THAT(*json, HasSubstr("\"steps_completed\": 0,"));
  EXPECT_THAT(*json, HasSubstr("\"succeeded\": false,"));
  EXPECT_THAT(*json, HasSubstr("\"link_address\": \"127.0.0.1:123\""));  // strings stay
  // Text inside a string value is left alone.
  EXPECT_THAT(*json, HasSubstr(R"(bad \"step\": \"5\" in a quoted error)"));
  EXPECT_THAT(*json, Not(HasSubstr("\"300\"")));
}

TEST(RunSummaryToJsonTest, ReadsBackToTheSameMessage) {
  const v1::RunSummary summary = SampleSummary();
  const absl::StatusOr<std::string> json = RunSummaryToJson(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  v1::RunSummary parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &parsed).ok()) << *json;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, summary));
}

}  // namespace
}  // namespace paci
