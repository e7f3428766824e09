// The workers' side of the coordinator: WorkerGateway's streams over a real
// gRPC server (server/coordinator_test_server.h), and WorkerStreamSlots.

#include "server/worker_gateway.h"

#include <memory>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/peer_identity.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_server.h"

namespace paci {
namespace {

// A namespace's worker certificates hold at most --max_workers_per_namespace
// streams open (2 here), and get a slot back when one ends; another
// namespace's, callers without a certificate and administrators are not held
// back by them.
TEST(WorkerStreamSlotsTest, ANamespacesWorkersHoldAtMostTheLimitAndGetSlotsBackWhenStreamsEnd) {
  WorkerStreamSlots slots(/*max_per_namespace=*/2);
  const PeerIdentity team_a = IdentityOfCommonName("system:paci:worker:team-a");
  const PeerIdentity team_b = IdentityOfCommonName("system:paci:worker:team-b");
  ASSERT_TRUE(slots.Take(team_a).ok());
  ASSERT_TRUE(slots.Take(team_a).ok());
  const absl::Status refused = slots.Take(team_a);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "namespace team-a has 2 worker streams open, its limit (--max_workers_per_namespace): "
            "the certificate \"system:paci:worker:team-a\" opens no more until one ends");
  EXPECT_EQ(slots.Open("team-a"), 2);
  EXPECT_TRUE(slots.Take(team_b).ok());
  const PeerIdentity unnamed;
  const PeerIdentity administrator = IdentityOfCommonName("ada", {"ada"});
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(slots.Take(unnamed).ok());
    EXPECT_TRUE(slots.Take(administrator).ok());
  }
  EXPECT_EQ(slots.Open(""), 0);
  // A stream of team-a ends: its slot is free again, and only the one.
  slots.Give(team_a);
  EXPECT_EQ(slots.Open("team-a"), 1);
  EXPECT_TRUE(slots.Take(team_a).ok());
  EXPECT_EQ(slots.Take(team_a).code(), absl::StatusCode::kResourceExhausted);
  slots.Give(team_a);
  slots.Give(team_a);
  EXPECT_EQ(slots.Open("team-a"), 0);
}

// A worker's stream to the gateway: its registration first, with the token.
struct WorkerStream {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
};

class WorkerGatewayTest : public test::CoordinatorServiceTest {
 protected:
  void SetUp() override {
    test::CoordinatorServiceTest::SetUp();
    Serve({}, "127.0.0.1", "worker-token");
    workers_ = v1::WorkerGateway::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }

  // Opens a stream and sends `first` (a registration, or whatever a test says;
  // the gateway may have ended a refused stream before it reads it).
  WorkerStream Open(const v1::WorkerMessage& first, const std::string& token = "worker-token") {
    WorkerStream opened{Context(token), nullptr};
    opened.stream = workers_->Connect(opened.context.get());
    opened.stream->Write(first);
    return opened;
  }
  static v1::WorkerMessage Register(const std::string& id) {
    v1::WorkerMessage message;
    message.mutable_register_()->set_worker_id(id);
    message.mutable_register_()->set_link_address(id + ".workers.test:7000");  // never dialled
    return message;
  }
  // How the gateway ended a stream the client has finished writing to.
  static grpc::Status Ended(WorkerStream& opened) {
    opened.stream->WritesDone();
    v1::CoordinatorMessage ignored;
    while (opened.stream->Read(&ignored)) {
    }
    return opened.stream->Finish();
  }
  // Waits (a minute at most) until the manager holds `count` workers.
  void WaitForWorkers(size_t count) {
    EXPECT_TRUE(manager_->AwaitConnectedWorkers(count, absl::Minutes(1)))
        << manager_->connected_workers() << " workers connected, not " << count;
  }

  std::unique_ptr<v1::WorkerGateway::Stub> workers_;
};

// Bad input on the workers' port: no token, a first message that is no
// registration, a registration that says too little, an id already connected.
TEST_F(WorkerGatewayTest, AStreamWithoutTheTokenOrARegistrationIsRefusedNamingWhy) {
  WorkerStream stranger = Open(Register("w0"), "not-the-token");
  const grpc::Status refused = Ended(stranger);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "bearer token"));

  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  WorkerStream unregistered = Open(heartbeat);
  const grpc::Status first = Ended(unregistered);
  EXPECT_EQ(first.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(first.error_message(), "the first message on a worker stream must be register");

  v1::WorkerMessage nowhere = Register("w0");
  nowhere.mutable_register_()->clear_link_address();
  WorkerStream unreachable = Open(nowhere);
  const grpc::Status link = Ended(unreachable);
  EXPECT_EQ(link.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(link.error_message(), "register.link_address"));
  EXPECT_EQ(manager_->connected_workers(), 0u);

  WorkerStream held = Open(Register("w0"));
  WaitForWorkers(1);
  WorkerStream twin = Open(Register("w0"));
  EXPECT_EQ(Ended(twin).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Ended(held).error_code(), grpc::StatusCode::OK);
  WaitForWorkers(0);
}

// A registered worker is the manager's until its stream ends; what the
// manager decides for it (a stage of a job) comes down its stream.
TEST_F(WorkerGatewayTest, RegisteredWorkersAreAssignedStagesDownTheirStreamsAndLeaveWithThem) {
  WorkerStream w0 = Open(Register("w0"));
  WorkerStream w1 = Open(Register("w1"));
  WaitForWorkers(2);
  v1::Job job;
  ASSERT_TRUE(Submit(Spec("gpt"), &job).ok());
  std::set<int> stages;
  for (WorkerStream* opened : {&w0, &w1}) {
    v1::CoordinatorMessage message;
    ASSERT_TRUE(opened->stream->Read(&message));
    ASSERT_TRUE(message.has_assign()) << message.DebugString();
    EXPECT_EQ(message.assign().job_name(), "gpt");
    EXPECT_EQ(message.assign().stage_addresses_size(), 2);
    stages.insert(message.assign().stage());
  }
  EXPECT_EQ(stages, (std::set<int>{0, 1}));
  EXPECT_EQ(manager_->Get("gpt")->status().phase(), v1::RUNNING);
  EXPECT_EQ(Ended(w0).error_code(), grpc::StatusCode::OK);
  WaitForWorkers(1);
  EXPECT_EQ(Ended(w1).error_code(), grpc::StatusCode::OK);
  WaitForWorkers(0);
}

}  // namespace
}  // namespace paci
