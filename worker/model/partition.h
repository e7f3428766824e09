#pragma once

// How the GPT is cut into pipeline stages. Pure: no Torch, no clocks, so the
// workers, pacictl (the run summary) and the simulator compute the same cut.
//
// The model is a chain of *partition units*, numbered for num_layers = L:
//
//   0            "emb"       token and position embeddings
//   1 + 2b       "h<b>.attn" block b's first half:  x + attn(ln1(x))
//   2 + 2b       "h<b>.mlp"  block b's second half: x + mlp(ln2(x))
//   2L + 1       "head"      final LayerNorm, LM head and the loss
//
// A cut gives stage s the units [bounds[s], bounds[s+1]), every stage at least
// one. Parameter names stay global ("h3.fc.weight" wherever block 3's MLP half
// lives), so a cut changes neither the weights nor the training.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "paci/v1/job.pb.h"

#include "worker/model/gpt_config.h"

namespace paci {

inline int NumPartitionUnits(int num_layers) { return 2 * num_layers + 2; }
// "emb", "h<b>.attn", "h<b>.mlp" or "head".
std::string PartitionUnitName(int num_layers, int unit);

// The units [first_unit, end_unit) of a model of num_layers blocks that one
// stage holds.
struct StagePartition {
  int num_layers = 0;
  int first_unit = 0;
  int end_unit = 0;

  // The head split by vocabulary (PartitionPlan::head_split): the rows
  // [head_row_begin, head_row_end) of the head's weight [vocab, d] this stage
  // computes, the first ones on the stage before the last, the rest on the
  // last stage. 0, 0 where the head is not split: the last stage holds all.
  int64_t head_row_begin = 0, head_row_end = 0;

  bool has_embedding() const { return first_unit == 0; }
  // The head unit: the final norm, the loss and the head's rows (all of them
  // unless split).
  bool has_head() const { return end_unit == NumPartitionUnits(num_layers); }
  // Rows of a split head without the head unit: the stage before the last.
  bool has_head_shard() const { return !has_head() && head_row_end > head_row_begin; }
  bool head_split() const { return head_row_end > head_row_begin; }
  bool has_attention(int block) const { return Holds(1 + 2 * block); }
  bool has_mlp(int block) const { return Holds(2 + 2 * block); }
  bool Holds(int unit) const { return unit >= first_unit && unit < end_unit; }
  // The blocks with at least one half here: [first_block(), end_block()).
  int first_block() const;
  int end_block() const;
  // Whole blocks only, as the "even" cut always is.
  bool WholeBlocks() const;
  // "[3,10) h1.mlp..head", then " head rows [9216,32768)" where split.
  std::string Describe() const;
};

// The old PartitionStage cut in units: whole blocks spread evenly (the first
// num_layers % num_stages stages hold one more), the embedding on the first
// stage and the head on the last. Requires 1 <= num_stages <= num_layers and
// 0 <= stage < num_stages (checked by ValidateJobSpec before any stage is built).
StagePartition PartitionStage(int num_layers, int num_stages, int stage);

// What the cost model needs: the model's shape and the batch it runs.
struct ModelShape : GptConfig {
  int micro_batch_size = 4;
  int accumulation = 1;  // optimizer steps come once per `accumulation` micro-batches
};
ModelShape ModelShapeFromSpec(const v1::JobSpec& spec);

// The predicted cost of one unit per micro-batch, in FLOP-equivalents: the
// matrix-multiply FLOPs, plus each element pass of the memory-bound work
// (LayerNorm, softmax, GELU, the loss, the embedding's gradient, AdamW)
// counted as kElementPassFlops, the optimizer's share divided by a.
struct UnitCost {
  double forward = 0;
  double backward = 0;
  double optimizer = 0;  // per micro-batch: one step's cost / accumulation
  double total() const { return forward + backward + optimizer; }
};
// One float element pass of memory-bound work, in matmul FLOPs. Calibrated
// with `paci_worker --profile_units` on one CPU thread (docs/benchmarks.md,
// "Stage balance"): at one FLOP-equivalent rate the model then prices each
// block half and the head within about 8% of its measured time.
inline constexpr double kElementPassFlops = 40;
// The fused loss's passes over the head's [tokens, vocab] logits, all in its
// forward (the log-softmax, the target's gather, the softmax and the one-hot
// in place, the scale). Fitted with `--profile_units` after the fusion.
inline constexpr double kFusedLossPasses = 6;
std::vector<UnitCost> FlopUnitCosts(const ModelShape& shape);
// Each unit's parameter count (FlopUnitCosts' and EstimateStageMemory's).
std::vector<double> UnitParameters(const ModelShape& shape);

// What a stage's process holds at its peak, estimated from the shapes before
// anything is built: a worker refuses a stage whose estimate exceeds the memory
// it has (StageModel::Create), naming it. Bytes.
struct StageMemory {
  // What a LibTorch worker process holds with no model: the library, its
  // allocator's slack, gRPC (about 200 MiB measured with the peer model of
  // bench/stage_balance.py, whose stages hold 260-280 MiB in all).
  static constexpr double kRuntimeBytes = 200.0 * (1 << 20);
  double parameters = 0;   // weights, gradients, AdamW's moments (and master weights)
  double activations = 0;  // what the micro-batches in flight keep for their backward
  double logits = 0;       // the loss's gradient over the head's [tokens, vocab], kept per micro-batch
  int in_flight = 0;
  double total() const;
  // "3.05 GiB: weights, gradients and AdamW 1.00 GiB, activations of 2
  // micro-batches in flight 0.05 GiB, the head's logits 1.80 GiB, LibTorch 0.20 GiB"
  std::string Describe() const;
};
// `in_flight`: the most micro-batches between forward and backward at the
// stage (the schedule's in_flight_limit).
StageMemory EstimateStageMemory(const ModelShape& shape, const StagePartition& stage,
                                int in_flight, Precision precision);

// The contiguous split of `costs` into num_stages non-empty stages that
// minimises the slowest stage's cost and, among those, the sum of the squared
// stage costs (so the stages behind the bottleneck are balanced too); ties go
// to the earliest boundaries. Returns the num_stages + 1 boundaries, 0 first
// and costs.size() last. Requires 1 <= num_stages <= costs.size(), costs >= 0.
std::vector<int> BalancedCut(const std::vector<double>& costs, int num_stages);
// The "even" cut's boundaries (PartitionStage for each stage).
std::vector<int> EvenCut(int num_layers, int num_stages);

// A plan: the cut and its predicted stage costs.
struct PartitionPlan {
  std::string mode;              // "balanced", "even" or "explicit"
  std::vector<int> boundaries;   // num_stages + 1 unit indices
  // The head split by vocabulary: the stage before the last computes the
  // head's first head_split rows, the last stage the other vocab_size -
  // head_split (docs/design.md, "The head split by vocabulary"). 0: not split.
  int64_t head_split = 0;
  int64_t vocab_size = 0;
  std::vector<double> stage_cost;   // predicted, FLOP-equivalents per micro-batch
  std::vector<double> cost_share;   // stage_cost / their sum
  StagePartition Stage(int stage) const;
};

// "balanced" splits the head when that lowers the slowest stage by at least
// this fraction; the rows go in multiples of kHeadSplitRowMultiple.
inline constexpr double kHeadSplitMinGain = 0.05;
inline constexpr int64_t kHeadSplitRowMultiple = 64;

// The plan for pipeline.partition ("" = "balanced", "even", or P-1 boundaries
// "b1,b2,..." with an optional head split "/R"), from the FLOP model at the
// spec's shapes. "balanced" with two stages or more also weighs splitting the
// head by vocabulary: the head's rows [0, R) on the stage before the last,
// which then comes right before a last stage of the head alone; it keeps the
// split when the slowest stage is kHeadSplitMinGain cheaper for it, and only
// where the schedule allows one (HeadSplitFitsSchedule, common/job_spec.h). Deterministic: every
// stage, and pacictl, computes the same plan from the same spec, so nothing
// needs to be carried in the assignment. InvalidArgument naming
// pipeline.partition for a malformed value (ValidateJobSpec refuses those
// first).
absl::StatusOr<PartitionPlan> PlanPartition(const v1::JobSpec& spec);
absl::StatusOr<PartitionPlan> PlanPartition(const ModelShape& shape, int num_stages,
                                            absl::string_view partition);
// The same from given unit costs (measured ones, e.g. paci_worker
// --profile_units, in the simulator); units.size() = 2 * num_layers + 2. The
// head's cost is taken as proportional to its rows; vocab_size 0 splits no head.
absl::StatusOr<PartitionPlan> PlanPartitionWithCosts(const std::vector<UnitCost>& units,
                                                     int num_stages, absl::string_view partition,
                                                     int64_t vocab_size = 0);

}  // namespace paci
