#include "worker/agent/worker_agent.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/backoff.h"

namespace paci {

WorkerAgent::WorkerAgent(const WorkerAgentOptions& options, StageLinkService& links,
                         prometheus::Registry& registry)
    : options_(options), links_(links), registry_(registry) {}

WorkerAgent::~WorkerAgent() {
  Shutdown();
  std::thread stage;
  {
    absl::MutexLock lock(&stage_mu_);
    stage = std::move(stage_thread_);
  }
  if (stage.joinable()) stage.join();
}

void WorkerAgent::Shutdown() {
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  {
    absl::MutexLock lock(&stage_mu_);
    if (host_) host_->Cancel();
  }
  absl::MutexLock lock(&write_mu_);
  if (context_) context_->TryCancel();
}

void WorkerAgent::Run() {
  Backoff backoff(absl::Milliseconds(100), options_.max_backoff);
  while (!shutdown_.HasBeenNotified()) {
    const absl::Time started = absl::Now();
    Session();
    if (shutdown_.HasBeenNotified()) break;
    if (absl::Now() - started > absl::Seconds(10)) backoff.Reset();  // it had been up a while
    LOG(WARNING) << "lost the coordinator at " << options_.coordinator->address() << "; reconnecting in "
                 << absl::FormatDuration(backoff.current());
    shutdown_.WaitForNotificationWithTimeout(backoff.Next());
  }
}

bool WorkerAgent::WriteLocked(const v1::WorkerMessage& message) {
  return stream_ != nullptr && stream_->Write(message);
}

void WorkerAgent::Session() {
  const std::unique_ptr<grpc::ClientContext> context =
      options_.coordinator->Context(absl::InfiniteDuration());
  context->set_wait_for_ready(true);
  std::unique_ptr<Stream> stream = options_.coordinator->gateway().Connect(context.get());
  v1::WorkerMessage hello;
  *hello.mutable_register_() = options_.registration;
  {
    absl::MutexLock lock(&stage_mu_);
    if (running_) *hello.mutable_register_()->mutable_running() = *running_;
  }
  {
    absl::MutexLock lock(&write_mu_);
    stream_ = stream.get();
    context_ = context.get();
    if (shutdown_.HasBeenNotified()) context->TryCancel();
    if (!hello.register_().has_running() && unconfirmed_final_) {
      // The last stage ended, perhaps while the coordinator was away or
      // before it stored the report: name it, so that the final report
      // below is taken as this placement's.
      *hello.mutable_register_()->mutable_running() = last_assigned_;
    }
    if (WriteLocked(hello) && unconfirmed_final_) {
      v1::WorkerMessage message;
      *message.mutable_report() = *unconfirmed_final_;
      WriteLocked(message);
    }
  }
  absl::Notification session_over;
  std::thread heartbeat([&] {
    v1::WorkerMessage beat;
    while (!session_over.WaitForNotificationWithTimeout(options_.heartbeat_interval)) {
      beat.mutable_heartbeat()->set_sequence(beat.heartbeat().sequence() + 1);
      absl::MutexLock lock(&write_mu_);
      if (!WriteLocked(beat)) break;
    }
  });
  v1::CoordinatorMessage message;
  while (stream->Read(&message)) {
    if (message.has_assign()) {
      StartStage(message.assign());
    } else if (message.has_stop()) {
      StopStage(message.stop());
    }
  }
  session_over.Notify();
  heartbeat.join();
  {
    absl::MutexLock lock(&write_mu_);
    stream_ = nullptr;
    context_ = nullptr;
  }
  grpc::Status status = stream->Finish();
  if (!status.ok() && !shutdown_.HasBeenNotified()) {
    LOG(WARNING) << "coordinator stream ended: " << status.error_message();
  }
}

void WorkerAgent::StartStage(const v1::StageAssignment& assignment) {
  // The coordinator assigns only after the previous stage's final report, so
  // that stage is at its very end: wait for it.
  std::thread previous;
  {
    absl::MutexLock lock(&stage_mu_);
    previous = std::move(stage_thread_);
  }
  if (previous.joinable()) previous.join();
  {
    // Assigned only once the coordinator stored what that stage's end changed.
    absl::MutexLock lock(&write_mu_);
    unconfirmed_final_.reset();
    last_assigned_ = assignment;
  }
  absl::MutexLock lock(&stage_mu_);
  LOG(INFO) << "assigned job=" << assignment.job_name() << " attempt=" << assignment.attempt()
            << " stage=" << assignment.stage();
  running_ = assignment;
  host_ = std::make_unique<StageHost>(assignment, links_, registry_, this, options_.host);
  StageHost* host = host_.get();
  stage_thread_ = std::thread([this, host, assignment] {
    absl::Status status = host->Run();
    LOG(INFO) << "job=" << assignment.job_name() << " attempt=" << assignment.attempt()
              << " stage=" << assignment.stage() << " ended: " << status;
    absl::MutexLock lock(&stage_mu_);
    running_.reset();
    host_.reset();
  });
}

void WorkerAgent::StopStage(const v1::StopStage& stop) {
  absl::MutexLock lock(&stage_mu_);
  if (running_ && running_->job_name() == stop.job_name() &&
      running_->attempt() == stop.attempt() && host_) {
    LOG(INFO) << "stopping job=" << stop.job_name() << ": " << stop.reason();
    host_->Cancel();
  }
}

void WorkerAgent::Deliver(const v1::StageReport& report) {
  v1::WorkerMessage message;
  *message.mutable_report() = report;
  const bool final = report.finished() || !report.error().empty();
  absl::MutexLock lock(&write_mu_);
  if (final) unconfirmed_final_ = report;
  WriteLocked(message);
}

}  // namespace paci
