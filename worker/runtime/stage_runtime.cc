#include "worker/runtime/stage_runtime.h"

#include <cmath>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "worker/model/precision.h"

namespace paci {
namespace {

ReplicaRole RoleOf(const GradientSync* group) {
  if (group == nullptr) return ReplicaRole{};
  return ReplicaRole{group->replica(), group->num_replicas()};
}

// How long the stage before the last waits, before a backward, for the
// HEAD_INPUT the last stage is about to send: its hand-over and, once an
// accumulation, its optimizer step (16 ms at vocabulary 32,768).
constexpr absl::Duration kHeadInputWait = absl::Milliseconds(50);

}  // namespace

StageRuntime::StageRuntime(StageRuntimeOptions options, StageMetrics& metrics)
    : options_(std::move(options)),
      spec_(options_.spec),
      stage_(options_.stage),
      first_(stage_ == 0),
      last_(stage_ == spec_.pipeline().num_stages() - 1),
      role_(RoleOf(options_.gradient_sync)),
      stats_(metrics, spec_.name(), stage_, role_.replica),
      channel_(StageChannel::Options{stage_, options_.link_id, options_.inbox, options_.previous,
                                     options_.next, options_.nccl_previous, options_.nccl_next},
               stats_),
      checkpointer_(spec_, stage_,
                    first_ && options_.corpus != nullptr ? &options_.corpus->tokenizer()
                                                         : nullptr) {}

absl::Status StageRuntime::Init() {
  ASSIGN_OR_RETURN(std::optional<StageCheckpointer::Source> source,
                   checkpointer_.InitialWeights());
  ASSIGN_OR_RETURN(model_, StageModel::Create(spec_, stage_, role_.replica,
                                              source ? &source->checkpoint.parameters : nullptr,
                                              source ? source->name : ""));
  stats_.SetPartition(model_->units(), model_->predicted_cost_share());
  stats_.SetPrecision(PrecisionName(model_->placement().precision), model_->placement().note);
  head_shard_ = model_->module()->partition().has_head_shard();
  split_last_ = last_ && model_->module()->partition().head_split();
  if (head_shard_ && options_.corpus == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage_, " computes the head's first rows and needs the corpus for their targets"));
  }
  RETURN_IF_ERROR(channel_.Connect(model_->placement()));
  ASSIGN_OR_RETURN(const StageCheckpointer::Start start, checkpointer_.Restore(*model_));
  start_step_ = start.step;
  sample_base_ = start.samples;
  if (start_step_ > spec_.training().steps()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.steps: the checkpoint is at step ", start_step_, ", past the ",
        spec_.training().steps(), " steps asked for"));
  }

  StageSchedulerOptions o;
  ASSIGN_OR_RETURN(o.schedule, ParseScheduleKind(spec_.pipeline().schedule()));
  o.num_stages = spec_.pipeline().num_stages();
  o.stage = stage_;
  o.accumulation = spec_.pipeline().accumulation();
  o.total_steps = spec_.training().steps();
  o.start_step = start_step_;
  o.eval_interval = spec_.training().eval_interval();
  o.warmup_steps = spec_.pipeline().warmup_steps();
  const auto& ckpt = spec_.checkpoint();
  o.checkpoint_interval = ckpt.directory().empty() ? 0 : ckpt.interval();
  // The replicas hold the same weights: one evaluates and checkpoints.
  o.evaluates = role_.speaks_for_the_stage();
  o.checkpoints = !ckpt.directory().empty() && role_.speaks_for_the_stage();
  scheduler_ = std::make_unique<StageScheduler>(o);
  stats_.SetStart(scheduler_->drift_bound(), start_step_);
  return absl::OkStatus();
}

absl::Status StageRuntime::Run() {
  started_ = options_.clock->Now();
  absl::Status status;
  try {
    status = Loop();
  } catch (const c10::Error& e) {
    status = absl::InternalError(
        absl::StrCat("stage ", stage_, ": torch error: ", e.what_without_backtrace()));
  }
  if (!status.ok()) options_.inbox->Close();
  stats_.SetPeakRss(PeakRssBytes());
  return status;
}

void StageRuntime::Mark(v1::Span::Kind kind, std::optional<uint64_t> micro_batch_id,
                        std::optional<int64_t> step) {
  const absl::Time now = options_.clock->Now();
  const double seconds = absl::ToDoubleSeconds(now - span_start_);
  if (options_.spans != nullptr) {
    options_.spans->Record(kind, span_start_, now, micro_batch_id, step);
  }
  span_start_ = now;
  stats_.AddSpan(kind == v1::Span::IDLE, seconds);
}

double StageRuntime::SecondsSinceStart() const {
  return absl::ToDoubleSeconds(options_.clock->Now() - started_);
}

absl::Status StageRuntime::Loop() {
  Inbox& inbox = *options_.inbox;
  span_start_ = options_.clock->Now();
  while (true) {
    RETURN_IF_ERROR(inbox.failure());
    if (cancelled_.load()) return absl::CancelledError("the job was cancelled");
    // The last stage waits on a HEAD_INPUT's part: before anything else. A
    // scale, which only the next backward needs, gives way to a forward.
    if (head_shard_) RETURN_IF_ERROR(HandleHeadFrames(/*scales=*/false));
    if (!first_) {
      auto kind = inbox.PeekKind(Inbox::From::kPrevious);
      if (kind && *kind != v1::TensorFrame::ACTIVATION) {
        const bool shutdown = *kind == v1::TensorFrame::SHUTDOWN;
        RETURN_IF_ERROR(HandleControl(*inbox.Pop(Inbox::From::kPrevious)));
        if (shutdown) return absl::OkStatus();
        continue;
      }
    }
    const bool has_gradient = inbox.PeekKind(Inbox::From::kNext).has_value();
    const bool has_activation =
        inbox.PeekKind(Inbox::From::kPrevious) == v1::TensorFrame::ACTIVATION;
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
        // Nothing else to do: a scale held back for a forward goes now.
        if (deferred_scale_.has_value()) {
          RETURN_IF_ERROR(HandleHeadFrames(/*scales=*/true));
          if (!deferred_scale_.has_value()) break;
        }
        inbox.Wait(absl::Milliseconds(100));
        Mark(v1::Span::IDLE);
        break;
    }
  }
}

void StageRuntime::Send(StageChannel::To to, v1::TensorFrame::Kind kind, uint64_t micro_batch_id,
                        const torch::Tensor* tensor, int64_t step) {
  channel_.Send(to, kind, micro_batch_id, tensor, scheduler_->version(), step);
}

absl::Status StageRuntime::Forward() {
  uint64_t id;
  torch::Tensor input;
  if (first_) {
    id = scheduler_->next_micro_batch();
    input = TrainingTokens(id).first;
  } else {
    v1::TensorFrame frame = *options_.inbox->Pop(Inbox::From::kPrevious);
    id = frame.micro_batch_id();
    ASSIGN_OR_RETURN(input, channel_.Incoming(frame, *model_));
    input.requires_grad_(true);
  }
  // pipeline.drift_correction "predict": the forward runs on the weights
  // extrapolated by the steps its backward will cross (none at the last stage).
  const int64_t steps_ahead = scheduler_->StepsBeforeBackward(id);
  RETURN_IF_ERROR(scheduler_->OnForward(id));
  torch::Tensor output;
  if (split_last_) {
    ASSIGN_OR_RETURN(output, SplitHeadForward(id, input));
  } else {
    const StageModel::Prediction prediction =
        model_->PredictWeights(steps_ahead, scheduler_->version(), first_ ? input : torch::Tensor());
    AutocastScope autocast(model_->placement());
    output = last_ ? model_->ForwardLoss(input, TrainingTokens(id).second)
                   : model_->module()(input);
  }
  Mark(v1::Span::FORWARD, id);
  if (!last_) {
    Send(StageChannel::To::kNext, v1::TensorFrame::ACTIVATION, id, &output);
    Mark(v1::Span::SEND, id);
    if (head_shard_) ++head_inputs_due_;
  }
  pending_.push_back({id, input, output});
  stats_.AddForward(scheduler_->forwards());
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> StageRuntime::SplitHeadForward(uint64_t id,
                                                             const torch::Tensor& input) {
  AutocastScope autocast(model_->placement());
  GptStage& module = model_->module();
  const torch::Tensor targets = TrainingTokens(id).second.reshape({-1});
  const torch::Tensor hidden = module->Hidden(input);
  Mark(v1::Span::FORWARD, id);
  // The other part first, so that both stages compute at once.
  const torch::Tensor ask = hidden.detach();
  Send(StageChannel::To::kPrevious, v1::TensorFrame::HEAD_INPUT, id, &ask);
  Mark(v1::Span::SEND, id);
  const torch::Tensor flat = hidden.reshape({-1, hidden.size(-1)});
  HeadShardPart own =
      HeadShardForward(flat.detach(), module->head_weight(), targets, module->HeadRows().first);
  Mark(v1::Span::FORWARD, id);
  ASSIGN_OR_RETURN(const torch::Tensor other, AwaitHeadPart(id));
  Mark(v1::Span::IDLE);
  torch::Tensor scale;
  torch::Tensor loss = SplitHeadLoss(flat, module->head_weight(), std::move(own), other, &scale);
  Mark(v1::Span::FORWARD, id);
  Send(StageChannel::To::kPrevious, v1::TensorFrame::HEAD_SCALE, id, &scale);
  Mark(v1::Span::SEND, id);
  return loss;
}

absl::StatusOr<torch::Tensor> StageRuntime::AwaitHeadPart(uint64_t id) {
  Inbox& inbox = *options_.inbox;
  while (true) {
    if (std::optional<v1::TensorFrame> frame = inbox.Pop(Inbox::From::kHead)) {
      if (frame->kind() != v1::TensorFrame::HEAD_PART || frame->micro_batch_id() != id) {
        return absl::FailedPreconditionError(absl::StrCat(
            "stage ", stage_, ": waiting for the HEAD_PART of micro-batch ", id, ", got a ",
            v1::TensorFrame::Kind_Name(frame->kind()), " of micro-batch ",
            frame->micro_batch_id()));
      }
      return channel_.Incoming(*frame, *model_);
    }
    RETURN_IF_ERROR(inbox.failure());
    if (cancelled_.load()) return absl::CancelledError("the job was cancelled");
    if (inbox.closed()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage_, ": the links closed while waiting for the HEAD_PART of micro-batch ",
          id));
    }
    inbox.WaitFor(Inbox::From::kHead, absl::Milliseconds(100));
  }
}

absl::Status StageRuntime::HandleHeadFrames(bool scales) {
  GptStage& module = model_->module();
  while (true) {
    std::optional<v1::TensorFrame> frame = std::move(deferred_scale_);
    deferred_scale_.reset();
    if (!frame) frame = options_.inbox->Pop(Inbox::From::kHead);
    if (!frame) return absl::OkStatus();
    const uint64_t id = frame->micro_batch_id();
    // A scale belongs to the step of its micro-batch: it waits until the
    // backwards before that micro-batch (and a step they may make) are done.
    if (frame->kind() == v1::TensorFrame::HEAD_SCALE &&
        (!scales || (scheduler_->in_flight() > 0 && id > scheduler_->oldest_in_flight()))) {
      deferred_scale_ = std::move(frame);
      return absl::OkStatus();
    }
    if (frame->kind() == v1::TensorFrame::HEAD_INPUT && !head_jobs_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage_, ": a HEAD_INPUT of micro-batch ", id, " arrived while micro-batch ",
          head_jobs_.front().micro_batch_id, "'s part of the head still waits for its scale"));
    }
    ASSIGN_OR_RETURN(const torch::Tensor tensor, channel_.Incoming(*frame, *model_));
    if (frame->kind() == v1::TensorFrame::HEAD_INPUT) {
      --head_inputs_due_;
      const torch::Tensor targets = TrainingTokens(id).second.reshape({-1});
      AutocastScope autocast(model_->placement());
      HeadShardPart part = HeadShardForward(tensor.reshape({-1, tensor.size(-1)}),
                                            module->head_weight(), targets, 0);
      const torch::Tensor packed = PackHeadShard(part);
      Mark(v1::Span::FORWARD, id);
      Send(StageChannel::To::kNext, v1::TensorFrame::HEAD_PART, id, &packed);
      Mark(v1::Span::SEND, id);
      head_jobs_.push_back({id, std::move(part)});
      continue;
    }
    if (frame->kind() != v1::TensorFrame::HEAD_SCALE || head_jobs_.empty() ||
        head_jobs_.front().micro_batch_id != id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage_, ": a ", v1::TensorFrame::Kind_Name(frame->kind()),
          " of micro-batch ", id, " arrived, but the head's part waiting for its scale is ",
          head_jobs_.empty() ? std::string("none")
                             : absl::StrCat("micro-batch ", head_jobs_.front().micro_batch_id)));
    }
    // The part's share of d (loss / a) / d weight, added to the step's gradient.
    const double tokens =
        static_cast<double>(spec_.pipeline().micro_batch_size()) * spec_.model().seq_len();
    const torch::Tensor& weight = module->head_weight();
    const torch::Tensor gradient =
        HeadShardWeightGradient(head_jobs_.front().part, tensor,
                                1.0 / (tokens * scheduler_->accumulation()))
            .to(weight.scalar_type());
    {
      torch::NoGradGuard no_grad;
      torch::Tensor& accumulated = weight.mutable_grad();
      if (accumulated.defined()) {
        accumulated.add_(gradient);
      } else {
        accumulated = gradient;
      }
    }
    head_jobs_.pop_front();
    Mark(v1::Span::BACKWARD, id);
  }
}

void StageRuntime::SendHeadRows(int64_t step) {
  const torch::Tensor rows = model_->module()->head_weight().detach().to(torch::kFloat);
  Send(StageChannel::To::kNext, v1::TensorFrame::HEAD_ROWS, 0, &rows, step);
}

absl::Status StageRuntime::TakeTheNextHeadInput() {
  Inbox& inbox = *options_.inbox;
  const absl::Time deadline = absl::Now() + kHeadInputWait;
  const int due = head_inputs_due_;
  while (head_inputs_due_ == due && !inbox.closed() && inbox.failure().ok()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    inbox.WaitFor(Inbox::From::kHead, left);
    Mark(v1::Span::IDLE);
    RETURN_IF_ERROR(HandleHeadFrames(/*scales=*/true));
    // A scale held back for a later backward holds the frames behind it too.
    if (deferred_scale_.has_value()) break;
  }
  return absl::OkStatus();
}

absl::Status StageRuntime::Backward() {
  // A split head's scale of this micro-batch came before its gradient: its
  // share of the weight gradient goes into the step this backward may make.
  if (head_shard_) RETURN_IF_ERROR(HandleHeadFrames(/*scales=*/true));
  if (head_shard_ && head_inputs_due_ > 0) RETURN_IF_ERROR(TakeTheNextHeadInput());
  uint64_t id = scheduler_->oldest_in_flight();
  torch::Tensor grad;
  if (!last_) {
    v1::TensorFrame frame = *options_.inbox->Pop(Inbox::From::kNext);
    id = frame.micro_batch_id();
    ASSIGN_OR_RETURN(grad, channel_.Incoming(frame, *model_));
  }
  ASSIGN_OR_RETURN(BackwardResult result, scheduler_->OnBackward(id));
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  // pipeline.drift_correction "staleness": this micro-batch's share of the stage's gradient
  // is weighted 1/(1+drift). The sum so far is divided by the weight before the backward
  // and all of it multiplied after: G + w g, with no copy of G.
  step_drift_sum_ += result.drift;
  const double weight = model_->GradientWeight(result.drift);
  if (weight != 1.0) model_->ScaleGradients(1.0 / weight);
  if (last_) {
    const torch::Tensor loss = p.output.detach().to(torch::kDouble);
    step_loss_sum_ = step_loss_sum_.defined() ? step_loss_sum_ + loss : loss;
    (p.output / scheduler_->accumulation()).backward();
  } else {
    p.output.backward(grad);
  }
  if (weight != 1.0) model_->ScaleGradients(weight);
  Mark(v1::Span::BACKWARD, id);
  if (!first_) {
    torch::Tensor input_grad = p.input.grad();
    Send(StageChannel::To::kPrevious, v1::TensorFrame::GRADIENT, id, &input_grad);
    Mark(v1::Span::SEND, id);
  }
  std::optional<double> step_loss;
  if (result.step_now) {
    ASSIGN_OR_RETURN(step_loss, StepOptimizer());
  }
  const int64_t tokens = spec_.pipeline().micro_batch_size() * spec_.model().seq_len();
  stats_.AddBackward(scheduler_->backwards(), scheduler_->version(), result.drift, tokens,
                     weights_hash_);
  // Every replica's loss is the same mean: one reports it.
  if (step_loss && role_.speaks_for_the_stage()) {
    stats_.AddTrainLoss(scheduler_->version(), *step_loss, SecondsSinceStart());
  }
  return absl::OkStatus();
}

std::pair<torch::Tensor, torch::Tensor> StageRuntime::TrainingTokens(
    uint64_t micro_batch_id) const {
  return model_->Tokens(options_.corpus->TrainingWindows(SampleId(micro_batch_id)));
}

uint64_t StageRuntime::SampleId(uint64_t micro_batch_id) const {
  const uint64_t first = static_cast<uint64_t>(start_step_) * spec_.pipeline().accumulation();
  return sample_base_ + (micro_batch_id - first) * role_.count + role_.replica;
}

uint64_t StageRuntime::SamplesAt(int64_t step) const {
  // Every replica's: a resume on another R reads on after them.
  return sample_base_ +
         static_cast<uint64_t>(step - start_step_) * scheduler_->accumulation() * role_.count;
}

absl::StatusOr<std::optional<double>> StageRuntime::StepOptimizer() {
  const int64_t step = scheduler_->version();  // already advanced
  // "delay-comp": this replica's gradients, for its own drifts, before the replicas average.
  model_->CompensateDelay(step, static_cast<double>(step_drift_sum_) /
                                    static_cast<double>(scheduler_->accumulation()));
  step_drift_sum_ = 0;
  // Replicas first: the guard, the clipping and AdamW then see the same
  // gradients on every replica and leave the same weights.
  if (options_.gradient_sync != nullptr) {
    std::vector<torch::Tensor> tensors = model_->Gradients();
    if (last_) tensors.push_back(step_loss_sum_);
    const absl::Time start = options_.clock->Now();
    RETURN_IF_ERROR(options_.gradient_sync->Average(tensors));
    stats_.ObserveAllReduce(absl::ToDoubleSeconds(options_.clock->Now() - start));
    Mark(v1::Span::ALL_REDUCE, std::nullopt, step);
  }
  const StageModel::StepOutcome outcome = model_->Step(step);
  if (outcome.skipped) {
    stats_.AddNonfiniteSkip();
    LOG(WARNING) << "job=" << spec_.name() << " stage " << stage_ << " step " << step
                 << ": the gradients hold NaN or Inf; step skipped, weights unchanged";
  }
  if (options_.gradient_sync != nullptr) weights_hash_ = model_->HashWeights(weights_hash_);
  Mark(v1::Span::OPTIMIZER_STEP, std::nullopt, step);
  stats_.AddOptimizerStep(outcome.gradient_norm);
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

absl::Status StageRuntime::HandleDrained() {
  // Stage 0 with the pipe empty: every stage has taken exactly `step` steps.
  const int64_t step = scheduler_->drained_step();
  const DrainWork work = scheduler_->drain_work();
  if (work.evaluate) {
    if (head_shard_) SendHeadRows(step);
    torch::NoGradGuard no_grad;
    AutocastScope autocast(model_->placement());
    model_->module()->eval();
    for (int j = 0; j < spec_.training().eval_micro_batches(); ++j) {
      auto [inputs, targets] = model_->Tokens(options_.corpus->ValidationWindows(j));
      if (last_) {
        eval_loss_sum_ += model_->ForwardLoss(inputs, targets).item<double>();
      } else {
        torch::Tensor output = model_->module()(inputs);
        Send(StageChannel::To::kNext, v1::TensorFrame::EVAL_ACTIVATION, j, &output, step);
      }
    }
    model_->module()->train();
    if (last_) {
      RecordValidation(step, eval_loss_sum_ / spec_.training().eval_micro_batches());
      eval_loss_sum_ = 0;
    }
    Mark(v1::Span::EVAL, std::nullopt, step);
  }
  if (work.checkpoint) {
    RETURN_IF_ERROR(SaveCheckpoint(step));
    if (!last_) Send(StageChannel::To::kNext, v1::TensorFrame::CHECKPOINT, 0, nullptr, step);
    Mark(v1::Span::CHECKPOINT, std::nullopt, step);
  }
  scheduler_->OnDrainHandled();
  return absl::OkStatus();
}

void StageRuntime::RecordValidation(int64_t step, double loss) {
  LOG(INFO) << "job=" << spec_.name() << " step=" << step << " validation_loss=" << loss;
  stats_.AddValidationLoss(step, loss, SecondsSinceStart());
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
      if (!last_) {
        Send(StageChannel::To::kNext, v1::TensorFrame::CHECKPOINT, 0, nullptr, frame.step());
      }
      Mark(v1::Span::CHECKPOINT, std::nullopt, frame.step());
      return absl::OkStatus();
    case v1::TensorFrame::HEAD_ROWS: {
      ASSIGN_OR_RETURN(eval_first_rows_, channel_.Incoming(frame, *model_));
      return absl::OkStatus();
    }
    case v1::TensorFrame::SHUTDOWN:
      return Finish();
    default:
      return absl::InvalidArgumentError("unexpected control frame");
  }
}

absl::Status StageRuntime::EvalForward(const v1::TensorFrame& frame) {
  ASSIGN_OR_RETURN(torch::Tensor input, channel_.Incoming(frame, *model_));
  if (head_shard_ && frame.micro_batch_id() == 0) SendHeadRows(frame.step());
  if (split_last_ && !eval_first_rows_.defined()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage_, ": an EVAL_ACTIVATION came before the head's first rows (HEAD_ROWS)"));
  }
  torch::NoGradGuard no_grad;
  AutocastScope autocast(model_->placement());
  model_->module()->eval();
  if (!last_) {
    torch::Tensor output = model_->module()(input);
    model_->module()->train();
    Send(StageChannel::To::kNext, v1::TensorFrame::EVAL_ACTIVATION, frame.micro_batch_id(),
         &output, frame.step());
    return absl::OkStatus();
  }
  const auto targets =
      model_->Tokens(options_.corpus->ValidationWindows(frame.micro_batch_id())).second;
  eval_loss_sum_ += model_->ForwardLoss(input, targets, eval_first_rows_).item<double>();
  model_->module()->train();
  if (++eval_seen_ == spec_.training().eval_micro_batches()) {
    RecordValidation(frame.step(), eval_loss_sum_ / eval_seen_);
    eval_loss_sum_ = 0;
    eval_seen_ = 0;
    eval_first_rows_ = torch::Tensor();
  }
  return absl::OkStatus();
}

absl::Status StageRuntime::SaveCheckpoint(int64_t step) {
  ASSIGN_OR_RETURN(const std::string path, checkpointer_.Save(step, SamplesAt(step), *model_));
  stats_.AddCheckpoint(path, step);
  return absl::OkStatus();
}

absl::Status StageRuntime::Finish() {
  const absl::Status status = channel_.Close(scheduler_->version());
  stats_.SetFinished(status.ok());
  const v1::StageReport report = stats_.Peek();
  LOG(INFO) << "job=" << spec_.name() << " stage " << stage_ << " units "
            << report.partition_units() << ": busy "
            << absl::StrFormat("%.2f", report.busy_seconds()) << " s, idle "
            << absl::StrFormat("%.2f", report.idle_seconds()) << " s, predicted share "
            << absl::StrFormat("%.3f", report.predicted_cost_share());
  return status;
}

}  // namespace paci
