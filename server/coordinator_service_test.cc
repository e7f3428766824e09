#include "server/coordinator_service.h"

#include <memory>

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/peer_identity.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_server.h"

namespace paci {
namespace {

using test::CoordinatorServiceTest;

TEST_F(CoordinatorServiceTest, ASubmittedJobIsQueuedWithDefaultsApplied) {
  Serve({});
  v1::Job job;
  ASSERT_TRUE(Submit(Spec("gpt"), &job).ok());
  EXPECT_EQ(job.status().phase(), v1::QUEUED);
  EXPECT_EQ(job.status().total_steps(), 10);
  v1::GetJobRequest get;
  get.set_name("gpt");
  v1::Job fetched;
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &fetched).ok());
  EXPECT_EQ(fetched.spec().name(), "gpt");
  v1::ListJobsRequest list;
  list.set_phase(v1::QUEUED);
  v1::ListJobsResponse listed;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
}

TEST_F(CoordinatorServiceTest, BadRequestsAreRefusedNamingWhatIsWrong) {
  Serve({});
  v1::Job job;
  grpc::Status no_spec = stub_->SubmitJob(Context().get(), v1::SubmitJobRequest{}, &job);
  EXPECT_EQ(no_spec.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(no_spec.error_message(), "spec: required");

  v1::JobSpec bad = Spec("gpt");
  bad.mutable_pipeline()->set_num_stages(0);
  grpc::Status invalid = Submit(bad, &job);
  EXPECT_EQ(invalid.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(invalid.error_message().find("num_stages"), std::string::npos)
      << invalid.error_message();

  v1::GetJobRequest get;
  get.set_name("missing");
  grpc::Status missing = stub_->GetJob(Context().get(), get, &job);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(), "no job \"missing\"");

  get.set_name(std::string(64, 'x'));
  grpc::Status long_name = stub_->GetJob(Context().get(), get, &job);
  EXPECT_EQ(long_name.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(long_name.error_message().find("at most 63"), std::string::npos);

  v1::ListJobsRequest list;
  list.set_phase(static_cast<v1::JobPhase>(77));
  v1::ListJobsResponse listed;
  grpc::Status phase = stub_->ListJobs(Context().get(), list, &listed);
  EXPECT_EQ(phase.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(phase.error_message().find("77"), std::string::npos);
  // None of it reached the manager.
  EXPECT_TRUE(manager_->List(v1::JOB_PHASE_UNSPECIFIED).empty());
}

TEST_F(CoordinatorServiceTest, ARunPolicyIsUpdatedOrRefusedNamingTheField) {
  Serve({});
  v1::Job job;
  ASSERT_TRUE(Submit(Spec("gpt"), &job).ok());
  v1::UpdateRunPolicyRequest update;
  update.set_name("gpt");
  *update.mutable_run_policy() = job.spec().run_policy();
  update.mutable_run_policy()->set_active_deadline_seconds(3600);
  update.mutable_run_policy()->clear_backoff_limit();  // absent: the default, as on submit
  v1::Job updated;
  grpc::Status ok = stub_->UpdateRunPolicy(Context().get(), update, &updated);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(updated.spec().run_policy().active_deadline_seconds(), 3600);
  EXPECT_EQ(updated.spec().run_policy().backoff_limit(), job.spec().run_policy().backoff_limit());
  EXPECT_EQ(manager_->Get("gpt")->spec().run_policy().active_deadline_seconds(), 3600);

  update.mutable_run_policy()->set_priority(5000);
  grpc::Status invalid = stub_->UpdateRunPolicy(Context().get(), update, &updated);
  EXPECT_EQ(invalid.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(invalid.error_message().find("run_policy.priority"), std::string::npos)
      << invalid.error_message();
  EXPECT_EQ(manager_->Get("gpt")->spec().run_policy().priority(), 0);  // unchanged
  update.set_name("missing");
  EXPECT_EQ(stub_->UpdateRunPolicy(Context().get(), update, &updated).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorServiceTest, LabelsAreKeptFilteredOnAndCheckedAndPagesTurn) {
  Serve({});
  v1::Job job;
  v1::SubmitJobRequest request;
  *request.mutable_spec() = Spec("gpt");
  (*request.mutable_labels())["team"] = "nlp";
  ASSERT_TRUE(stub_->SubmitJob(Context().get(), request, &job).ok());
  EXPECT_EQ(job.labels().at("team"), "nlp");
  // The same spec with other labels is another job under a taken name.
  (*request.mutable_labels())["team"] = "vision";
  EXPECT_EQ(stub_->SubmitJob(Context().get(), request, &job).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  *request.mutable_spec() = Spec("other");
  (*request.mutable_labels())[std::string(254, 'k')] = "v";
  grpc::Status long_key = stub_->SubmitJob(Context().get(), request, &job);
  EXPECT_EQ(long_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(long_key.error_message().find("labels"), std::string::npos);
  request.clear_labels();
  request.mutable_spec()->mutable_run_policy()->set_ttl_seconds_after_finished(-1);
  grpc::Status ttl = stub_->SubmitJob(Context().get(), request, &job);
  EXPECT_EQ(ttl.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ttl.error_message().find("ttl_seconds_after_finished"), std::string::npos);
  request.mutable_spec()->mutable_run_policy()->set_ttl_seconds_after_finished(0);
  ASSERT_TRUE(stub_->SubmitJob(Context().get(), request, &job).ok());

  v1::ListJobsRequest list;
  (*list.mutable_label_selector())["team"] = "nlp";
  v1::ListJobsResponse listed;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).name(), "gpt");
  EXPECT_TRUE(listed.next_page_token().empty());
  list.clear_label_selector();
  list.set_page_size(1);
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  list.set_page_token(listed.next_page_token());
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).name(), "other");
  list.set_page_token("###");
  grpc::Status token = stub_->ListJobs(Context().get(), list, &listed);
  EXPECT_EQ(token.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(token.error_message().find("page_token"), std::string::npos);
}

// A job runs on the workers of its own namespace (its labels[paci.dev/namespace]) only:
// a selector asking for another is refused before anything is stored, even from the
// unnamed (no mutual TLS: an administrator), who may set any priority, past
// --tenant_max_priority (a tenant's limit; common/peer_identity_test.cc).
TEST_F(CoordinatorServiceTest, ASelectorNamesNoNamespaceButTheJobsAndTheUnnamedSetAnyPriority) {
  CoordinatorServiceOptions options;
  options.tenant_max_priority = 0;
  Serve(options);
  v1::Job job;
  v1::SubmitJobRequest request;
  *request.mutable_spec() = Spec("gpt");
  (*request.mutable_spec()->mutable_run_policy()->mutable_worker_selector())["paci.dev/namespace"] =
      "team-b";
  grpc::Status other = stub_->SubmitJob(Context().get(), request, &job);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(other.error_message().find(
                "run_policy.worker_selector: paci.dev/namespace=team-b names namespace team-b, and "
                "the job is of none"),
            std::string::npos)
      << other.error_message();
  EXPECT_TRUE(manager_->List(v1::JOB_PHASE_UNSPECIFIED).empty());
  (*request.mutable_labels())["paci.dev/namespace"] = "team-b";
  request.mutable_spec()->mutable_run_policy()->set_priority(1000);
  grpc::Status ok = stub_->SubmitJob(Context().get(), request, &job);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(job.spec().run_policy().priority(), 1000);
}

// What one submission may cost the coordinator (ValidateJobSpec,
// ValidateJobLabels): a string of a spec past PATH_MAX, a spec past 64 KiB
// serialized (here padded with unknown fields), labels past Kubernetes'
// limits. Refused naming the field, with nothing stored.
TEST_F(CoordinatorServiceTest, OversizedSpecsStringsAndLabelsAreRefusedNamingTheField) {
  Serve({});
  v1::Job job;
  v1::JobSpec long_path = Spec("gpt");
  long_path.mutable_checkpoint()->set_directory("/" + std::string(4999, 'd'));
  grpc::Status path = Submit(long_path, &job);
  EXPECT_EQ(path.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(path.error_message(),
            "checkpoint.directory: must be at most 4096 bytes (PATH_MAX), got 5000 bytes");

  v1::JobSpec padded = Spec("gpt");
  padded.GetReflection()->MutableUnknownFields(&padded)->AddLengthDelimited(
      999, std::string(70 * 1024, 'x'));
  grpc::Status big = Submit(padded, &job);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(big.error_message(),
                               "spec: must be at most 65536 bytes serialized, got "))
      << big.error_message();

  v1::SubmitJobRequest request;
  *request.mutable_spec() = Spec("gpt");
  for (int i = 0; i < 65; ++i) (*request.mutable_labels())[absl::StrCat("k", i)] = "v";
  grpc::Status many = stub_->SubmitJob(Context().get(), request, &job);
  EXPECT_EQ(many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(many.error_message(), "labels: must be at most 64 labels, got 65");
  request.clear_labels();
  (*request.mutable_labels())["team"] = std::string(64, 'v');
  grpc::Status long_value = stub_->SubmitJob(Context().get(), request, &job);
  EXPECT_EQ(long_value.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(long_value.error_message(), "labels[team]: must be at most 63 characters, got 64");
  EXPECT_TRUE(manager_->List(v1::JOB_PHASE_UNSPECIFIED).empty());
  // A Kubernetes-style key (a prefix and a name) of more than 63 characters is one.
  request.clear_labels();
  (*request.mutable_labels())[std::string(100, 'p') + ".example.com/team"] = "nlp";
  grpc::Status prefixed = stub_->SubmitJob(Context().get(), request, &job);
  EXPECT_TRUE(prefixed.ok()) << prefixed.error_message();
}

// The names the operator gives TrainingJobs' jobs are the operator's, its
// administrators' and the unnamed's (no mutual TLS, as here); a tenant's
// certificate is refused them (common/peer_identity_test.cc).
TEST_F(CoordinatorServiceTest, TheUnnamedMaySubmitANameOfTheOperatorsForm) {
  Serve({});
  v1::Job job;
  grpc::Status submitted = Submit(Spec("kjv-0123abcd-g2-e1"), &job);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  EXPECT_EQ(job.name(), "kjv-0123abcd-g2-e1");
}

TEST_F(CoordinatorServiceTest, ATokenIsRequiredWhenConfigured) {
  CoordinatorServiceOptions options;
  options.token = "s3cret";
  Serve(options);
  v1::Job job;
  grpc::Status anonymous = Submit(Spec("gpt"), &job);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit(Spec("gpt"), &job, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(manager_->List(v1::JOB_PHASE_UNSPECIFIED).empty());
  EXPECT_TRUE(Submit(Spec("gpt"), &job, "s3cret").ok());
}

TEST_F(CoordinatorServiceTest, AWatchStreamsChangesAndEndsWhenTheJobEnds) {
  Serve({});
  v1::Job job;
  ASSERT_TRUE(Submit(Spec("gpt"), &job).ok());
  v1::WatchJobRequest watch;
  watch.set_name("gpt");
  auto context = Context();
  std::unique_ptr<grpc::ClientReader<v1::Job>> reader = stub_->WatchJob(context.get(), watch);
  v1::Job seen;
  ASSERT_TRUE(reader->Read(&seen));
  EXPECT_EQ(seen.status().phase(), v1::QUEUED);
  v1::CancelJobRequest cancel;
  cancel.set_name("gpt");
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &job).ok());
  v1::Job last = seen;
  while (reader->Read(&seen)) last = seen;
  EXPECT_EQ(last.status().phase(), v1::CANCELLED);
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(CoordinatorServiceTest, WatchersBeyondTheLimitAreRefused) {
  CoordinatorServiceOptions options;
  options.max_watchers = 1;
  Serve(options);
  v1::Job job;
  ASSERT_TRUE(Submit(Spec("gpt"), &job).ok());
  v1::WatchJobRequest watch;
  watch.set_name("gpt");
  auto first_context = Context();
  auto first = stub_->WatchJob(first_context.get(), watch);
  v1::Job seen;
  ASSERT_TRUE(first->Read(&seen));  // the first watcher holds its slot
  auto second_context = Context();
  auto second = stub_->WatchJob(second_context.get(), watch);
  EXPECT_FALSE(second->Read(&seen));
  grpc::Status refused = second->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  first_context->TryCancel();
  first->Finish();
}

TEST_F(CoordinatorServiceTest, OneClientsWatchersAreLimitedAndOthersStillWatch) {
  CoordinatorServiceOptions options;
  options.max_watchers = 10;
  options.max_watchers_per_client = 1;
  // Two clients: 127.0.0.1 and [::1] (every 127.x address leaves from 127.0.0.1).
  Serve(options, "[::]");
  if (port_ == 0) GTEST_SKIP() << "no IPv6 loopback here to be a second client from";
  v1::Job job;
  ASSERT_TRUE(Submit(Spec("gpt"), &job).ok());
  v1::WatchJobRequest watch;
  watch.set_name("gpt");
  v1::Job seen;
  auto held_context = Context();
  auto held = stub_->WatchJob(held_context.get(), watch);
  ASSERT_TRUE(held->Read(&seen));
  // The same client (127.0.0.1) again: refused, naming it and the limit.
  auto again_context = Context();
  auto again = stub_->WatchJob(again_context.get(), watch);
  EXPECT_FALSE(again->Read(&seen));
  grpc::Status refused = again->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(),
            "client host:ipv4:127.0.0.1 holds 1 watchers, its limit (--max_watchers_per_client)");
  // Another client ([::1]) still watches.
  auto other_stub = StubAt("[::1]");
  auto other_context = Context();
  auto other = other_stub->WatchJob(other_context.get(), watch);
  EXPECT_TRUE(other->Read(&seen));
  EXPECT_EQ(seen.spec().name(), "gpt");
  held_context->TryCancel();
  held->Finish();
  other_context->TryCancel();
  other->Finish();
}

TEST(WatcherSlotsTest, AClientGetsItsSlotBackWhenAStreamEndsAndTheTotalHolds) {
  WatcherSlots slots(/*max_total=*/2, /*max_per_client=*/1);
  ASSERT_TRUE(slots.Take("host:a").ok());
  EXPECT_EQ(slots.Take("host:a").code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(slots.Take("host:b").ok());
  const absl::Status full = slots.Take("host:c");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "more than 2 watchers");
  // A stream of a ends: a has its slot back (and c still finds the total full).
  slots.Give("host:a");
  EXPECT_TRUE(slots.Take("host:a").ok());
}

}  // namespace
}  // namespace paci
