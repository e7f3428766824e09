// fake_worker: a stand-in for paci_worker in the launcher's tests. It keeps
// the worker's side of the JobControl contract (join, a report every few
// milliseconds with only new loss points, a final report, cancel on ack) but
// trains nothing, and fails on purpose as --mode says.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "paci/v1/stage.grpc.pb.h"

ABSL_FLAG(std::string, job_control, "", "JobControl address");
ABSL_FLAG(int, stage, -1, "pipeline stage");
ABSL_FLAG(std::string, mode, "succeed",
          "succeed; error, crash or early_exit (--fail_stage only, after two reports; the "
          "others run until cancelled); hang (all run until cancelled)");
ABSL_FLAG(int, fail_stage, 0, "the stage that fails");

namespace {

constexpr int kStepsPerReport = 2;

bool Send(paci::v1::JobControl::Stub& stub, const paci::v1::StageReport& report) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  paci::v1::ReportAck ack;
  const grpc::Status status = stub.Report(&context, report, &ack);
  return status.ok() && !ack.cancel();
}

int Run() {
  const int stage = absl::GetFlag(FLAGS_stage);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  // Only "succeed" finishes; otherwise every stage runs until cancelled but
  // the failing one.
  const bool finishes = mode == "succeed";
  const bool fails = !finishes && mode != "hang" && stage == absl::GetFlag(FLAGS_fail_stage);
  auto stub = paci::v1::JobControl::NewStub(
      grpc::CreateChannel(absl::GetFlag(FLAGS_job_control), grpc::InsecureChannelCredentials()));

  paci::v1::JoinRequest join;
  join.set_stage(stage);
  join.set_link_address(absl::StrCat("127.0.0.1:", 20000 + stage));
  join.set_metrics_address(absl::StrCat("127.0.0.1:", 21000 + stage));
  join.set_pid(getpid());
  paci::v1::JoinResponse joined;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    context.set_wait_for_ready(true);
    const grpc::Status status = stub->Join(&context, join, &joined);
    if (!status.ok()) return 1;
  }
  const paci::v1::JobSpec& spec = joined.spec();
  // A log line, as a real worker writes one, for the launcher to relay.
  std::fprintf(stderr, "fake worker job=%s stage=%d/%d pid=%d\n", spec.name().c_str(), stage,
               spec.pipeline().num_stages(), static_cast<int>(getpid()));
  std::fflush(stderr);
  const bool last = stage == spec.pipeline().num_stages() - 1;
  const int64_t steps = spec.training().steps();

  paci::v1::StageReport report;
  report.set_job_name(spec.name());
  report.set_stage(stage);
  report.set_drift_bound(spec.pipeline().num_stages() - 1 - stage);
  const char* threads = std::getenv("OMP_NUM_THREADS");
  if (threads == nullptr || std::stoi(threads) != spec.runtime().threads_per_stage()) {
    report.set_error("OMP_NUM_THREADS does not match runtime.threads_per_stage");
    Send(*stub, report);
    return 1;
  }
  for (int reports = 1;; ++reports) {
    absl::SleepFor(absl::Milliseconds(10));
    const int64_t done = finishes ? std::min<int64_t>(reports * kStepsPerReport, steps)
                                  : std::min<int64_t>(reports, steps - 1);
    for (int64_t step = report.optimizer_steps() + 1; last && step <= done; ++step) {
      paci::v1::LossPoint* point = report.add_train_loss();
      point->set_step(step);
      point->set_loss(4.0 - 0.1 * step);
    }
    report.set_optimizer_steps(done);
    report.set_forward_micro_batches(2 * done);
    report.set_backward_micro_batches(2 * done);
    report.set_drift_max(report.drift_bound());
    report.set_drift_sum(done);
    report.set_drift_count(2 * done);
    report.set_busy_seconds(0.01 * reports);
    report.set_idle_seconds(0.005 * reports);
    report.set_tokens(last ? done * 64 : 0);
    report.set_peak_rss_bytes(int64_t{64} << 20);
    if (joined.trace_max_spans() > 0) {
      // Back-to-back forward and backward spans of 1 ms, 2 per report.
      const int64_t base = absl::ToUnixMicros(absl::Now());
      for (int i = 0; i < 2; ++i) {
        paci::v1::Span* span = report.add_spans();
        span->set_kind(i == 0 ? paci::v1::Span::FORWARD : paci::v1::Span::BACKWARD);
        span->set_start_unix_micros(base + 1000 * i);
        span->set_end_unix_micros(base + 1000 * (i + 1));
        span->set_micro_batch_id(reports);
      }
    }
    if (fails && reports == 2) {
      if (mode == "error") {
        report.set_error(absl::StrCat("injected failure at step ", done));
        Send(*stub, report);
        return 1;
      }
      if (mode == "crash") std::abort();
      if (mode == "early_exit") return 0;
    }
    if (finishes && done == steps) {
      if (last) {
        paci::v1::LossPoint* point = report.add_validation_loss();
        point->set_step(steps);
        point->set_loss(3.5);
      }
      report.set_finished(true);
      return Send(*stub, report) ? 0 : 1;
    }
    if (!Send(*stub, report)) {  // cancelled, or the launcher is gone
      report.clear_train_loss();
      report.set_error("cancelled");
      Send(*stub, report);
      return 1;
    }
    report.clear_train_loss();
    report.clear_spans();
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Run();
}
