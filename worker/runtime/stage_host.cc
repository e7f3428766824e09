#include "worker/runtime/stage_host.h"

#include <optional>
#include <thread>

// Torch before glog: a LibTorch built without glog (PyTorch's own) defines
// LOG and CHECK itself, and glog's must be the ones that stay.
#include <torch/torch.h>
#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/job_spec.h"
#include "common/run_id.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "worker/data/corpus.h"
#include "worker/model/partition.h"
#include "worker/runtime/nccl_placement.h"
#include "worker/runtime/replica_group.h"
#include "worker/runtime/span_recorder.h"
#include "worker/runtime/stage_metrics.h"
#include "worker/runtime/stage_runtime.h"
#include "worker/transport/peer_sender.h"

namespace paci {
namespace {

absl::Status CheckFits(const v1::StageAssignment& assignment) {
  const int stage = assignment.stage();
  const int P = assignment.spec().pipeline().num_stages();
  if (stage < 0 || stage >= P || assignment.stage_addresses_size() != P) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage, " does not fit a job of ", P, " stages with ",
                     assignment.stage_addresses_size(), " addresses"));
  }
  const int R = assignment.spec().pipeline().data_parallel();
  const int replica = assignment.replica();
  if (replica < 0 || replica >= std::max(R, 1) ||
      (R > 1 && (assignment.replica_addresses_size() != R ||
                 assignment.replica_store_address().empty() ||
                 assignment.replica_group().empty()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica ", replica, " does not fit a job of ", R, " replicas with ",
        assignment.replica_addresses_size(), " replica addresses, store \"",
        assignment.replica_store_address(), "\" and group \"", assignment.replica_group(),
        "\""));
  }
  return absl::OkStatus();
}

// pipeline.data_parallel > 1: the group of this stage's replicas, met.
absl::StatusOr<std::unique_ptr<ReplicaGroup>> JoinReplicas(const v1::StageAssignment& assignment,
                                                           const StageHostOptions& options) {
  const int R = assignment.spec().pipeline().data_parallel();
  if (R <= 1) return nullptr;
  if (assignment.replica() == 0 && options.replica_store != nullptr) {
    RETURN_IF_ERROR(options.replica_store->Serve());  // the others meet at it
  }
  ReplicaGroupOptions o;
  o.store_address = assignment.replica_store_address();
  o.prefix = assignment.replica_group();
  o.secret = assignment.link_secret();
  o.stage = assignment.stage();
  o.replica = assignment.replica();
  o.num_replicas = R;
  o.hostname = options.replica_hostname;
  o.peer_addresses.assign(assignment.replica_addresses().begin(),
                          assignment.replica_addresses().end());
  o.join_timeout = options.replica_join_timeout;
  o.collective_timeout = options.replica_timeout;
  return ReplicaGroup::Join(o);
}

// The first and the last stage read the corpus (inputs, targets), and the
// one before the last when the head is split (its rows' targets); the others
// need none. InvalidArgument when its tokenizer has more tokens than the
// model's vocabulary.
absl::StatusOr<std::optional<Corpus>> LoadCorpus(const v1::StageAssignment& assignment) {
  const v1::JobSpec& spec = assignment.spec();
  const int stage = assignment.stage(), num_stages = spec.pipeline().num_stages();
  absl::StatusOr<PartitionPlan> plan = PlanPartition(spec);
  const bool head_shard = stage == num_stages - 2 && plan.ok() && plan->head_split > 0;
  if (stage != 0 && stage != num_stages - 1 && !head_shard) return std::nullopt;
  const v1::DataSpec& data = spec.data();
  CorpusOptions options;
  options.path = data.corpus_path();
  options.dataset = data.dataset();
  options.tokenizer = data.tokenizer();
  options.tokenizer_model = data.tokenizer_model();
  options.validation_fraction = data.validation_fraction();
  options.validation_shards = data.validation_shards();
  options.seed = data.seed();
  options.seq_len = spec.model().seq_len();
  options.micro_batch_size = spec.pipeline().micro_batch_size();
  ASSIGN_OR_RETURN(Corpus corpus, Corpus::Load(options));
  if (corpus.tokenizer().vocab_size() > spec.model().vocab_size()) {
    const std::string& source = options.dataset.empty() ? options.path : options.dataset;
    return absl::InvalidArgumentError(absl::StrCat(
        "model.vocab_size: the tokenizer of ", source, " has ", corpus.tokenizer().vocab_size(),
        " tokens, more than model.vocab_size ", spec.model().vocab_size()));
  }
  return std::optional<Corpus>(std::move(corpus));
}

// What the stage's links accept: this attempt's frames, of its shape and type.
LinkExpectations ExpectationsOf(const v1::StageAssignment& assignment) {
  const v1::JobSpec& spec = assignment.spec();
  LinkExpectations expect;
  expect.job_name = RunId(spec.name(), assignment.attempt());
  expect.secret = assignment.link_secret();
  expect.stage = assignment.stage();
  expect.num_stages = spec.pipeline().num_stages();
  expect.hidden_shape = {spec.pipeline().micro_batch_size(), spec.model().seq_len(),
                         spec.model().d_model()};
  // Hidden states travel in each stage's link dtype: float32 for fp32,
  // bfloat16 for either bf16 precision, either where `auto` resolves per stage.
  const std::string& precision = spec.runtime().precision();
  if (precision == "bf16-weights" || precision == "bf16-autocast") {
    expect.dtypes = {v1::DTYPE_BFLOAT16};
  } else if (precision != "fp32") {
    expect.dtypes = {v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16};
  }
  absl::StatusOr<PartitionPlan> plan = PlanPartition(spec);
  if (plan.ok()) expect.head_rows = plan->head_split;
  return expect;
}

}  // namespace

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
  if (absl::Status fits = CheckFits(assignment_); !fits.ok()) return Fail(fits);
  if (const int64_t frame = LargestLinkMessageBytes(spec);
      frame > options_.max_link_message_bytes) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "the job's stage link frames take up to ", frame, " bytes (pipeline.micro_batch_size x "
        "model.seq_len x model.d_model x 4, and the frame), more than this worker's "
        "--max_link_message_bytes ", options_.max_link_message_bytes)));
  }
  torch::set_num_threads(spec.runtime().threads_per_stage());
  absl::StatusOr<std::optional<Corpus>> corpus = LoadCorpus(assignment_);
  if (!corpus.ok()) return Fail(corpus.status());
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(spec.pipeline().schedule());
  if (!kind.ok()) return Fail(kind.status());

  absl::StatusOr<std::unique_ptr<ReplicaGroup>> replicas = JoinReplicas(assignment_, options_);
  if (!replicas.ok()) return Fail(replicas.status());

  const LinkExpectations expect = ExpectationsOf(assignment_);
  auto inbox = std::make_shared<Inbox>(64);
  links_.Attach(expect, inbox);
  StageMetrics metrics(registry_, spec.name(), stage, assignment_.replica(), P,
                       DriftBound(*kind, P, stage, spec.pipeline().accumulation()),
                       DriftLimit(spec.pipeline()));
  const std::unique_ptr<PeerSender> previous = OpenLink(stage - 1, inbox);
  const std::unique_ptr<PeerSender> next = OpenLink(stage + 1, inbox);
  std::unique_ptr<SpanRecorder> spans;
  if (spec.runtime().trace_max_spans() > 0) {
    spans = std::make_unique<SpanRecorder>(spec.runtime().trace_max_spans());
  }
  StageRuntimeOptions runtime_options;
  runtime_options.spec = spec;
  runtime_options.stage = stage;
  runtime_options.corpus = corpus->has_value() ? &**corpus : nullptr;
  runtime_options.inbox = inbox.get();
  runtime_options.previous = previous.get();
  runtime_options.next = next.get();
  runtime_options.spans = spans.get();
  runtime_options.link_id = expect.job_name;
  runtime_options.nccl_previous = NcclWithPeer(assignment_, stage - 1);
  runtime_options.nccl_next = NcclWithPeer(assignment_, stage + 1);
  runtime_options.gradient_sync = replicas->get();
  StageRuntime runtime(std::move(runtime_options), metrics);
  const absl::Status status = RunReporting(runtime);
  inbox->Close();
  v1::StageReport final_report = Report(runtime);
  if (!status.ok()) {
    final_report.set_error(std::string(status.message()));
    final_report.set_error_code(static_cast<int>(status.code()));
  }
  if (sink_) sink_->Deliver(final_report);
  return status;
}

absl::Status StageHost::Fail(const absl::Status& status) {
  v1::StageReport failure;
  failure.set_job_name(assignment_.spec().name());
  failure.set_stage(assignment_.stage());
  failure.set_replica(assignment_.replica());
  failure.set_attempt(assignment_.attempt());
  failure.set_error(std::string(status.message()));
  failure.set_error_code(static_cast<int>(status.code()));
  if (sink_) sink_->Deliver(failure);
  return status;
}

std::unique_ptr<PeerSender> StageHost::OpenLink(int peer,
                                                const std::shared_ptr<Inbox>& inbox) const {
  if (peer < 0 || peer >= assignment_.spec().pipeline().num_stages()) return nullptr;
  auto sender = std::make_unique<PeerSender>(
      PeerSender::Options{assignment_.stage_addresses(peer), absl::StrCat("stage ", peer), 16,
                          absl::Seconds(60), options_.link_credentials,
                          options_.link_tls_server_name, assignment_.link_secret(),
                          RunId(assignment_.spec().name(), assignment_.attempt())},
      [inbox](absl::Status status) { inbox->Fail(std::move(status)); });
  sender->Start();
  return sender;
}

absl::Status StageHost::RunReporting(StageRuntime& runtime) {
  {
    absl::MutexLock lock(&mu_);
    runtime_ = &runtime;
  }
  if (cancelled_.load()) runtime.Cancel();
  absl::Notification stop_reporting;
  std::thread reporter([&] {
    while (sink_ && !stop_reporting.WaitForNotificationWithTimeout(options_.report_interval)) {
      sink_->Deliver(Report(runtime));
    }
  });
  absl::Status status = runtime.Init();
  if (status.ok()) status = runtime.Run();
  stop_reporting.Notify();
  reporter.join();
  absl::MutexLock lock(&mu_);
  runtime_ = nullptr;
  return status;
}

v1::StageReport StageHost::Report(StageRuntime& runtime) const {
  v1::StageReport report = runtime.TakeReport();  // with the spans recorded since the last
  report.set_attempt(assignment_.attempt());
  return report;
}

}  // namespace paci
