#include "worker/runtime/stage_runtime.h"

#include <sys/resource.h>

#include <cmath>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "worker/model/partition.h"
#include "worker/model/gpt_weights.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/checkpoint_layout.h"
#include "worker/runtime/checkpoint_reader.h"
#include "worker/transport/tensor_codec.h"

namespace paci {
namespace {

GptConfig ModelConfig(const v1::ModelSpec& m) {
  GptConfig c;
  c.vocab_size = m.vocab_size();
  c.num_layers = m.num_layers();
  c.d_model = m.d_model();
  c.num_heads = m.num_heads();
  c.seq_len = m.seq_len();
  c.dropout = m.dropout();
  c.init_seed = m.init_seed();
  return c;
}

// The model shapes of this job and of a checkpoint differ: the first field
// that does, named as the spec names it.
std::optional<std::string> ShapeDifference(const GptConfig& job, const GptConfig& source) {
  const std::pair<const char*, std::pair<int, int>> fields[] = {
      {"model.vocab_size", {job.vocab_size, source.vocab_size}},
      {"model.num_layers", {job.num_layers, source.num_layers}},
      {"model.d_model", {job.d_model, source.d_model}},
      {"model.num_heads", {job.num_heads, source.num_heads}},
      {"model.seq_len", {job.seq_len, source.seq_len}}};
  for (const auto& [field, values] : fields) {
    if (values.first != values.second) {
      return absl::StrCat(field, " is ", values.second, " there, ", values.first, " here");
    }
  }
  return std::nullopt;
}

int64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace

StageRuntime::StageRuntime(const v1::JobSpec& spec, int stage, const Corpus* corpus, Inbox& inbox,
                           FrameSender* previous, FrameSender* next, StageMetrics& metrics,
                           SpanRecorder* spans, std::string link_id)
    : spec_(spec),
      stage_(stage),
      num_stages_(spec.pipeline().num_stages()),
      first_(stage == 0),
      last_(stage == spec.pipeline().num_stages() - 1),
      corpus_(corpus),
      inbox_(inbox),
      previous_(previous),
      next_(next),
      metrics_(metrics),
      spans_(spans),
      link_id_(std::move(link_id)) {
  lr_.peak_lr = spec.optimizer().lr();
  lr_.total_steps = spec.training().steps();
  lr_.warmup_fraction = spec.optimizer().warmup_fraction();
  lr_.min_lr_ratio = spec.optimizer().min_lr_ratio();
  const std::string& correction = spec.pipeline().drift_correction();
  staleness_correction_ = correction == "staleness";
  if (correction == "stage-lr") {
    const int64_t bound = DriftBound(ScheduleKind::kPaci, num_stages_, stage_,
                                     spec.pipeline().accumulation());
    lr_factor_ = 1.0 / std::sqrt(1.0 + static_cast<double>(bound));
  }
  absl::MutexLock lock(&mu_);
  report_.set_job_name(spec_.name());
  report_.set_stage(stage_);
}

void StageRuntime::UseReplicas(ReplicaGroup* group) {
  replicas_ = group;
  replica_ = group->replica();
  num_replicas_ = group->num_replicas();
  absl::MutexLock lock(&mu_);
  report_.set_replica(replica_);
}

absl::Status StageRuntime::Init() {
  ASSIGN_OR_RETURN(placement_, ResolvePlacement(StageDevice(spec_, stage_, replica_),
                                                spec_.runtime().precision()));
  const GptConfig config = ModelConfig(spec_.model());
  // Dropout masks differ per stage and replica (the weights are initialised
  // per name, whatever the seed).
  torch::manual_seed(config.init_seed + stage_ + 7919 * replica_);
  // Every stage computes the same plan from the same spec (a pure function of
  // the shapes, no measurement), so the cut needs no agreement protocol.
  ASSIGN_OR_RETURN(const PartitionPlan plan, PlanPartition(spec_));
  const StagePartition partition = plan.Stage(stage_);
  LOG(INFO) << "job=" << spec_.name() << " stage " << stage_ << " partition=" << plan.mode
            << " cut=" << absl::StrJoin(plan.boundaries, ",") << ": units "
            << partition.Describe() << ", predicted share of the cost "
            << absl::StrFormat("%.3f", plan.cost_share[stage_]);
  {
    absl::MutexLock lock(&mu_);
    report_.set_partition_units(partition.Describe());
    report_.set_predicted_cost_share(plan.cost_share[stage_]);
  }
  model_ = GptStage(config, partition);
  // Initialised on the CPU (the same weights wherever it runs), then moved.
  model_->to(placement_.device);
  if (placement_.weight_dtype() != torch::kFloat) {
    // The weights only: buffers such as the causal mask keep their type.
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model_->parameters()) p.set_data(p.data().to(placement_.weight_dtype()));
  }
  model_->train();
  // Before AdamW: its float32 master weights (bf16-weights) copy what is there.
  RETURN_IF_ERROR(InitFromSource());
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& item : model_->named_parameters()) params.emplace_back(item.key(), item.value());
  AdamWOptions adamw;
  adamw.beta1 = spec_.optimizer().beta1();
  adamw.beta2 = spec_.optimizer().beta2();
  adamw.eps = spec_.optimizer().eps();
  adamw.weight_decay = spec_.optimizer().weight_decay();
  optimizer_ = std::make_unique<AdamW>(std::move(params), adamw);

  RETURN_IF_ERROR(ConnectNccl());
  RETURN_IF_ERROR(RestoreCheckpoint());
  if (start_step_ > spec_.training().steps()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.steps: the checkpoint is at step ", start_step_, ", past the ",
        spec_.training().steps(), " steps asked for"));
  }

  StageSchedulerOptions o;
  ASSIGN_OR_RETURN(o.schedule, ParseScheduleKind(spec_.pipeline().schedule()));
  o.num_stages = num_stages_;
  o.stage = stage_;
  o.accumulation = spec_.pipeline().accumulation();
  o.total_steps = spec_.training().steps();
  o.start_step = start_step_;
  o.eval_interval = spec_.training().eval_interval();
  const auto& ckpt = spec_.checkpoint();
  o.checkpoint_interval = ckpt.directory().empty() ? 0 : ckpt.interval();
  scheduler_ = std::make_unique<StageScheduler>(o);

  absl::MutexLock lock(&mu_);
  report_.set_drift_bound(scheduler_->drift_bound());
  report_.set_optimizer_steps(start_step_);
  return absl::OkStatus();
}

absl::Status StageRuntime::RestoreCheckpoint() {
  const auto& ckpt = spec_.checkpoint();
  if (!ckpt.directory().empty()) {
    ASSIGN_OR_RETURN(std::optional<int64_t> latest,
                     LatestCompleteStep(ckpt.directory(), num_stages_));
    if (ckpt.resume() && latest) {  // this job's own checkpoint wins over init_from
      ShardMeta expected;
      expected.stage = stage_;
      expected.num_stages = num_stages_;
      expected.model_fingerprint = model_->Fingerprint();
      const std::string path = ShardPath(ckpt.directory(), *latest, stage_, num_stages_);
      ASSIGN_OR_RETURN(ShardMeta meta, LoadShard(path, expected, model_, *optimizer_));
      start_step_ = meta.step;
      sample_base_ = meta.next_micro_batch;
      LOG(INFO) << "stage " << stage_ << " resumed from " << path << " at step " << start_step_;
      return absl::OkStatus();
    }
    if (!ckpt.resume() && HoldsCheckpoints(ckpt.directory())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint.directory: ", ckpt.directory(),
          " already holds checkpoints; set checkpoint.resume: true to continue from the latest, "
          "or choose another directory (nothing was overwritten)"));
    }
  }
  return absl::OkStatus();
}

absl::Status StageRuntime::InitFromSource() {
  const auto& ckpt = spec_.checkpoint();
  if (ckpt.init_from().empty()) return absl::OkStatus();
  if (ckpt.resume() && !ckpt.directory().empty()) {  // this job's own checkpoint wins
    ASSIGN_OR_RETURN(std::optional<int64_t> latest,
                     LatestCompleteStep(ckpt.directory(), num_stages_));
    if (latest) return absl::OkStatus();
  }
  // Fine-tuning: the weights by name from a checkpoint of any cut; the
  // optimizer stays fresh and the job starts at step 0.
  absl::StatusOr<ModelCheckpoint> source = ReadCheckpoint(ckpt.init_from());
  if (!source.ok()) {
    return absl::Status(source.status().code(),
                        absl::StrCat("checkpoint.init_from: ", source.status().message()));
  }
  const std::string where =
      absl::StrCat("checkpoint.init_from: ", ckpt.init_from(), " (step ", source->step, ")");
  if (auto difference = ShapeDifference(ModelConfig(spec_.model()), source->config)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " holds a model of another shape: ", *difference));
  }
  RETURN_IF_ERROR(CopyWeightsByName(source->parameters, where, *model_));
  if (first_ && corpus_ != nullptr && source->tokenizer->Id() != corpus_->tokenizer().Id()) {
    LOG(WARNING) << where << " was trained with another tokenizer than this job's data: "
                 << "its token ids mean other text";
  }
  LOG(INFO) << "stage " << stage_ << " starts from the weights of " << where;
  return absl::OkStatus();
}

absl::Status StageRuntime::Run() {
  started_ = absl::Now();
  absl::Status status;
  try {
    status = Loop();
  } catch (const c10::Error& e) {
    status = absl::InternalError(
        absl::StrCat("stage ", stage_, ": torch error: ", e.what_without_backtrace()));
  }
  if (!status.ok()) inbox_.Close();
  absl::MutexLock lock(&mu_);
  report_.set_peak_rss_bytes(PeakRssBytes());
  return status;
}

void StageRuntime::Mark(v1::Span::Kind kind, std::optional<uint64_t> micro_batch_id,
                        std::optional<int64_t> step) {
  const absl::Time now = absl::Now();
  const double seconds = absl::ToDoubleSeconds(now - span_start_);
  if (spans_ != nullptr) spans_->Record(kind, span_start_, now, micro_batch_id, step);
  span_start_ = now;
  const bool idle = kind == v1::Span::IDLE;
  if (idle) {
    metrics_.AddIdle(seconds);
  } else {
    metrics_.AddBusy(seconds);
  }
  absl::MutexLock lock(&mu_);
  if (idle) {
    report_.set_idle_seconds(report_.idle_seconds() + seconds);
  } else {
    report_.set_busy_seconds(report_.busy_seconds() + seconds);
  }
}

double StageRuntime::SecondsSinceStart() const {
  return absl::ToDoubleSeconds(absl::Now() - started_);
}

absl::Status StageRuntime::Loop() {
  span_start_ = absl::Now();
  while (true) {
    RETURN_IF_ERROR(inbox_.failure());
    if (cancelled_.load()) return absl::CancelledError("the job was cancelled");
    if (!first_) {
      auto kind = inbox_.PeekKind(Inbox::From::kPrevious);
      if (kind && *kind != v1::TensorFrame::ACTIVATION) {
        const bool shutdown = *kind == v1::TensorFrame::SHUTDOWN;
        RETURN_IF_ERROR(HandleControl(*inbox_.Pop(Inbox::From::kPrevious)));
        if (shutdown) return absl::OkStatus();
        continue;
      }
    }
    const bool has_gradient = inbox_.PeekKind(Inbox::From::kNext).has_value();
    const bool has_activation =
        inbox_.PeekKind(Inbox::From::kPrevious) == v1::TensorFrame::ACTIVATION;
    // Each action ends its own spans (Mark); the checks above belong to it.
    switch (scheduler_->Next(has_gradient, has_activation)) {
      case StageAction::kBackward:
        RETURN_IF_ERROR(Backward());
        break;
      case StageAction::kForward:
        RETURN_IF_ERROR(Forward());
        break;
      case StageAction::kDrained:
        RETURN_IF_ERROR(HandleDrained());
        break;
      case StageAction::kDone:
        return Finish();
      case StageAction::kWait:
        inbox_.Wait(absl::Milliseconds(100));
        Mark(v1::Span::IDLE);
        break;
    }
  }
}

absl::Status StageRuntime::ConnectNccl() {
  const int device = placement_.device.is_cuda() ? placement_.device.index() : -1;
  if ((nccl_previous_wanted_ || nccl_next_wanted_) && device < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage_, ": NCCL links need a CUDA device, runtime.device is cpu"));
  }
  if (nccl_previous_wanted_) {
    std::optional<v1::TensorFrame> frame = inbox_.Pop(Inbox::From::kPrevious);
    if (!frame || frame->kind() != v1::TensorFrame::NCCL_IDS) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage_, ": stage ", stage_ - 1, " did not open the NCCL link (no NCCL_IDS)"));
    }
    ASSIGN_OR_RETURN(nccl_previous_, NcclLink::Connect(frame->data(), false, device));
    LOG(INFO) << "stage " << stage_ << ": NCCL link to stage " << stage_ - 1;
  }
  if (nccl_next_wanted_) {
    ASSIGN_OR_RETURN(std::string ids, NcclLink::NewIds());
    v1::TensorFrame frame;
    frame.set_kind(v1::TensorFrame::NCCL_IDS);
    frame.set_job_name(link_id_);
    frame.set_from_stage(stage_);
    frame.set_data(ids);
    next_->Send(std::move(frame));
    ASSIGN_OR_RETURN(nccl_next_, NcclLink::Connect(ids, true, device));
    LOG(INFO) << "stage " << stage_ << ": NCCL link to stage " << stage_ + 1;
  }
  return absl::OkStatus();
}

namespace {
NcclDType NcclTypeOf(torch::ScalarType type) {
  return type == torch::kBFloat16 ? NcclDType::kBFloat16
         : type == torch::kFloat16 ? NcclDType::kFloat16
                                   : NcclDType::kFloat32;
}
}  // namespace

absl::StatusOr<torch::Tensor> StageRuntime::Incoming(const v1::TensorFrame& frame) {
  if (!frame.payload_on_nccl()) return ToDevice(DecodeTensor(frame, placement_.device.is_cuda()));
  NcclLink* link =
      frame.kind() == v1::TensorFrame::GRADIENT ? nccl_next_.get() : nccl_previous_.get();
  if (link == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage_, ": a ", v1::TensorFrame::Kind_Name(frame.kind()),
        " frame says its tensor comes over NCCL, but this link has no NCCL"));
  }
  std::vector<int64_t> shape(frame.shape().begin(), frame.shape().end());
  torch::Tensor tensor = torch::empty(
      shape, torch::TensorOptions().dtype(WireScalarType(frame.dtype())).device(placement_.device));
  RETURN_IF_ERROR(link->Receive(tensor.data_ptr(), tensor.numel(), NcclTypeOf(tensor.scalar_type())));
  return tensor;
}

torch::Tensor StageRuntime::Loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return LanguageModelLoss(logits.to(torch::kFloat), targets);  // in float32 whatever the weights
}

std::pair<torch::Tensor, torch::Tensor> StageRuntime::Tokens(
    const std::vector<int32_t>& windows) const {
  const int64_t B = spec_.pipeline().micro_batch_size(), T = spec_.model().seq_len();
  auto all = ToDevice(
      torch::from_blob(const_cast<int32_t*>(windows.data()), {B, T + 1}, torch::kInt32)
          .to(torch::kLong));
  using torch::indexing::Slice;
  return {all.index({Slice(), Slice(0, T)}), all.index({Slice(), Slice(1, T + 1)})};
}

torch::Tensor StageRuntime::ToDevice(const torch::Tensor& host) const {
  if (!placement_.device.is_cuda()) return host.to(placement_.device);
  // pin_memory() returns a tensor that is pinned already as it is; the
  // pinned block is not reused before the copy has read it.
  return host.pin_memory().to(placement_.device, /*non_blocking=*/true);
}

void StageRuntime::Send(FrameSender* to, v1::TensorFrame::Kind kind, uint64_t micro_batch_id,
                        const torch::Tensor* tensor, int64_t step) {
  v1::TensorFrame frame;
  frame.set_kind(kind);
  frame.set_job_name(link_id_);
  frame.set_from_stage(stage_);
  frame.set_micro_batch_id(micro_batch_id);
  frame.set_weight_version(scheduler_->version());
  frame.set_step(step);
  NcclLink* link = to == next_ ? nccl_next_.get() : nccl_previous_.get();
  int64_t bytes = 0;
  if (tensor && link != nullptr) {
    // Let go of tensors whose sends are done, then queue this one.
    while (!nccl_sends_.empty() && nccl_sends_.front().link->Done(nccl_sends_.front().ticket)) {
      nccl_sends_.pop_front();
    }
    torch::Tensor payload = tensor->detach().contiguous();
    DescribeTensor(payload, &frame);
    absl::StatusOr<uint64_t> ticket =
        link->Send(payload.data_ptr(), payload.numel(), NcclTypeOf(payload.scalar_type()));
    if (!ticket.ok()) {
      inbox_.Fail(ticket.status());
      return;
    }
    nccl_sends_.push_back({link, *ticket, payload});
    bytes = payload.numel() * payload.element_size();
  } else if (tensor) {
    EncodeTensor(*tensor, &frame);
    bytes = frame.data().size();
  }
  if (to->Send(std::move(frame))) {
    metrics_.AddBytesSent(to == next_, bytes);
    absl::MutexLock lock(&mu_);
    report_.set_bytes_sent(report_.bytes_sent() + bytes);
  }
}

absl::Status StageRuntime::Forward() {
  uint64_t id;
  torch::Tensor input;
  if (first_) {
    id = scheduler_->next_micro_batch();
    input = Tokens(corpus_->TrainingWindows(SampleId(id))).first;
  } else {
    v1::TensorFrame frame = *inbox_.Pop(Inbox::From::kPrevious);
    id = frame.micro_batch_id();
    ASSIGN_OR_RETURN(input, Incoming(frame));
    input.requires_grad_(true);
  }
  RETURN_IF_ERROR(scheduler_->OnForward(id));
  torch::Tensor output;
  {
    AutocastScope autocast(placement_);
    output = model_(input);
    if (last_) output = Loss(output, Tokens(corpus_->TrainingWindows(SampleId(id))).second);
  }
  if (last_) {
    Mark(v1::Span::FORWARD, id);
  } else {
    Mark(v1::Span::FORWARD, id);
    Send(next_, v1::TensorFrame::ACTIVATION, id, &output);
    Mark(v1::Span::SEND, id);
  }
  pending_.push_back({id, input, output});
  metrics_.AddForward();
  absl::MutexLock lock(&mu_);
  report_.set_forward_micro_batches(scheduler_->forwards());
  return absl::OkStatus();
}

void StageRuntime::ScaleGradients(double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, parameter] : optimizer_->parameters()) {
    if (parameter.grad().defined()) parameter.grad().mul_(factor);
  }
}

absl::Status StageRuntime::Backward() {
  uint64_t id = scheduler_->oldest_in_flight();
  torch::Tensor grad;
  if (!last_) {
    v1::TensorFrame frame = *inbox_.Pop(Inbox::From::kNext);
    id = frame.micro_batch_id();
    ASSIGN_OR_RETURN(grad, Incoming(frame));
  }
  ASSIGN_OR_RETURN(BackwardResult result, scheduler_->OnBackward(id));
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  // pipeline.drift_correction "staleness": this micro-batch's share of the stage's gradient
  // is weighted 1/(1+drift). The sum so far is divided by the weight before the backward
  // and all of it multiplied after: G + w g, with no copy of G.
  const double weight =
      staleness_correction_ ? 1.0 / (1.0 + static_cast<double>(result.drift)) : 1.0;
  if (weight != 1.0) ScaleGradients(1.0 / weight);
  if (last_) {
    const torch::Tensor loss = p.output.detach().to(torch::kDouble);
    step_loss_sum_ = step_loss_sum_.defined() ? step_loss_sum_ + loss : loss;
    (p.output / scheduler_->accumulation()).backward();
  } else {
    p.output.backward(grad);
  }
  if (weight != 1.0) ScaleGradients(weight);
  Mark(v1::Span::BACKWARD, id);
  if (!first_) {
    torch::Tensor input_grad = p.input.grad();
    Send(previous_, v1::TensorFrame::GRADIENT, id, &input_grad);
    Mark(v1::Span::SEND, id);
  }
  const int64_t tokens = spec_.pipeline().micro_batch_size() * spec_.model().seq_len();
  metrics_.ObserveDrift(result.drift);
  metrics_.AddBackward(tokens);
  std::optional<double> step_loss;
  if (result.step_now) {
    ASSIGN_OR_RETURN(step_loss, StepOptimizer());
  }
  absl::MutexLock lock(&mu_);
  report_.set_backward_micro_batches(scheduler_->backwards());
  report_.set_optimizer_steps(scheduler_->version());
  report_.set_weights_hash(weights_hash_);
  report_.set_drift_max(std::max(report_.drift_max(), result.drift));
  report_.set_drift_sum(report_.drift_sum() + result.drift);
  report_.set_drift_count(report_.drift_count() + 1);
  report_.set_tokens(report_.tokens() + tokens);
  if (step_loss && replica_ == 0) {  // every replica's loss is the same mean
    auto* point = report_.add_train_loss();
    point->set_step(scheduler_->version());
    point->set_loss(*step_loss);
    point->set_seconds(SecondsSinceStart());
  }
  return absl::OkStatus();
}

double StageRuntime::GradientNorm() const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& [name, parameter] : optimizer_->parameters()) {
    if (!parameter.grad().defined()) continue;
    // In double, so that large finite gradients do not overflow to Inf.
    norms.push_back(
        at::linalg_vector_norm(parameter.grad(), 2, c10::nullopt, false, torch::kDouble));
  }
  if (norms.empty()) return 0;
  // One read of the device per step, not one per parameter.
  return torch::stack(norms).norm().item<double>();
}

uint64_t StageRuntime::SampleId(uint64_t micro_batch_id) const {
  const uint64_t first = static_cast<uint64_t>(start_step_) * spec_.pipeline().accumulation();
  return sample_base_ + (micro_batch_id - first) * num_replicas_ + replica_;
}

absl::Status StageRuntime::AverageOverReplicas(int64_t step) {
  if (replicas_ == nullptr) return absl::OkStatus();
  std::vector<torch::Tensor> tensors;
  for (const auto& [name, parameter] : optimizer_->parameters()) {
    if (parameter.grad().defined()) tensors.push_back(parameter.grad());
  }
  if (last_) tensors.push_back(step_loss_sum_);
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(replicas_->Average(tensors));
  metrics_.ObserveAllReduce(absl::ToDoubleSeconds(absl::Now() - start));
  Mark(v1::Span::ALL_REDUCE, std::nullopt, step);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<double>> StageRuntime::StepOptimizer() {
  const int64_t step = scheduler_->version();  // already advanced
  // Replicas first: the guard, the clipping and AdamW then see the same
  // gradients on every replica and leave the same weights.
  RETURN_IF_ERROR(AverageOverReplicas(step));
  // The guard and optimizer.clip_norm look at this stage's gradients only: no
  // stage waits for another's norm (docs/design.md, "Training safety").
  const double norm = GradientNorm();
  metrics_.SetGradientNorm(norm);
  if (!std::isfinite(norm)) {
    metrics_.AddNonfiniteSkip();
    absl::MutexLock lock(&mu_);
    report_.set_nonfinite_steps_skipped(report_.nonfinite_steps_skipped() + 1);
    LOG(WARNING) << "job=" << spec_.name() << " stage " << stage_ << " step " << step
                 << ": the gradients hold NaN or Inf; step skipped, weights unchanged";
  } else {
    const double clip = spec_.optimizer().clip_norm();
    if (clip > 0 && norm > clip) ScaleGradients(clip / norm);
    optimizer_->Step(LearningRateAt(lr_, step - 1) * lr_factor_);
  }
  optimizer_->ZeroGrad();
  if (replicas_ != nullptr) {
    std::vector<torch::Tensor> weights;
    for (const auto& [name, parameter] : optimizer_->parameters()) weights.push_back(parameter);
    weights_hash_ = HashTensors(weights, weights_hash_);  // reported with the step
  }
  Mark(v1::Span::OPTIMIZER_STEP, std::nullopt, step);
  metrics_.AddOptimizerStep();
  if (!last_) return std::nullopt;
  // The one read of the step's loss, after all of its work is queued.
  const double loss = step_loss_sum_.item<double>() / scheduler_->accumulation();
  step_loss_sum_ = torch::Tensor();
  nonfinite_losses_ = std::isfinite(loss) ? 0 : nonfinite_losses_ + 1;
  const int64_t limit = spec_.training().max_nonfinite_steps();
  if (limit > 0 && nonfinite_losses_ >= limit) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.max_nonfinite_steps: the training loss was NaN or Inf for ", nonfinite_losses_,
        " optimizer steps in a row (steps ", step - nonfinite_losses_ + 1, " to ", step,
        "); a lower optimizer.lr or an optimizer.clip_norm may help"));
  }
  return loss;
}

bool StageRuntime::EvalDue(int64_t step) const {
  if (replica_ != 0) return false;  // the replicas hold the same weights
  const int64_t interval = spec_.training().eval_interval();
  return step == spec_.training().steps() || (interval > 0 && step % interval == 0);
}

bool StageRuntime::CheckpointDue(int64_t step) const {
  const auto& c = spec_.checkpoint();
  if (c.directory().empty() || step == start_step_ || replica_ != 0) return false;
  return step == spec_.training().steps() || (c.interval() > 0 && step % c.interval() == 0);
}

absl::Status StageRuntime::HandleDrained() {
  // Stage 0 with the pipe empty: every stage has taken exactly `step` steps.
  const int64_t step = scheduler_->drained_step();
  if (EvalDue(step) && step != start_step_) {
    torch::NoGradGuard no_grad;
    AutocastScope autocast(placement_);
    model_->eval();
    for (int j = 0; j < spec_.training().eval_micro_batches(); ++j) {
      auto [inputs, targets] = Tokens(corpus_->ValidationWindows(j));
      torch::Tensor output = model_(inputs);
      if (last_) {
        eval_loss_sum_ += Loss(output, targets).item<double>();
      } else {
        Send(next_, v1::TensorFrame::EVAL_ACTIVATION, j, &output, step);
      }
    }
    model_->train();
    if (last_) {
      RecordValidation(step, eval_loss_sum_ / spec_.training().eval_micro_batches());
      eval_loss_sum_ = 0;
    }
    Mark(v1::Span::EVAL, std::nullopt, step);
  }
  if (CheckpointDue(step)) {
    RETURN_IF_ERROR(SaveCheckpoint(step));
    if (next_) Send(next_, v1::TensorFrame::CHECKPOINT, 0, nullptr, step);
    Mark(v1::Span::CHECKPOINT, std::nullopt, step);
  }
  scheduler_->OnDrainHandled();
  return absl::OkStatus();
}

void StageRuntime::RecordValidation(int64_t step, double loss) {
  LOG(INFO) << "job=" << spec_.name() << " step=" << step << " validation_loss=" << loss;
  absl::MutexLock lock(&mu_);
  auto* point = report_.add_validation_loss();
  point->set_step(step);
  point->set_loss(loss);
  point->set_seconds(SecondsSinceStart());
}

absl::Status StageRuntime::HandleControl(v1::TensorFrame frame) {
  if (scheduler_->in_flight() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage_, ": ", v1::TensorFrame::Kind_Name(frame.kind()), " arrived with ",
        scheduler_->in_flight(), " micro-batches in flight; it must come at a drained point"));
  }
  switch (frame.kind()) {
    case v1::TensorFrame::EVAL_ACTIVATION: {
      const absl::Status status = EvalForward(frame);
      Mark(v1::Span::EVAL, std::nullopt, frame.step());
      return status;
    }
    case v1::TensorFrame::CHECKPOINT:
      if (frame.step() != scheduler_->version()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "stage ", stage_, ": CHECKPOINT for step ", frame.step(), " but this stage is at step ",
            scheduler_->version()));
      }
      RETURN_IF_ERROR(SaveCheckpoint(frame.step()));
      if (next_) Send(next_, v1::TensorFrame::CHECKPOINT, 0, nullptr, frame.step());
      Mark(v1::Span::CHECKPOINT, std::nullopt, frame.step());
      return absl::OkStatus();
    case v1::TensorFrame::SHUTDOWN:
      return Finish();
    default:
      return absl::InvalidArgumentError("unexpected control frame");
  }
}

absl::Status StageRuntime::EvalForward(const v1::TensorFrame& frame) {
  ASSIGN_OR_RETURN(torch::Tensor input, Incoming(frame));
  torch::NoGradGuard no_grad;
  AutocastScope autocast(placement_);
  model_->eval();
  torch::Tensor output = model_(input);
  model_->train();
  if (!last_) {
    Send(next_, v1::TensorFrame::EVAL_ACTIVATION, frame.micro_batch_id(), &output, frame.step());
    return absl::OkStatus();
  }
  const auto targets = Tokens(corpus_->ValidationWindows(frame.micro_batch_id())).second;
  eval_loss_sum_ += Loss(output, targets).item<double>();
  if (++eval_seen_ == spec_.training().eval_micro_batches()) {
    RecordValidation(frame.step(), eval_loss_sum_ / eval_seen_);
    eval_loss_sum_ = 0;
    eval_seen_ = 0;
  }
  return absl::OkStatus();
}

absl::Status StageRuntime::SaveCheckpoint(int64_t step) {
  ShardMeta meta;
  meta.job_name = spec_.name();
  meta.stage = stage_;
  meta.num_stages = num_stages_;
  meta.model_fingerprint = model_->Fingerprint();
  meta.step = step;
  // The samples every replica consumed: a resume on another R reads on after them.
  meta.next_micro_batch = sample_base_ + static_cast<uint64_t>(step - start_step_) *
                                             scheduler_->accumulation() * num_replicas_;
  // Stage 0's shard says how to turn text into the model's tokens and back.
  if (first_ && corpus_ != nullptr) meta.tokenizer = corpus_->tokenizer().Serialize();
  const std::string path = ShardPath(spec_.checkpoint().directory(), step, stage_, num_stages_);
  RETURN_IF_ERROR(SaveShard(path, meta, model_, *optimizer_));
  metrics_.AddCheckpoint();
  absl::MutexLock lock(&mu_);
  report_.add_checkpoints(path);
  report_.add_checkpoint_steps(step);
  return absl::OkStatus();
}

absl::Status StageRuntime::Finish() {
  // Closing the inbox first makes the neighbours' streams end as orderly.
  inbox_.Close();
  if (next_) Send(next_, v1::TensorFrame::SHUTDOWN, 0, nullptr);
  absl::Status status;
  for (FrameSender* sender : {next_, previous_}) {
    if (sender == nullptr) continue;
    absl::Status closed = sender->Close(absl::Seconds(60));
    if (status.ok()) status = closed;
  }
  absl::MutexLock lock(&mu_);
  report_.set_finished(status.ok());
  LOG(INFO) << "job=" << spec_.name() << " stage " << stage_ << " units "
            << report_.partition_units() << ": busy "
            << absl::StrFormat("%.2f", report_.busy_seconds()) << " s, idle "
            << absl::StrFormat("%.2f", report_.idle_seconds()) << " s, predicted share "
            << absl::StrFormat("%.3f", report_.predicted_cost_share());
  return status;
}

v1::StageReport StageRuntime::TakeReport() {
  absl::MutexLock lock(&mu_);
  v1::StageReport report = report_;
  report_.clear_train_loss();
  report_.clear_validation_loss();
  report_.clear_checkpoints();
  report_.clear_checkpoint_steps();
  if (spans_ != nullptr) {
    for (v1::Span& span : spans_->Take()) *report.add_spans() = std::move(span);
    report.set_spans_dropped(spans_->dropped());
  }
  report.set_peak_rss_bytes(PeakRssBytes());
  return report;
}

}  // namespace paci
