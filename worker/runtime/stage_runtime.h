#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paci/v1/job.pb.h"
#include "paci/v1/stage.pb.h"
#include "common/clock.h"
#include "worker/data/corpus.h"
#include "worker/pipeline/stage_scheduler.h"
#include "worker/runtime/gradient_sync.h"
#include "worker/runtime/span_recorder.h"
#include "worker/runtime/stage_channel.h"
#include "worker/runtime/stage_checkpointer.h"
#include "worker/runtime/stage_metrics.h"
#include "worker/runtime/stage_model.h"
#include "worker/runtime/stage_stats.h"
#include "worker/transport/frame_sender.h"
#include "worker/transport/inbox.h"

namespace paci {

// What one stage works with, built once by its host. Everything pointed to is
// owned by the caller and outlives the runtime.
struct StageRuntimeOptions {
  v1::JobSpec spec;
  int stage = 0;
  const Corpus* corpus = nullptr;  // stage 0 and the last stage read it
  Inbox* inbox = nullptr;
  FrameSender* previous = nullptr;  // null where there is no neighbour
  FrameSender* next = nullptr;
  SpanRecorder* spans = nullptr;  // null: no timeline
  // This placement on the stage links (the run id "<job>/<attempt>").
  std::string link_id;
  // NCCL to the previous and/or next stage (both GPU stages on one node).
  bool nccl_previous = false, nccl_next = false;
  // pipeline.data_parallel: how this stage's replicas average their
  // gradients at every optimizer step; null with one replica.
  GradientSync* gradient_sync = nullptr;
  // The spans' and the report's time; tests drive their own.
  const Clock* clock = &Clock::Real();
};

// A stage's place among its replicas: replica r's local micro-batch m reads
// sample m * R + r, and replica 0 speaks for all (it evaluates, reports the
// training loss and checkpoints: the replicas hold the same weights).
struct ReplicaRole {
  int replica = 0;
  int count = 1;
  bool speaks_for_the_stage() const { return replica == 0; }
};

// One pipeline stage at work: the loop of docs/design.md section 2 that
// drives StageScheduler (backward first, forwards up to the in-flight cap, an
// optimizer step after every a-th backward, evaluation and checkpoints only at
// drained points) over its parts: the StageModel (module, AdamW, the step's
// rules), the StageChannel (frames and tensors to and from the neighbours),
// the StageCheckpointer (files) and StageStats (counters for the metrics and
// the report).
//
// The compute thread's time is cut into consecutive spans (forward,
// backward, send, optimizer step, eval, checkpoint, idle): they make the busy
// and idle seconds and, when a SpanRecorder is given, the timeline of the run.
//
// Run() is called once from one thread; Cancel() and TakeReport() may be
// called from any thread.
class StageRuntime {
 public:
  StageRuntime(StageRuntimeOptions options, StageMetrics& metrics);

  // Builds the model and optimizer and, when the spec says so, resumes from
  // the latest complete checkpoint, or else starts from the weights of
  // checkpoint.init_from's (matched by name, any stage count; fresh
  // optimizer, step 0). FailedPrecondition / DataLoss for a checkpoint that
  // does not fit or is corrupt (naming the parameter or the file; nothing is
  // written then), and for a fresh run into a directory that already holds
  // checkpoints.
  absl::Status Init();

  // Trains to the end. Blocks. Returns the first error: a broken link, a
  // malformed or out-of-order tensor, a drift over the bound, a torch error.
  absl::Status Run();

  void Cancel() { cancelled_.store(true); }

  // Counters so far, plus the loss points, checkpoints and timeline spans
  // recorded since the last call.
  v1::StageReport TakeReport() { return stats_.Take(options_.spans); }

 private:
  struct Pending {  // a micro-batch between its forward and its backward
    uint64_t micro_batch_id;
    torch::Tensor input;   // the leaf whose gradient goes to stage s-1
    torch::Tensor output;  // hidden state, or the loss on the last stage
  };

  // The split head (docs/design.md, "The head split by vocabulary"). A part of
  // the loss the stage before the last computed and keeps until its scale comes.
  struct HeadJob {
    uint64_t micro_batch_id;
    HeadShardPart part;
  };

  absl::Status Loop();
  absl::Status Forward();
  // The last stage of a split head: the forward's loss over both parts.
  absl::StatusOr<torch::Tensor> SplitHeadForward(uint64_t id, const torch::Tensor& input);
  // The stage before the last: every HEAD_INPUT and HEAD_SCALE waiting, in
  // order, up to a scale whose micro-batch is not the next to go backward, or
  // up to any scale where `scales` is false (it is held in deferred_scale_).
  absl::Status HandleHeadFrames(bool scales);
  // The stage before the last, before a backward: the last stage sends the
  // next micro-batch's HEAD_INPUT as it starts it, right after this gradient
  // (or its optimizer step): its part goes first, so that the last stage does
  // not wait for it through this whole backward. Waits up to kHeadInputWait.
  absl::Status TakeTheNextHeadInput();
  // The last stage: waits for the HEAD_PART of micro-batch `id`.
  absl::StatusOr<torch::Tensor> AwaitHeadPart(uint64_t id);
  // The stage before the last, at a drained point before the validation activations.
  void SendHeadRows(int64_t step);
  absl::Status Backward();
  absl::Status HandleDrained();
  absl::Status HandleControl(v1::TensorFrame frame);
  absl::Status EvalForward(const v1::TensorFrame& frame);
  absl::Status SaveCheckpoint(int64_t step);
  absl::Status Finish();
  void Send(StageChannel::To to, v1::TensorFrame::Kind kind, uint64_t micro_batch_id,
            const torch::Tensor* tensor, int64_t step = 0);
  void RecordValidation(int64_t step, double loss);
  // Ends the span that began at the end of the previous one: records it (when
  // spans are recorded) and adds its seconds to busy, or to idle for IDLE.
  void Mark(v1::Span::Kind kind, std::optional<uint64_t> micro_batch_id = std::nullopt,
            std::optional<int64_t> step = std::nullopt);
  double SecondsSinceStart() const;
  // The corpus sample of this replica's micro-batch `micro_batch_id`: the
  // samples consumed before this run (every replica's), then R per local
  // micro-batch, r-th of them.
  uint64_t SampleId(uint64_t micro_batch_id) const;
  // Inputs and targets of that micro-batch on the device (the corpus's).
  std::pair<torch::Tensor, torch::Tensor> TrainingTokens(uint64_t micro_batch_id) const;
  // The samples every replica has consumed at `step`.
  uint64_t SamplesAt(int64_t step) const;
  // The optimizer step when a backward completes one: the replicas' average,
  // then the model's step (guard, clipping, AdamW). On the last stage, the
  // step's mean training loss; FailedPrecondition naming
  // training.max_nonfinite_steps when the loss has been NaN or Inf for that
  // many steps in a row.
  absl::StatusOr<std::optional<double>> StepOptimizer();

  const StageRuntimeOptions options_;
  const v1::JobSpec& spec_;
  const int stage_;
  const bool first_, last_;
  const ReplicaRole role_;
  StageStats stats_;
  StageChannel channel_;
  StageCheckpointer checkpointer_;
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<StageScheduler> scheduler_;
  uint32_t weights_hash_ = 0;  // with replicas: HashTensors chained over the steps
  std::deque<Pending> pending_;
  // The split head: this stage computes its first rows (the stage before the
  // last), or the rest and the loss (the last stage).
  bool head_shard_ = false, split_last_ = false;
  std::deque<HeadJob> head_jobs_;  // at most one: the last stage asks after each scale
  // The stage before the last: micro-batches it has sent on whose HEAD_INPUT has
  // not come yet.
  int head_inputs_due_ = 0;
  // A HEAD_SCALE held back: it came before the backward of the micro-batch
  // ahead of it, or gave way to a forward.
  std::optional<v1::TensorFrame> deferred_scale_;
  torch::Tensor eval_first_rows_;  // last stage: HEAD_ROWS of the current evaluation
  int64_t start_step_ = 0;
  uint64_t sample_base_ = 0;  // samples consumed before start_step_ (a resumed checkpoint's)
  // Last stage: the sum of the current step's micro-batch losses, on the
  // device (float64), read once per optimizer step: each read waits for the GPU.
  torch::Tensor step_loss_sum_;
  // The drifts of this step's backwards so far ("delay-comp" compensates their mean).
  int64_t step_drift_sum_ = 0;
  int64_t nonfinite_losses_ = 0;  // last stage: steps in a row with a NaN or Inf loss
  double eval_loss_sum_ = 0;
  int eval_seen_ = 0;
  absl::Time started_;
  absl::Time span_start_;  // compute thread: where the current span began
  std::atomic<bool> cancelled_{false};
};

}  // namespace paci
