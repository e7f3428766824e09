#include "tools/job_control_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "paci/v1/stage.grpc.pb.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobSpec SpecWithStages(int num_stages) {
  v1::JobSpec spec;
  spec.set_name("kjv-small");
  spec.mutable_pipeline()->set_num_stages(num_stages);
  spec.mutable_pipeline()->set_schedule("paci");
  spec.mutable_pipeline()->set_accumulation(2);
  spec.mutable_training()->set_steps(100);
  return spec;
}

v1::JoinRequest JoinOf(int stage) {
  v1::JoinRequest join;
  join.set_job_name("kjv-small");
  join.set_stage(stage);
  join.set_link_address(absl::StrCat("127.0.0.1:", 7000 + stage));
  join.set_metrics_address(absl::StrCat("127.0.0.1:", 8000 + stage));
  join.set_pid(1000 + stage);
  return join;
}

// A real server on 127.0.0.1:0 running the service for a job of
// `num_stages` stages, and a client stub to it.
class JobControlServiceTest : public ::testing::Test {
 protected:
  void StartServer(int num_stages, absl::Duration join_timeout = absl::Seconds(20)) {
    spec_ = SpecWithStages(num_stages);
    progress_ = std::make_unique<JobProgress>(spec_, [] { return absl::Now(); });
    service_ = std::make_unique<JobControlService>(spec_, *progress_,
                                                   JobControlServiceOptions{join_timeout});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
    stub_ = v1::JobControl::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                                        grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ == nullptr) return;
    service_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  grpc::Status Join(const v1::JoinRequest& request, v1::JoinResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Join(&context, request, response);
  }

  grpc::Status Report(const v1::StageReport& request, v1::ReportAck* ack) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Report(&context, request, ack);
  }

  // Joins every stage concurrently; all must succeed.
  void JoinAll(int num_stages, std::vector<v1::JoinResponse>* responses) {
    responses->resize(num_stages);
    std::vector<grpc::Status> statuses(num_stages);
    std::vector<std::thread> clients;
    for (int s = 0; s < num_stages; ++s) {
      clients.emplace_back([this, s, &statuses, responses] {
        v1::JoinRequest join = JoinOf(s);
        if (s == 0) join.clear_job_name();  // a worker learns the name by joining
        statuses[s] = Join(join, &(*responses)[s]);
      });
    }
    for (std::thread& client : clients) client.join();
    for (int s = 0; s < num_stages; ++s) {
      ASSERT_TRUE(statuses[s].ok()) << "stage " << s << ": " << statuses[s].error_message();
    }
  }

  v1::JobSpec spec_;
  std::unique_ptr<JobProgress> progress_;
  std::unique_ptr<JobControlService> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::JobControl::Stub> stub_;
};

TEST_F(JobControlServiceTest, ConcurrentJoinsAllGetTheSpecAndTheSameAddresses) {
  StartServer(3);
  std::vector<v1::JoinResponse> responses;
  JoinAll(3, &responses);
  for (const v1::JoinResponse& response : responses) {
    EXPECT_EQ(response.spec().name(), "kjv-small");
    EXPECT_EQ(response.spec().pipeline().num_stages(), 3);
    EXPECT_THAT(response.stage_addresses(),
                ElementsAre("127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"));
  }
  EXPECT_TRUE(progress_->all_joined());
}

TEST_F(JobControlServiceTest, WrongJobNameIsInvalidArgument) {
  StartServer(2);
  v1::JoinRequest join = JoinOf(0);
  join.set_job_name("other-job");
  v1::JoinResponse response;
  const grpc::Status status = Join(join, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("job_name"));
  EXPECT_THAT(status.error_message(), HasSubstr("other-job"));
  EXPECT_EQ(progress_->joined(), 0);
}

TEST_F(JobControlServiceTest, OutOfRangeStageIsInvalidArgument) {
  StartServer(2);
  v1::JoinResponse response;
  for (int stage : {-1, 2}) {
    const grpc::Status status = Join(JoinOf(stage), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << stage;
    EXPECT_THAT(status.error_message(), HasSubstr("between 0 and 1"));
  }
}

TEST_F(JobControlServiceTest, OverlongAddressIsInvalidArgument) {
  StartServer(2);
  v1::JoinRequest join = JoinOf(0);
  join.set_link_address(std::string(JobControlService::kMaxStringLength + 1, 'x'));
  v1::JoinResponse response;
  const grpc::Status status = Join(join, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("link_address"));
}

TEST_F(JobControlServiceTest, SecondJoinOfAStageIsAlreadyExists) {
  StartServer(2);
  std::vector<v1::JoinResponse> responses;
  JoinAll(2, &responses);
  v1::JoinResponse response;
  const grpc::Status status = Join(JoinOf(1), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(status.error_message(), HasSubstr("stage 1"));
}

TEST_F(JobControlServiceTest, JoinTimesOutWhenAStageNeverJoins) {
  StartServer(2, absl::Milliseconds(100));
  v1::JoinResponse response;
  const grpc::Status status = Join(JoinOf(0), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("only 1 of 2"));
}

TEST_F(JobControlServiceTest, StopReleasesAWaitingJoin) {
  StartServer(2);
  grpc::Status status;
  std::thread client([this, &status] {
    v1::JoinResponse response;
    status = Join(JoinOf(0), &response);
  });
  service_->Stop();  // whether before or after the Join arrives, it is cancelled
  client.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(JobControlServiceTest, ReportsFeedProgressAndAckCancelAfterStop) {
  StartServer(2);
  std::vector<v1::JoinResponse> responses;
  JoinAll(2, &responses);

  v1::StageReport report;
  report.set_job_name("kjv-small");
  report.set_stage(1);
  report.set_optimizer_steps(7);
  report.set_drift_max(0);
  v1::LossPoint* point = report.add_train_loss();
  point->set_step(7);
  point->set_loss(2.5);
  v1::ReportAck ack;
  ASSERT_TRUE(Report(report, &ack).ok());
  EXPECT_FALSE(ack.cancel());
  report.clear_train_loss();
  report.set_stage(0);
  report.set_optimizer_steps(9);
  report.set_drift_max(1);
  ASSERT_TRUE(Report(report, &ack).ok());

  const ProgressView view = progress_->View();
  EXPECT_EQ(view.step, 7);
  EXPECT_EQ(view.train_loss, 2.5);
  EXPECT_THAT(view.drift_max, ElementsAre(1, 0));

  service_->Stop();
  ASSERT_TRUE(Report(report, &ack).ok());
  EXPECT_TRUE(ack.cancel());
}

TEST_F(JobControlServiceTest, ReportedErrorBecomesTheFailure) {
  StartServer(1);
  std::vector<v1::JoinResponse> responses;
  JoinAll(1, &responses);
  v1::StageReport report;
  report.set_job_name("kjv-small");
  report.set_stage(0);
  report.set_error(std::string(JobControlService::kMaxErrorLength + 100, 'e'));
  v1::ReportAck ack;
  ASSERT_TRUE(Report(report, &ack).ok());
  ASSERT_TRUE(progress_->failure().has_value());
  EXPECT_EQ(progress_->failure()->stage, 0);
  EXPECT_LT(progress_->failure()->message.size(), JobControlService::kMaxErrorLength + 10);
}

TEST_F(JobControlServiceTest, ReportFromAStageThatDidNotJoinIsRejected) {
  StartServer(2);
  v1::StageReport report;
  report.set_job_name("kjv-small");
  report.set_stage(0);
  v1::ReportAck ack;
  EXPECT_EQ(Report(report, &ack).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  report.set_job_name("other-job");
  EXPECT_EQ(Report(report, &ack).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace paci
