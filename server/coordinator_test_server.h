#pragma once

// For the coordinator's service tests: a real gRPC server on a loopback port
// with the CoordinatorService (and, when asked, the WorkerGateway) over a
// JobManager on a real SQLite file; a client of each.

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "server/coordinator_service.h"
#include "server/worker_gateway.h"

namespace paci::test {

// The job API as a client meets it: a real gRPC server on a loopback port,
// the CoordinatorService over a JobManager on a real SQLite file.
class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = (std::filesystem::path(testing::TempDir()) /
           (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".db"))
              .string();
    std::filesystem::remove(db_);
    store_ = *SqliteJobStore::Open(db_);
    manager_ = std::make_unique<JobManager>(*store_, metrics_, JobManagerOptions{});
    ASSERT_TRUE(manager_->Recover().ok());
  }

  // The job API, and with `worker_token` the workers' gateway too (which
  // takes that bearer token).
  void Serve(CoordinatorServiceOptions options, const std::string& listen = "127.0.0.1",
             std::optional<std::string> worker_token = std::nullopt) {
    service_ = std::make_unique<CoordinatorService>(*manager_, options);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(listen + ":0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    if (worker_token) {
      gateway_ = std::make_unique<WorkerGateway>(*manager_, *worker_token);
      builder.RegisterService(gateway_.get());
    }
    server_ = builder.BuildAndStart();
    if (listen == "127.0.0.1") ASSERT_NE(port_, 0);
    stub_ = StubAt("127.0.0.1");
  }
  // A client at another address of this machine.
  std::unique_ptr<v1::Coordinator::Stub> StubAt(const std::string& host) {
    return v1::Coordinator::NewStub(grpc::CreateChannel(absl::StrCat(host, ":", port_),
                                                        grpc::InsecureChannelCredentials()));
  }
  int port_ = 0;

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
    gateway_.reset();
    service_.reset();
    manager_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(db_ + suffix);
  }
  std::string db_;

  static v1::JobSpec Spec(const std::string& name) {
    v1::JobSpec spec = *ParseJobSpecYaml(
        "name: " + name +
        "\nmodel: {vocab_size: 80, num_layers: 2, d_model: 32, num_heads: 4, seq_len: 16}"
        "\npipeline: {num_stages: 2, accumulation: 2, micro_batch_size: 2}"
        "\noptimizer: {lr: 0.001}\ntraining: {steps: 10}\ndata: {corpus_path: /c.txt}\n");
    return spec;
  }

  // A context that gives up after a while instead of hanging a broken test.
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
    return context;
  }

  grpc::Status Submit(const v1::JobSpec& spec, v1::Job* job, const std::string& token = "") {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    return stub_->SubmitJob(Context(token).get(), request, job);
  }

  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<WorkerGateway> gateway_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace paci::test
