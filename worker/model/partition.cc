#include "worker/model/partition.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"

namespace paci {

std::string PartitionUnitName(int num_layers, int unit) {
  if (unit <= 0) return "emb";
  if (unit >= NumPartitionUnits(num_layers) - 1) return "head";
  return absl::StrCat("h", (unit - 1) / 2, unit % 2 == 1 ? ".attn" : ".mlp");
}

int StagePartition::first_block() const { return std::max(0, (first_unit - 1) / 2); }

int StagePartition::end_block() const {
  // Units 1 .. 2L hold block (u - 1) / 2; the last such unit below end_unit.
  const int last = std::min(end_unit, 2 * num_layers + 1) - 1;
  return std::max(first_block(), last >= 1 ? (last - 1) / 2 + 1 : 0);
}

bool StagePartition::WholeBlocks() const {
  const auto on_block_edge = [&](int u) { return u == 0 || u % 2 == 1 || u == NumPartitionUnits(num_layers); };
  return on_block_edge(first_unit) && on_block_edge(end_unit);
}

std::string StagePartition::Describe() const {
  std::string out = absl::StrCat("[", first_unit, ",", end_unit, ") ",
                                 PartitionUnitName(num_layers, first_unit));
  if (end_unit - first_unit > 1) {
    absl::StrAppend(&out, "..", PartitionUnitName(num_layers, end_unit - 1));
  }
  if (head_split()) absl::StrAppend(&out, " head rows [", head_row_begin, ",", head_row_end, ")");
  return out;
}

std::vector<int> EvenCut(int num_layers, int num_stages) {
  const int base = num_layers / num_stages;
  const int extra = num_layers % num_stages;
  std::vector<int> bounds = {0};
  int block = 0;
  for (int s = 0; s + 1 < num_stages; ++s) {
    block += base + (s < extra ? 1 : 0);
    bounds.push_back(1 + 2 * block);  // the first unit of the next stage's first block
  }
  bounds.push_back(NumPartitionUnits(num_layers));
  return bounds;
}

StagePartition PartitionStage(int num_layers, int num_stages, int stage) {
  const std::vector<int> bounds = EvenCut(num_layers, num_stages);
  return StagePartition{num_layers, bounds[stage], bounds[stage + 1]};
}

const char* ArchitectureName(Architecture architecture) {
  return architecture == Architecture::kLlama ? "llama" : "gpt2";
}

int GptConfig::ffn() const {
  return ffn_hidden_size > 0 ? ffn_hidden_size
                             : DefaultFfnHiddenSize(ArchitectureName(architecture), d_model);
}

GptConfig GptConfigFromSpec(const v1::ModelSpec& model) {
  GptConfig c;
  c.architecture = model.architecture() == "llama" ? Architecture::kLlama : Architecture::kGpt2;
  c.vocab_size = model.vocab_size();
  c.num_layers = model.num_layers();
  c.d_model = model.d_model();
  c.num_heads = model.num_heads();
  if (model.has_num_kv_heads()) c.num_kv_heads = model.num_kv_heads();
  if (model.has_ffn_hidden_size()) c.ffn_hidden_size = model.ffn_hidden_size();
  c.seq_len = model.seq_len();
  if (model.has_rope_theta()) c.rope_theta = model.rope_theta();
  if (model.has_norm_eps()) c.norm_eps = model.norm_eps();
  c.dropout = model.dropout();
  c.init_seed = model.has_init_seed() ? model.init_seed() : 1234;
  return c;
}

std::optional<std::string> ShapeDifference(const GptConfig& here, const GptConfig& there) {
  if (here.architecture != there.architecture) {
    return absl::StrCat("model.architecture is ", ArchitectureName(there.architecture),
                        " there, ", ArchitectureName(here.architecture), " here");
  }
  const std::pair<const char*, std::pair<double, double>> fields[] = {
      {"model.vocab_size", {here.vocab_size, there.vocab_size}},
      {"model.num_layers", {here.num_layers, there.num_layers}},
      {"model.d_model", {here.d_model, there.d_model}},
      {"model.num_heads", {here.num_heads, there.num_heads}},
      {"model.num_kv_heads", {here.kv_heads(), there.kv_heads()}},
      {"model.ffn_hidden_size", {here.ffn(), there.ffn()}},
      {"model.seq_len", {here.seq_len, there.seq_len}},
      {"model.rope_theta", {here.llama() ? here.rope_theta : 0, there.llama() ? there.rope_theta : 0}},
      {"model.norm_eps", {here.norm_eps, there.norm_eps}}};
  for (const auto& [field, values] : fields) {
    if (values.first != values.second) {
      return absl::StrCat(field, " is ", values.second, " there, ", values.first, " here");
    }
  }
  return std::nullopt;
}

ModelShape ModelShapeFromSpec(const v1::JobSpec& spec) {
  ModelShape m;
  static_cast<GptConfig&>(m) = GptConfigFromSpec(spec.model());
  m.micro_batch_size = spec.pipeline().micro_batch_size();
  m.accumulation = std::max(1, spec.pipeline().accumulation());
  return m;
}

std::vector<double> UnitParameters(const ModelShape& m) {
  const double d = m.d_model, V = m.vocab_size, T = m.seq_len, F = m.ffn();
  const double kv = double(m.kv_heads()) * m.head_size();  // key (and value) width
  const bool llama = m.llama();
  std::vector<double> params = {V * d + (llama ? 0 : T * d)};  // token (and position) embeddings
  for (int b = 0; b < m.num_layers; ++b) {
    // q, k, v and the output projection; the norm (and gpt2's biases).
    params.push_back(d * (d + 2 * kv) + d * d + (llama ? d : 4 * d + 2 * kv));
    // llama: gate, up, down and the norm; gpt2: fc, proj, their biases and the norm.
    params.push_back(llama ? 3 * d * F + d : 2 * d * F + F + 3 * d);
  }
  params.push_back(d * V + (llama ? 1 : 2) * d);  // the final norm and the head
  return params;
}

std::vector<UnitCost> FlopUnitCosts(const ModelShape& m) {
  // Matmul FLOPs count 2 per multiply-add; a backward computes two matmuls
  // (input and weight gradients) per forward one. Memory-bound passes are
  // counted in elements and weighted by kElementPassFlops: a backward makes
  // about twice the passes of its forward and adds each parameter's gradient
  // once. AdamW's fused kernel (adamw.h) costs about 5 passes over its
  // parameters per step (--profile_units: 4 to 5.5 at the head and embedding).
  const double E = kElementPassFlops;
  const double N = double(m.micro_batch_size) * m.seq_len;  // tokens per micro-batch
  const double d = m.d_model, V = m.vocab_size, T = m.seq_len;
  // The CPU kernels compute the whole T x T score matrix and mask it.
  const double scores = double(m.micro_batch_size) * m.num_heads * T * T;
  const double a = std::max(1, m.accumulation);
  const std::vector<double> params = UnitParameters(m);
  const auto unit = [&](double matmul, double passes, double count) {
    UnitCost c;
    c.forward = matmul + E * passes;
    c.backward = 2 * matmul + E * (2 * passes + count);
    c.optimizer = E * 5 * count / a;
    return c;
  };
  const double F = m.ffn();
  const double kv = double(m.kv_heads()) * m.head_size();  // key (and value) width
  const bool llama = m.llama();
  std::vector<UnitCost> costs;
  // Embedding: a gather (and gpt2's position add); its backward makes a dense
  // [vocab, d] gradient, zeroed, scattered into and added to the accumulated
  // one: about five passes over the parameters (--profile_units: 3.2 ms at
  // vocabulary 8,192 and 14 ms at 32,768 for the shape).
  UnitCost emb = unit(0, (llama ? 1 : 2) * N * d, params[0]);
  emb.backward += E * 4 * params[0];
  costs.push_back(emb);
  for (int b = 0; b < m.num_layers; ++b) {
    // qkv and output projections, q.k and att.v; the norm, biases, layout
    // copies, residual, softmax; llama's rotation of q and k.
    costs.push_back(unit(2 * N * d * (d + 2 * kv) + 2 * N * d * d + 4 * N * T * d,
                         14 * N * d + 3 * scores + (llama ? 6 * N * (d + kv) : 0),
                         params[1 + 2 * b]));
    // gpt2: fc and proj; LayerNorm, biases, GELU, residual. llama: gate, up
    // and down; RMSNorm, SiLU, the product, residual.
    costs.push_back(llama ? unit(6 * N * d * F, 3 * N * d + 6 * N * F, params[2 + 2 * b])
                          : unit(4 * N * d * F, 3 * N * d + 5 * N * F, params[2 + 2 * b]));
  }
  // The final norm, the head's matmul and the fused loss (LinearCrossEntropy,
  // gpt.h): its forward turns the [N, vocab] logits into the loss and their
  // gradient in place, kFusedLossPasses passes; its backward is the two
  // matmuls, with no pass over [N, vocab].
  UnitCost head = unit(2 * N * d * V, 4 * N * d, params.back());
  head.forward += E * kFusedLossPasses * N * V;
  costs.push_back(head);
  return costs;
}

StageMemory EstimateStageMemory(const ModelShape& m, const StagePartition& part, int in_flight,
                                Precision precision) {
  const bool bf16_weights = precision == Precision::kBf16Weights;
  const bool bf16_matmuls = precision != Precision::kFp32;
  const double N = double(m.micro_batch_size) * m.seq_len;  // tokens per micro-batch
  const double d = m.d_model, V = m.vocab_size, T = m.seq_len, F = m.ffn();
  const double kv = double(m.kv_heads()) * m.head_size();
  const double scores = double(m.micro_batch_size) * m.num_heads * T * T;
  const bool llama = m.llama();
  // Activations in the weights' type; the loss is computed in float32.
  const double element = bf16_weights ? 2 : 4;
  const std::vector<double> params = UnitParameters(m);
  StageMemory memory;
  double parameters = 0, saved = 0;  // elements; saved: kept per micro-batch for its backward
  // The head's rows here (all of them unless split).
  const double head_rows =
      part.head_split() ? static_cast<double>(part.head_row_end - part.head_row_begin) : V;
  if (part.has_head_shard()) {
    // The rows' weight; the float32 softmax over them of the micro-batch whose
    // head it computes, kept until the last stage sends their scale, and the
    // next one's.
    parameters += head_rows * d;
    memory.logits = 2 * N * head_rows * 4;
  }
  for (int u = part.first_unit; u < part.end_unit; ++u) {
    parameters += params[u];
    if (u == NumPartitionUnits(m.num_layers) - 1) parameters -= (V - head_rows) * d;
    if (u == 0) {
      saved += N * d;  // the output
    } else if (u == NumPartitionUnits(m.num_layers) - 1) {
      saved += 2 * N * d;  // the norm's input and output
      // LinearCrossEntropy: the micro-batch being forwarded holds its float32
      // logits (and under bf16 the matmul's bfloat16 output, then the
      // gradient's bfloat16 copy it keeps); each earlier one in flight keeps
      // the loss's gradient over [N, V] in the matmuls' type.
      const double kept = bf16_matmuls ? 2 : 4;
      const double Vh = head_rows;
      memory.logits = N * Vh * (4 + (bf16_matmuls ? 2 : 0)) + (in_flight - 1) * N * Vh * kept;
      // Autocast's bfloat16 copies of the head's weight and input, kept per micro-batch.
      if (precision == Precision::kBf16Autocast) memory.logits += in_flight * (Vh * d + N * d) * 2;
    } else if (u % 2 == 1) {
      // the norm, q k v, the scores and their softmax, the attention's output
      // and the projection's input (llama: the rotated q and k as well)
      saved += N * (4 * d + 2 * kv) + 2 * scores + (llama ? N * (d + kv) : 0);
    } else {
      // the norm and the hidden layer before and after its activation (llama:
      // gate, up, their SiLU and product)
      saved += N * (2 * d + (llama ? 4 : 2) * F);
    }
  }
  // Weights and gradients in their type, AdamW's two moments (and bf16's
  // float32 master weights) in float32.
  memory.parameters = parameters * (bf16_weights ? 2 + 2 + 4 + 8 : 4 + 4 + 8);
  memory.activations = in_flight * saved * element;
  memory.in_flight = in_flight;
  return memory;
}

double StageMemory::total() const { return parameters + activations + logits + kRuntimeBytes; }

std::string StageMemory::Describe() const {
  const auto gib = [](double bytes) { return absl::StrFormat("%.2f GiB", bytes / (1 << 30)); };
  std::string out = absl::StrCat(gib(total()), ": weights, gradients and AdamW ", gib(parameters),
                                 ", activations of ", in_flight, " micro-batch",
                                 in_flight == 1 ? "" : "es", " in flight ", gib(activations));
  if (logits > 0) absl::StrAppend(&out, ", the head's logits ", gib(logits));
  absl::StrAppend(&out, ", LibTorch ", gib(kRuntimeBytes));
  return out;
}

std::vector<int> BalancedCut(const std::vector<double>& costs, int num_stages) {
  const int U = static_cast<int>(costs.size());
  const int P = num_stages;
  std::vector<double> prefix(U + 1, 0);
  for (int u = 0; u < U; ++u) prefix[u + 1] = prefix[u] + costs[u];
  const auto seg = [&](int i, int j) { return prefix[j] - prefix[i]; };
  constexpr double kInf = std::numeric_limits<double>::infinity();

  // Phase 1: best[k][j] = the smallest possible slowest stage when the first
  // j units form k stages.
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(U + 1, kInf));
  best[0][0] = 0;
  for (int k = 1; k <= P; ++k) {
    for (int j = k; j <= U - (P - k); ++j) {
      for (int i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == kInf) continue;
        best[k][j] = std::min(best[k][j], std::max(best[k - 1][i], seg(i, j)));
      }
    }
  }
  const double bottleneck = best[P][U];

  // Phase 2: among the cuts whose stages all stay within the bottleneck, the
  // smallest sum of squared stage costs; ties to the earliest boundary.
  std::vector<std::vector<double>> sq(P + 1, std::vector<double>(U + 1, kInf));
  std::vector<std::vector<int>> from(P + 1, std::vector<int>(U + 1, -1));
  sq[0][0] = 0;
  for (int k = 1; k <= P; ++k) {
    for (int j = k; j <= U - (P - k); ++j) {
      for (int i = k - 1; i < j; ++i) {
        const double c = seg(i, j);
        if (sq[k - 1][i] == kInf || c > bottleneck) continue;
        const double v = sq[k - 1][i] + c * c;
        if (v < sq[k][j]) {
          sq[k][j] = v;
          from[k][j] = i;
        }
      }
    }
  }
  std::vector<int> bounds(P + 1);
  bounds[P] = U;
  for (int k = P; k > 0; --k) bounds[k - 1] = from[k][bounds[k]];
  return bounds;
}

StagePartition PartitionPlan::Stage(int stage) const {
  const int units = boundaries.back();
  StagePartition part{(units - 2) / 2, boundaries[stage], boundaries[stage + 1]};
  const int num_stages = static_cast<int>(boundaries.size()) - 1;
  if (head_split > 0 && stage == num_stages - 2) {
    part.head_row_begin = 0;
    part.head_row_end = head_split;
  } else if (head_split > 0 && stage == num_stages - 1) {
    part.head_row_begin = head_split;
    part.head_row_end = vocab_size;
  }
  return part;
}

namespace {

// Each stage's cost under `bounds` with the head's first `split` rows of
// `vocab` moved from the last stage to the one before it.
std::vector<double> StageCosts(const std::vector<double>& totals, const std::vector<int>& bounds,
                               int64_t split, int64_t vocab) {
  const int P = static_cast<int>(bounds.size()) - 1;
  std::vector<double> cost;
  for (int s = 0; s < P; ++s) {
    double c = 0;
    for (int u = bounds[s]; u < bounds[s + 1]; ++u) c += totals[u];
    cost.push_back(c);
  }
  if (split > 0 && P >= 2) {
    const double moved = totals.back() * static_cast<double>(split) / static_cast<double>(vocab);
    cost[P - 2] += moved;
    cost[P - 1] -= moved;
  }
  return cost;
}

double Slowest(const std::vector<double>& cost) {
  return *std::max_element(cost.begin(), cost.end());
}

// "balanced" with the head split: for each row count R (multiples of
// kHeadSplitRowMultiple), the head's first R rows become a unit of their own
// just before the rest of the head, priced pro rata, and BalancedCut cuts
// that chain. A cut counts when it puts that unit on the stage before the
// last, with at least one unit of the model besides, and the rest of the head
// alone on the last stage. The best such cut, when it beats `slowest` by
// kHeadSplitMinGain; nullopt otherwise.
std::optional<std::pair<std::vector<int>, int64_t>> BalancedHeadSplit(
    const std::vector<double>& totals, int num_stages, int64_t vocab, double slowest) {
  const int U = static_cast<int>(totals.size());
  const int P = num_stages;
  if (P < 2 || vocab < 2 * kHeadSplitRowMultiple) return std::nullopt;
  // No cut beats the model's cost spread evenly: nothing to gain, no search.
  double total = 0;
  for (double t : totals) total += t;
  if (total / P >= slowest * (1 - kHeadSplitMinGain)) return std::nullopt;
  // At most 128 candidates, whatever the vocabulary.
  const int64_t step =
      std::max<int64_t>(1, vocab / kHeadSplitRowMultiple / 128) * kHeadSplitRowMultiple;
  std::optional<std::pair<std::vector<int>, int64_t>> best;
  double best_slowest = slowest * (1 - kHeadSplitMinGain);
  for (int64_t rows = step; rows + kHeadSplitRowMultiple <= vocab; rows += step) {
    std::vector<double> chain(totals.begin(), totals.end() - 1);
    const double shard = totals.back() * static_cast<double>(rows) / static_cast<double>(vocab);
    chain.push_back(shard);
    chain.push_back(totals.back() - shard);
    const std::vector<int> cut = BalancedCut(chain, P);
    // cut[P-1] == U: the rest of the head (chain unit U) alone on the last
    // stage; cut[P-2] <= U - 2: the stage before it holds a unit of the model.
    if (cut[P - 1] != U || cut[P - 2] > U - 2) continue;
    std::vector<int> bounds(cut.begin(), cut.end() - 1);
    bounds[P - 1] = U - 1;
    bounds.push_back(U);
    const double s = Slowest(StageCosts(totals, bounds, rows, vocab));
    if (s < best_slowest) {
      best_slowest = s;
      best = std::make_pair(bounds, rows);
    }
  }
  return best;
}

}  // namespace

namespace {

// PlanPartition's, with the head split weighed only when `head_split` allows.
absl::StatusOr<PartitionPlan> PlanFromShape(const ModelShape& shape, int num_stages,
                                            absl::string_view partition, bool head_split) {
  if (shape.num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_layers: must be at least 1, got ", shape.num_layers));
  }
  return PlanPartitionWithCosts(FlopUnitCosts(shape), num_stages, partition,
                                head_split ? shape.vocab_size : 0);
}

}  // namespace

absl::StatusOr<PartitionPlan> PlanPartition(const ModelShape& shape, int num_stages,
                                            absl::string_view partition) {
  return PlanFromShape(shape, num_stages, partition, /*head_split=*/true);
}

absl::StatusOr<PartitionPlan> PlanPartitionWithCosts(const std::vector<UnitCost>& units,
                                                     int num_stages, absl::string_view partition,
                                                     int64_t vocab_size) {
  const int num_units = static_cast<int>(units.size());
  const int num_layers = (num_units - 2) / 2;
  if (num_units < 4 || num_units % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit costs: need 2 * num_layers + 2 of them (at least 4), got ", num_units));
  }
  if (num_stages < 1 || num_stages > num_units) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.num_stages: must be between 1 and ", num_units, " (the partition units of ",
        num_layers, " layers), got ", num_stages));
  }
  PartitionPlan plan;
  std::vector<double> totals;
  for (const UnitCost& c : units) totals.push_back(c.total());
  if (partition.empty() || partition == "balanced") {
    plan.mode = "balanced";
    plan.boundaries = BalancedCut(totals, num_stages);
    if (vocab_size > 0) {
      const double slowest = Slowest(StageCosts(totals, plan.boundaries, 0, vocab_size));
      if (auto split = BalancedHeadSplit(totals, num_stages, vocab_size, slowest)) {
        plan.boundaries = split->first;
        plan.head_split = split->second;
      }
    }
  } else if (partition == "even") {
    plan.mode = "even";
    if (num_stages > num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.partition: even needs at most one stage per layer (", num_layers,
          "), got ", num_stages, " stages"));
    }
    plan.boundaries = EvenCut(num_layers, num_stages);
  } else {
    plan.mode = "explicit";
    absl::StatusOr<std::vector<int>> bounds =
        ParsePartitionBoundaries(std::string_view(partition.data(), partition.size()),
                                 num_layers, num_stages);
    if (!bounds.ok()) return bounds.status();
    plan.boundaries = *std::move(bounds);
    if (vocab_size > 0) {
      absl::StatusOr<int64_t> split =
          ParsePartitionHeadSplit(std::string_view(partition.data(), partition.size()),
                                  num_layers, num_stages, vocab_size);
      if (!split.ok()) return split.status();
      plan.head_split = *split;
    }
  }
  plan.vocab_size = vocab_size;
  plan.stage_cost = StageCosts(totals, plan.boundaries, plan.head_split, vocab_size);
  double sum = 0;
  for (double c : plan.stage_cost) sum += c;
  for (double c : plan.stage_cost) plan.cost_share.push_back(sum > 0 ? c / sum : 0);
  return plan;
}

absl::StatusOr<PartitionPlan> PlanPartition(const v1::JobSpec& spec) {
  // No head split where the schedule lets the stage before the last run too
  // far ahead (kHeadSplitMaxInFlight; ValidateJobSpec refuses an explicit one).
  return PlanFromShape(ModelShapeFromSpec(spec), spec.pipeline().num_stages(),
                       spec.pipeline().partition(), HeadSplitFitsSchedule(spec.pipeline()));
}

}  // namespace paci
