#include "server/job_table.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/peer_identity.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

JobState Job(const std::string& name, v1::JobPhase phase, const std::string& name_space = "") {
  JobState state;
  state.job.set_name(name);
  state.job.mutable_spec()->set_name(name);
  state.status().set_phase(phase);
  if (!name_space.empty()) (*state.job.mutable_labels())[kNamespaceLabel] = name_space;
  return state;
}

std::vector<std::string> Names(const JobPage& page) {
  std::vector<std::string> names;
  for (const v1::Job& job : page.jobs) names.push_back(job.name());
  return names;
}

std::vector<std::string> RemovedNames(const std::vector<JobTable::Removed>& removed) {
  std::vector<std::string> names;
  for (const JobTable::Removed& r : removed) names.push_back(r.name + ":" + r.reason);
  return names;
}

TEST(JobTableTest, JobsAreHeldInSubmissionOrderAndIndexedByPhase) {
  JobTable table(RetentionPolicy{});
  EXPECT_EQ(table.Insert(Job("a", v1::QUEUED), kStart).sequence, 1);
  EXPECT_EQ(table.Insert(Job("b", v1::RUNNING), kStart).sequence, 2);
  EXPECT_EQ(table.Insert(Job("c", v1::RESTARTING), kStart).sequence, 3);
  EXPECT_EQ(table.size(), 3u);
  ASSERT_NE(table.Find("b"), nullptr);
  EXPECT_EQ(table.Find("b")->status().phase(), v1::RUNNING);
  EXPECT_EQ(table.Find("nope"), nullptr);
  EXPECT_EQ(table.InPhase(v1::QUEUED), 1u);
  EXPECT_EQ(table.InPhase(v1::SUCCEEDED), 0u);
  EXPECT_THAT(table.Active(), ElementsAre("b", "c"));

  // a runs: it joins the active ones in its submission place; b leaves them.
  JobState& a = *table.Find("a");
  a.status().set_phase(v1::RUNNING);
  table.PhaseChanged(a, v1::QUEUED, kStart);
  JobState& b = *table.Find("b");
  b.status().set_phase(v1::SUCCEEDED);
  table.PhaseChanged(b, v1::RUNNING, kStart);
  EXPECT_THAT(table.Active(), ElementsAre("a", "c"));
  EXPECT_EQ(table.InPhase(v1::QUEUED), 0u);
  EXPECT_EQ(table.finished(), 1u);
  EXPECT_EQ(b.finished_at, kStart);
  // A change to the same phase changes nothing.
  table.PhaseChanged(b, v1::SUCCEEDED, kStart + absl::Hours(1));
  EXPECT_EQ(b.finished_at, kStart);
  EXPECT_EQ(table.finished(), 1u);
}

// The oldest finished go first past the count; each finished one goes after
// its age (the policy's, or its spec's shorter ttl_seconds_after_finished).
TEST(JobTableTest, RetentionRemovesTheOldestPastTheCountAndEachPastItsAge) {
  RetentionPolicy policy;
  policy.finished_jobs_to_keep = 2;
  policy.finished_job_ttl = absl::Hours(1);
  JobTable table(policy);
  for (const char* name : {"a", "b", "c", "d"}) table.Insert(Job(name, v1::RUNNING), kStart);
  table.Find("c")->job.mutable_spec()->mutable_run_policy()->set_ttl_seconds_after_finished(60);
  for (const auto& [name, minute] : std::vector<std::pair<std::string, int>>{
           {"b", 1}, {"a", 2}, {"c", 3}}) {
    JobState& state = *table.Find(name);
    state.status().set_phase(v1::FAILED);
    table.PhaseChanged(state, v1::RUNNING, kStart + absl::Minutes(minute));
  }
  EXPECT_EQ(table.Find("c")->expires_at, kStart + absl::Minutes(4));  // its own minute
  EXPECT_EQ(table.Find("a")->expires_at, kStart + absl::Minutes(62));
  // Three finished, two kept: b, the first to finish, goes by count.
  EXPECT_THAT(RemovedNames(table.EnforceRetention(kStart + absl::Minutes(3))),
              ElementsAre("b:count"));
  EXPECT_EQ(table.Find("b"), nullptr);
  // c's own ttl has passed at minute 4; a's hour has not.
  EXPECT_THAT(RemovedNames(table.EnforceRetention(kStart + absl::Minutes(4))),
              ElementsAre("c:age"));
  EXPECT_THAT(table.EnforceRetention(kStart + absl::Minutes(61)), IsEmpty());
  const std::vector<JobTable::Removed> removed =
      table.EnforceRetention(kStart + absl::Minutes(62));
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].name, "a");
  EXPECT_EQ(removed[0].phase, v1::FAILED);
  EXPECT_EQ(removed[0].finished_at, kStart + absl::Minutes(2));
  EXPECT_EQ(removed[0].reason, "age");
  EXPECT_EQ(table.size(), 1u);  // d, still running, is never removed
  EXPECT_EQ(table.finished(), 0u);
  EXPECT_EQ(table.InPhase(v1::FAILED), 0u);
}

// Loaded after a restart: a finished job's age counts from its completion time.
TEST(JobTableTest, AJobInsertedFinishedAgesFromItsCompletionTime) {
  RetentionPolicy policy;
  policy.finished_job_ttl = absl::Hours(1);
  JobTable table(policy);
  JobState done = Job("done", v1::SUCCEEDED);
  *done.status().mutable_completion_time() = ToProto(kStart - absl::Minutes(50));
  table.Insert(std::move(done), kStart);
  table.Insert(Job("undated", v1::CANCELLED), kStart);  // none: from now
  EXPECT_EQ(table.finished(), 2u);
  EXPECT_THAT(RemovedNames(table.EnforceRetention(kStart + absl::Minutes(10))),
              ElementsAre("done:age"));
  EXPECT_THAT(RemovedNames(table.EnforceRetention(kStart + absl::Minutes(60))),
              ElementsAre("undated:age"));
}

TEST(JobTableTest, NoLimitsKeepEveryFinishedJob) {
  RetentionPolicy policy;
  policy.finished_jobs_to_keep = -1;
  policy.finished_job_ttl = absl::InfiniteDuration();
  JobTable table(policy);
  for (int i = 0; i < 5; ++i) table.Insert(Job("j" + std::to_string(i), v1::SUCCEEDED), kStart);
  EXPECT_THAT(table.EnforceRetention(kStart + absl::Hours(24 * 365)), IsEmpty());
  EXPECT_EQ(table.Find("j0")->expires_at, absl::InfiniteFuture());
}

TEST(JobTableTest, JobsAreCountedPerNamespaceUntilRemoved) {
  RetentionPolicy policy;
  policy.finished_jobs_to_keep = 0;
  JobTable table(policy);
  table.Insert(Job("a1", v1::RUNNING, "team-a"), kStart);
  table.Insert(Job("a2", v1::SUCCEEDED, "team-a"), kStart);
  table.Insert(Job("b1", v1::QUEUED, "team-b"), kStart);
  table.Insert(Job("none", v1::QUEUED), kStart);
  EXPECT_EQ(table.InNamespace("team-a"), 2u);
  EXPECT_EQ(table.InNamespace("team-b"), 1u);
  EXPECT_EQ(table.InNamespace(""), 0u) << "jobs of no namespace are not counted";
  EXPECT_THAT(RemovedNames(table.EnforceRetention(kStart)), ElementsAre("a2:count"));
  EXPECT_EQ(table.InNamespace("team-a"), 1u);
}

// Pages walk the submission order (or one phase's), resume after the last job
// of the page before, and refuse a token another coordinator run issued.
TEST(JobTableTest, PagesWalkSubmissionOrderAndAPhaseAndResumeWhereTheyStopped) {
  JobTable table(RetentionPolicy{});
  for (int i = 0; i < 5; ++i) {
    table.Insert(Job("j" + std::to_string(i), i % 2 == 0 ? v1::RUNNING : v1::QUEUED), kStart);
  }
  JobListQuery query;
  query.page_size = 2;
  absl::StatusOr<JobPage> first = table.List(query, /*instance=*/7);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(Names(*first), ElementsAre("j0", "j1"));
  ASSERT_FALSE(first->next_page_token.empty());
  query.page_token = first->next_page_token;
  absl::StatusOr<JobPage> second = table.List(query, 7);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(Names(*second), ElementsAre("j2", "j3"));
  query.page_token = second->next_page_token;
  absl::StatusOr<JobPage> last = table.List(query, 7);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(Names(*last), ElementsAre("j4"));
  EXPECT_TRUE(last->next_page_token.empty());
  // Another run of the coordinator (another instance) issued none of these.
  query.page_token = first->next_page_token;
  EXPECT_EQ(table.List(query, 8).status().code(), absl::StatusCode::kInvalidArgument);

  JobListQuery running;
  running.phase = v1::RUNNING;
  absl::StatusOr<JobPage> phase = table.List(running, 7);
  ASSERT_TRUE(phase.ok()) << phase.status();
  EXPECT_THAT(Names(*phase), ElementsAre("j0", "j2", "j4"));
  running.phase = v1::CANCELLED;
  EXPECT_THAT(Names(table.List(running, 7).value()), IsEmpty());
  JobListQuery negative;
  negative.page_size = -1;
  EXPECT_EQ(table.List(negative, 7).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace paci
