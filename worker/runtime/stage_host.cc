#include "worker/runtime/stage_host.h"

#include <optional>
#include <thread>

// Torch before glog: a LibTorch built without glog (PyTorch's own) defines
// LOG and CHECK itself, and glog's must be the ones that stay.
#include <torch/torch.h>
#include <glog/logging.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/job_spec.h"
#include "common/run_id.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "worker/data/corpus.h"
#include "worker/runtime/span_recorder.h"
#include "worker/runtime/stage_metrics.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/transport/peer_sender.h"

namespace paci {

StageHost::StageHost(const v1::StageAssignment& assignment, StageLinkService& links,
                     prometheus::Registry& registry, ReportSink* sink,
                     const StageHostOptions& options)
    : assignment_(assignment), links_(links), registry_(registry), sink_(sink),
      options_(options) {}

StageHost::~StageHost() = default;

void StageHost::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  if (runtime_) runtime_->Cancel();
}

absl::Status StageHost::Run() {
  absl::Status status = Train();
  links_.Detach();
  return status;
}

absl::Status StageHost::Train() {
  const v1::JobSpec& spec = assignment_.spec();
  const int stage = assignment_.stage();
  const int P = spec.pipeline().num_stages();
  v1::StageReport failure;  // sent when the stage fails before it can report itself
  failure.set_job_name(spec.name());
  failure.set_stage(stage);
  failure.set_attempt(assignment_.attempt());
  auto fail = [&](const absl::Status& status) {
    failure.set_error(std::string(status.message()));
    failure.set_error_code(static_cast<int>(status.code()));
    if (sink_) sink_->Deliver(failure);
    return status;
  };
  if (stage < 0 || stage >= P || assignment_.stage_addresses_size() != P) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("stage ", stage, " does not fit a job of ", P, " stages with ",
                     assignment_.stage_addresses_size(), " addresses")));
  }
  torch::set_num_threads(spec.runtime().threads_per_stage());

  std::optional<Corpus> corpus;
  if (stage == 0 || stage == P - 1) {
    CorpusOptions options;
    options.path = spec.data().corpus_path();
    options.validation_fraction = spec.data().validation_fraction();
    options.seed = spec.data().seed();
    options.seq_len = spec.model().seq_len();
    options.micro_batch_size = spec.pipeline().micro_batch_size();
    absl::StatusOr<Corpus> loaded = Corpus::Load(options);
    if (!loaded.ok()) return fail(loaded.status());
    corpus = std::move(*loaded);
    if (corpus->tokenizer().vocab_size() > spec.model().vocab_size()) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "model.vocab_size: the corpus ", options.path, " has ", corpus->tokenizer().vocab_size(),
          " distinct characters, more than vocab_size ", spec.model().vocab_size())));
    }
  }
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(spec.pipeline().schedule());
  if (!kind.ok()) return fail(kind.status());

  LinkExpectations expect;
  expect.job_name = RunId(spec.name(), assignment_.attempt());
  expect.stage = stage;
  expect.num_stages = P;
  expect.hidden_shape = {spec.pipeline().micro_batch_size(), spec.model().seq_len(),
                         spec.model().d_model()};
  // Hidden states travel in the weights' type: bf16 with bf16 weights.
  expect.dtype = spec.runtime().precision() == "bf16-weights" ? v1::DTYPE_BFLOAT16
                                                               : v1::DTYPE_FLOAT32;
  auto inbox = std::make_shared<Inbox>(64);
  links_.Attach(expect, inbox);

  StageMetrics metrics(registry_, spec.name(), stage, P,
                       DriftBound(*kind, P, stage, spec.pipeline().accumulation()));
  auto on_failure = [inbox](absl::Status status) { inbox->Fail(std::move(status)); };
  std::unique_ptr<PeerSender> previous, next;
  if (stage > 0) {
    previous = std::make_unique<PeerSender>(
        PeerSender::Options{assignment_.stage_addresses(stage - 1), absl::StrCat("stage ", stage - 1),
                            16, absl::Seconds(60), options_.link_credentials},
        on_failure);
    previous->Start();
  }
  if (stage < P - 1) {
    next = std::make_unique<PeerSender>(
        PeerSender::Options{assignment_.stage_addresses(stage + 1), absl::StrCat("stage ", stage + 1),
                            16, absl::Seconds(60), options_.link_credentials},
        on_failure);
    next->Start();
  }
  std::unique_ptr<SpanRecorder> spans;
  if (spec.runtime().trace_max_spans() > 0) {
    spans = std::make_unique<SpanRecorder>(spec.runtime().trace_max_spans());
  }
  StageRuntime runtime(spec, stage, corpus ? &*corpus : nullptr, *inbox, previous.get(),
                       next.get(), metrics, spans.get(), expect.job_name);
  {
    absl::MutexLock lock(&mu_);
    runtime_ = &runtime;
  }
  // Neighbouring stages on two GPUs of one node exchange tensors over NCCL
  // (NCCL refuses two ranks on one GPU: those go through the host).
  auto gpu_of = [&](int s) {
    const std::string device = StageDevice(spec.runtime(), s);
    return device == "cuda" ? std::string("cuda:0") : device;
  };
  auto on_gpu = [&](int s) { return absl::StartsWith(gpu_of(s), "cuda"); };
  auto host_of = [&](int s) {
    const std::string& address = assignment_.stage_addresses(s);
    return address.substr(0, address.rfind(':'));
  };
  auto nccl_with = [&](int peer) {
    return peer >= 0 && peer < P && on_gpu(stage) && on_gpu(peer) &&
           gpu_of(stage) != gpu_of(peer) && host_of(stage) == host_of(peer);
  };
  runtime.UseNccl(nccl_with(stage - 1), nccl_with(stage + 1));
  if (cancelled_.load()) runtime.Cancel();
  auto report = [&] {
    v1::StageReport r = runtime.TakeReport();
    r.set_attempt(assignment_.attempt());
    if (spans) {
      for (v1::Span& span : spans->Take()) *r.add_spans() = std::move(span);
      r.set_spans_dropped(spans->dropped());
    }
    return r;
  };
  absl::Notification stop_reporting;
  std::thread reporter([&] {
    while (sink_ && !stop_reporting.WaitForNotificationWithTimeout(options_.report_interval)) {
      sink_->Deliver(report());
    }
  });
  absl::Status status = runtime.Init();
  if (status.ok()) status = runtime.Run();
  stop_reporting.Notify();
  reporter.join();
  {
    absl::MutexLock lock(&mu_);
    runtime_ = nullptr;
  }
  inbox->Close();
  v1::StageReport final_report = report();
  if (!status.ok()) {
    final_report.set_error(std::string(status.message()));
    final_report.set_error_code(static_cast<int>(status.code()));
  }
  if (sink_) sink_->Deliver(final_report);
  return status;
}

}  // namespace paci
