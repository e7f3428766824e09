#include "common/coordinator_client.h"

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

namespace paci {
namespace {

// A coordinator that answers GetJobTrace with a timeline of `spans` spans on
// each of 8 stages, the size a deep job's trace reaches.
class TraceCoordinator final : public v1::Coordinator::Service {
 public:
  explicit TraceCoordinator(int spans) : spans_(spans) {}
  grpc::Status GetJobTrace(grpc::ServerContext*, const v1::GetJobRequest* request,
                           v1::JobTrace* trace) override {
    trace->set_name(request->name());
    for (int stage = 0; stage < 8; ++stage) {
      v1::StageTrace* st = trace->add_stages();
      st->set_stage(stage);
      for (int i = 0; i < spans_; ++i) {
        v1::Span* span = st->add_spans();
        span->set_kind(v1::Span::FORWARD);
        span->set_start_unix_micros(1'800'000'000'000'000 + 10 * i);
        span->set_end_unix_micros(1'800'000'000'000'000 + 10 * i + 7);
        span->set_micro_batch_id(i);
      }
    }
    return grpc::Status::OK;
  }

 private:
  const int spans_;
};

// pacictl's channel and the workers' both take a timeline past gRPC's default 4 MiB.
TEST(CoordinatorClientTest, ATraceLargerThanGrpcsDefaultLimitComesThrough) {
  TraceCoordinator service(/*spans=*/30000);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  for (bool reconnect_quickly : {false, true}) {
    SCOPED_TRACE(reconnect_quickly);
    CoordinatorClientOptions options;
    options.address = "127.0.0.1:" + std::to_string(port);
    options.reconnect_quickly = reconnect_quickly;
    absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<v1::JobTrace> trace = (*client)->Trace("deep", absl::Seconds(30));
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_GT(trace->ByteSizeLong(), size_t{4} << 20);
    ASSERT_EQ(trace->stages_size(), 8);
    EXPECT_EQ(trace->stages(7).spans_size(), 30000);
  }
  server->Shutdown();
}

}  // namespace
}  // namespace paci
