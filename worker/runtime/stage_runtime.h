#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/job.pb.h"
#include "paci/v1/stage.pb.h"
#include "worker/data/corpus.h"
#include "worker/model/adamw.h"
#include "worker/model/gpt.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/precision.h"
#include "worker/pipeline/stage_scheduler.h"
#include "worker/runtime/replica_group.h"
#include "worker/runtime/span_recorder.h"
#include "worker/runtime/stage_metrics.h"
#include "worker/transport/frame_sender.h"
#include "worker/transport/inbox.h"
#include "worker/transport/nccl_link.h"

namespace paci {

// One pipeline stage at work: its slice of the GPT, its AdamW, the schedule
// (StageScheduler) and the links to its neighbours. Run() is the per-stage
// loop of docs/design.md section 2: backward first, forwards up to the in-flight
// cap, an optimizer step after every a-th backward, evaluation and
// checkpoints only at drained points.
//
// The compute thread's time is cut into consecutive spans (forward,
// backward, send, optimizer step, eval, checkpoint, idle): they make the busy
// and idle seconds of the metrics and the report and, when a SpanRecorder is
// given, the timeline of the run.
//
// Collaborators are owned by the caller and must outlive the runtime; the
// senders (a PeerSender each in a worker) are null where there is no
// neighbour, `spans` is null when no timeline is recorded. `link_id` names
// this placement on the stage links (the run id "<job>/<attempt>"). Run() is
// called once from one thread; Cancel() and TakeReport() may be called from
// any thread.
class StageRuntime {
 public:
  StageRuntime(const v1::JobSpec& spec, int stage, const Corpus* corpus, Inbox& inbox,
               FrameSender* previous, FrameSender* next, StageMetrics& metrics,
               SpanRecorder* spans, std::string link_id);

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

  // Before Init: exchange tensors with the previous and/or next stage over
  // NCCL (both GPU stages on one node; StageHost decides). Init then sets the
  // links up: the lower stage of each pair sends the ids as its first frame.
  void UseNccl(bool with_previous, bool with_next) {
    nccl_previous_wanted_ = with_previous;
    nccl_next_wanted_ = with_next;
  }

  // Before Init: this stage is one of pipeline.data_parallel replicas, which
  // average their gradients through `group` at every optimizer step (it must
  // outlive the runtime). Replica r's local micro-batch m reads sample
  // m * R + r; only replica 0 evaluates, reports the loss and checkpoints.
  void UseReplicas(ReplicaGroup* group);

  // Counters so far, plus the loss points, checkpoints and timeline spans
  // recorded since the last call.
  v1::StageReport TakeReport();


 private:
  struct Pending {  // a micro-batch between its forward and its backward
    uint64_t micro_batch_id;
    torch::Tensor input;   // the leaf whose gradient goes to stage s-1
    torch::Tensor output;  // hidden state, or the loss on the last stage
  };

  absl::Status Loop();
  absl::Status Forward();
  absl::Status Backward();
  absl::Status HandleDrained();
  absl::Status HandleControl(v1::TensorFrame frame);
  absl::Status EvalForward(const v1::TensorFrame& frame);
  // Init's checkpoint part: resumes from this job's latest complete
  // checkpoint (checkpoint.resume), or refuses a directory that holds one.
  absl::Status RestoreCheckpoint();
  // checkpoint.init_from, unless this job has a checkpoint to resume: the
  // weights of the source's latest step, by name, into the model (before the
  // optimizer exists). FailedPrecondition naming the first model field whose
  // value differs, or a parameter missing or of another shape.
  absl::Status InitFromSource();
  absl::Status SaveCheckpoint(int64_t step);
  absl::Status Finish();
  void Send(FrameSender* to, v1::TensorFrame::Kind kind, uint64_t micro_batch_id,
            const torch::Tensor* tensor, int64_t step = 0);
  void RecordValidation(int64_t step, double loss);
  // Ends the span that began at the end of the previous one: records it (when
  // spans are recorded) and adds its seconds to busy, or to idle for IDLE.
  void Mark(v1::Span::Kind kind, std::optional<uint64_t> micro_batch_id = std::nullopt,
            std::optional<int64_t> step = std::nullopt);
  double SecondsSinceStart() const;
  // Multiplies every defined gradient of this stage's parameters by `factor`.
  void ScaleGradients(double factor);
  // The L2 norm of all of this stage's gradients (NaN or Inf when one is).
  double GradientNorm() const;
  // With replicas: the step's gradients (and, on the last stage, its loss
  // sum) averaged over them.
  absl::Status AverageOverReplicas(int64_t step);
  // The corpus sample of this replica's micro-batch `micro_batch_id`: the
  // samples consumed before this run (every replica's), then R per local
  // micro-batch, r-th of them.
  uint64_t SampleId(uint64_t micro_batch_id) const;
  // The optimizer step when a backward completes one: the non-finite guard
  // (skip, count), optimizer.clip_norm, AdamW. On the last stage, the step's
  // mean training loss; FailedPrecondition naming training.max_nonfinite_steps
  // when the loss has been NaN or Inf for that many steps in a row.
  absl::StatusOr<std::optional<double>> StepOptimizer();
  // Inputs and targets [B, T] of the windows, on the stage's device.
  std::pair<torch::Tensor, torch::Tensor> Tokens(const std::vector<int32_t>& windows) const;
  // A host tensor on the stage's device. To a GPU from page-locked memory,
  // without waiting (non_blocking): a copy would otherwise first wait for
  // every kernel queued before it.
  torch::Tensor ToDevice(const torch::Tensor& host) const;
  // The tensor a frame carries, on the stage's device: from its bytes, or
  // received over NCCL when the frame says so.
  absl::StatusOr<torch::Tensor> Incoming(const v1::TensorFrame& frame);
  absl::Status ConnectNccl();
  static torch::Tensor Loss(const torch::Tensor& logits, const torch::Tensor& targets);
  bool EvalDue(int64_t step) const;
  bool CheckpointDue(int64_t step) const;

  const v1::JobSpec spec_;
  const int stage_;
  const int num_stages_;
  const bool first_, last_;
  const Corpus* corpus_;
  Inbox& inbox_;
  FrameSender* previous_;
  FrameSender* next_;
  StageMetrics& metrics_;
  SpanRecorder* spans_;
  const std::string link_id_;
  ReplicaGroup* replicas_ = nullptr;
  int replica_ = 0, num_replicas_ = 1;
  uint32_t weights_hash_ = 0;  // with replicas: HashTensors chained over the steps
  LrScheduleOptions lr_;
  // pipeline.drift_correction: "staleness" weights each backward's gradient by
  // 1/(1+drift); "stage-lr" multiplies this stage's learning rate by lr_factor_.
  bool staleness_correction_ = false;
  double lr_factor_ = 1.0;
  std::unique_ptr<StageScheduler> scheduler_;
  StagePlacement placement_;
  bool nccl_previous_wanted_ = false, nccl_next_wanted_ = false;
  struct NcclSend {  // a tensor NCCL may still be reading
    NcclLink* link;
    uint64_t ticket;
    torch::Tensor tensor;
  };
  std::deque<NcclSend> nccl_sends_;
  // After nccl_sends_: a link's destructor waits for its sends, then the
  // tensors they read are freed.
  std::unique_ptr<NcclLink> nccl_previous_, nccl_next_;
  GptStage model_{nullptr};
  std::unique_ptr<AdamW> optimizer_;
  std::deque<Pending> pending_;
  int64_t start_step_ = 0;
  uint64_t sample_base_ = 0;  // samples consumed before start_step_ (a resumed checkpoint's)
  // Last stage: the sum of the current step's micro-batch losses, on the
  // device (float64), read once per optimizer step: each read waits for the GPU.
  torch::Tensor step_loss_sum_;
  int64_t nonfinite_losses_ = 0;  // last stage: steps in a row with a NaN or Inf loss
  double eval_loss_sum_ = 0;
  int eval_seen_ = 0;
  absl::Time started_;
  absl::Time span_start_;  // compute thread: where the current span began
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  v1::StageReport report_ ABSL_GUARDED_BY(mu_);  // counters, and points not yet taken
};

}  // namespace paci
