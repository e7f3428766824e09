#include "server/job_list.h"

#include "gtest/gtest.h"

namespace paci {
namespace {

v1::Job Job(const std::string& name, std::map<std::string, std::string> labels = {}) {
  v1::Job job;
  job.set_name(name);
  for (const auto& [k, v] : labels) (*job.mutable_labels())[k] = v;
  for (int step : {1, 2, 3}) job.mutable_status()->add_train_loss_history()->set_step(step);
  return job;
}

TEST(JobListTest, PageSizeHasADefaultAndAMaximum) {
  JobListQuery query;
  EXPECT_EQ(*PageSize(query), JobListQuery::kDefaultPageSize);
  query.page_size = 5;
  EXPECT_EQ(*PageSize(query), 5);
  query.page_size = 1'000'000;
  EXPECT_EQ(*PageSize(query), JobListQuery::kMaxPageSize);
  query.page_size = -1;
  EXPECT_EQ(PageSize(query).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(PageSize(query).status().message().find("page_size"), absl::string_view::npos);
}

TEST(JobListTest, ANamePrefixAndEveryLabelMustMatch) {
  JobListQuery query;
  query.name_prefix = "gpt-";
  query.labels = {{"team", "nlp"}, {"tier", "gold"}};
  EXPECT_TRUE(Selects(query, Job("gpt-1", {{"team", "nlp"}, {"tier", "gold"}, {"x", "y"}})));
  EXPECT_FALSE(Selects(query, Job("gpt-1", {{"team", "nlp"}})));
  EXPECT_FALSE(Selects(query, Job("gpt-1", {{"team", "nlp"}, {"tier", "silver"}})));
  EXPECT_FALSE(Selects(query, Job("bert-1", {{"team", "nlp"}, {"tier", "gold"}})));
  EXPECT_TRUE(Selects(JobListQuery{}, Job("anything")));
}

TEST(JobListTest, OmittingLossHistoryKeepsTheLatestPoint) {
  JobListQuery query;
  EXPECT_EQ(AsListed(query, Job("a")).status().train_loss_history_size(), 3);
  query.omit_loss_history = true;
  const v1::Job listed = AsListed(query, Job("a"));
  ASSERT_EQ(listed.status().train_loss_history_size(), 1);
  EXPECT_EQ(listed.status().train_loss_history(0).step(), 3);
}

TEST(JobListTest, ATokenResumesOnlyTheSameQueryOfTheSameInstance) {
  JobListQuery query;
  query.name_prefix = "gpt";
  EXPECT_EQ(*ResumeAfter(query, 7), 0);  // no token: the first page
  query.page_token = PageToken(7, 42, query);
  EXPECT_EQ(*ResumeAfter(query, 7), 42);
  // Another coordinator run issued it.
  absl::StatusOr<int64_t> stale = ResumeAfter(query, 8);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stale.status().message().find("stale"), absl::string_view::npos);
  // Other filters than the ones it was issued for.
  JobListQuery other = query;
  other.name_prefix = "bert";
  EXPECT_NE(ResumeAfter(other, 7).status().message().find("other filters"),
            absl::string_view::npos);
  // Not a token at all.
  for (const char* bad : {"!!!", "bm90IGEgdG9rZW4", ""}) {
    JobListQuery garbage = query;
    garbage.page_token = bad;
    if (garbage.page_token.empty()) continue;
    absl::StatusOr<int64_t> refused = ResumeAfter(garbage, 7);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("page_token"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace paci
