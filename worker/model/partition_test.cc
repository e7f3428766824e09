#include "worker/model/partition.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

double Slowest(const std::vector<double>& costs, const std::vector<int>& bounds) {
  double slowest = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    double c = 0;
    for (int u = bounds[s]; u < bounds[s + 1]; ++u) c += costs[u];
    slowest = std::max(slowest, c);
  }
  return slowest;
}

// Every contiguous split of U units into P non-empty stages.
void AllCuts(int U, int P, std::vector<int>& cut, std::vector<std::vector<int>>& out) {
  if (static_cast<int>(cut.size()) == P) {
    cut.push_back(U);
    out.push_back(cut);
    cut.pop_back();
    return;
  }
  const int remaining = P - static_cast<int>(cut.size());  // stages still to start
  for (int b = cut.back() + 1; b <= U - remaining; ++b) {
    cut.push_back(b);
    AllCuts(U, P, cut, out);
    cut.pop_back();
  }
}

TEST(PartitionUnitsTest, NamesAndStagePartsCoverTheModelOnce) {
  EXPECT_EQ(NumPartitionUnits(4), 10);
  EXPECT_EQ(PartitionUnitName(4, 0), "emb");
  EXPECT_EQ(PartitionUnitName(4, 1), "h0.attn");
  EXPECT_EQ(PartitionUnitName(4, 4), "h1.mlp");
  EXPECT_EQ(PartitionUnitName(4, 9), "head");
  const StagePartition p{4, 4, 10};  // h1.mlp .. head
  EXPECT_FALSE(p.has_embedding());
  EXPECT_TRUE(p.has_head());
  EXPECT_EQ(p.first_block(), 1);
  EXPECT_EQ(p.end_block(), 4);
  EXPECT_FALSE(p.has_attention(1));
  EXPECT_TRUE(p.has_mlp(1));
  EXPECT_TRUE(p.has_attention(2));
  EXPECT_FALSE(p.WholeBlocks());
  EXPECT_EQ(p.Describe(), "[4,10) h1.mlp..head");
  const StagePartition head_only{4, 9, 10};
  EXPECT_EQ(head_only.first_block(), head_only.end_block());
  EXPECT_TRUE(head_only.WholeBlocks());
  const StagePartition emb_only{4, 0, 1};
  EXPECT_EQ(emb_only.end_block(), 0);
  EXPECT_EQ(emb_only.Describe(), "[0,1) emb");
}

// "even" is the old PartitionStage: whole blocks, the first layers % P stages
// one more, embedding on the first stage, head on the last.
TEST(PartitionStageTest, EvenIsTheOldWholeBlockCut) {
  for (int layers : {1, 4, 7, 12}) {
    for (int P = 1; P <= layers; ++P) {
      int next = 0;
      for (int s = 0; s < P; ++s) {
        const StagePartition p = PartitionStage(layers, P, s);
        EXPECT_TRUE(p.WholeBlocks());
        EXPECT_EQ(p.first_block(), next);
        const int size = p.end_block() - p.first_block();
        EXPECT_EQ(size, layers / P + (s < layers % P ? 1 : 0));
        EXPECT_EQ(p.has_embedding(), s == 0);
        EXPECT_EQ(p.has_head(), s == P - 1);
        next = p.end_block();
      }
      EXPECT_EQ(next, layers);
    }
  }
  EXPECT_EQ(EvenCut(4, 2), (std::vector<int>{0, 5, 10}));
  EXPECT_EQ(EvenCut(4, 4), (std::vector<int>{0, 3, 5, 7, 10}));
}

TEST(BalancedCutTest, MatchesBruteForceOnSmallCases) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> cost(0, 20);
  for (int trial = 0; trial < 300; ++trial) {
    const int U = 1 + trial % 9;
    std::vector<double> costs(U);
    for (double& c : costs) c = cost(rng);
    for (int P = 1; P <= U; ++P) {
      const std::vector<int> got = BalancedCut(costs, P);
      ASSERT_EQ(got.size(), static_cast<size_t>(P + 1));
      ASSERT_EQ(got.front(), 0);
      ASSERT_EQ(got.back(), U);
      for (int s = 0; s < P; ++s) ASSERT_LT(got[s], got[s + 1]) << "stage " << s << " empty";
      std::vector<std::vector<int>> cuts;
      std::vector<int> start = {0};
      AllCuts(U, P, start, cuts);
      double best = 1e300;
      for (const auto& cut : cuts) best = std::min(best, Slowest(costs, cut));
      EXPECT_EQ(Slowest(costs, got), best) << "trial " << trial << " P=" << P;
    }
  }
}

TEST(BalancedCutTest, BalancesTheStagesBehindTheBottleneck) {
  // The last unit alone is the bottleneck; the rest is still split evenly.
  const std::vector<int> cut = BalancedCut({1, 1, 1, 1, 1, 1, 100}, 3);
  EXPECT_EQ(cut, (std::vector<int>{0, 3, 6, 7}));
}

ModelShape IssueShape(int vocab) {
  ModelShape m;
  m.vocab_size = vocab;
  m.num_layers = 4;
  m.d_model = 256;
  m.num_heads = 4;
  m.seq_len = 128;
  m.micro_batch_size = 4;
  m.accumulation = 4;
  return m;
}

TEST(FlopUnitCostsTest, TheHeadGrowsWithTheVocabularyAndBlocksAreAlike) {
  const std::vector<UnitCost> small = FlopUnitCosts(IssueShape(256));
  const std::vector<UnitCost> large = FlopUnitCosts(IssueShape(8192));
  ASSERT_EQ(small.size(), 10u);
  for (int b = 1; b < 4; ++b) {
    EXPECT_DOUBLE_EQ(small[1 + 2 * b].total(), small[1].total());
    EXPECT_DOUBLE_EQ(small[2 + 2 * b].total(), small[2].total());
  }
  EXPECT_GT(small[2].total(), small[1].total());  // the MLP half outweighs attention
  EXPECT_LT(small[9].total(), small[1].total() + small[2].total());
  // At vocabulary 8,192 the head outweighs two blocks (the issue's measurement).
  EXPECT_GT(large[9].total(), 2 * (large[1].total() + large[2].total()));
  for (const UnitCost& c : large) EXPECT_GT(c.backward, c.forward);
}

// llama's units as its shape says: grouped-query attention projects fewer keys
// and values, SwiGLU's three matrices at 8d/3 cost what GPT-2's two at 4d do,
// and the embedding has no position table.
TEST(FlopUnitCostsTest, LlamasCostsFollowItsKeyHeadsAndSwiGlu) {
  ModelShape gpt2 = IssueShape(256);
  gpt2.ffn_hidden_size = 4 * gpt2.d_model;
  ModelShape llama = gpt2;
  llama.architecture = Architecture::kLlama;
  llama.ffn_hidden_size = 8 * llama.d_model / 3;
  ModelShape grouped = llama;
  grouped.num_kv_heads = 1;
  const std::vector<UnitCost> g = FlopUnitCosts(gpt2), l = FlopUnitCosts(llama),
                              q = FlopUnitCosts(grouped);
  ASSERT_EQ(l.size(), g.size());
  EXPECT_LT(q[1].forward, l[1].forward);  // one key/value head: a smaller qkv matmul
  EXPECT_LT(q[1].optimizer, l[1].optimizer);
  EXPECT_DOUBLE_EQ(q[2].total(), l[2].total());  // the MLP does not care
  EXPECT_NEAR(l[2].forward / g[2].forward, 1.0, 0.05);
  EXPECT_LT(l[0].optimizer, g[0].optimizer);  // no learned positions
  EXPECT_GT(FlopUnitCosts([&] {
              ModelShape wider = llama;
              wider.ffn_hidden_size *= 2;
              return wider;
            }())[2].forward,
            1.9 * l[2].forward);
}

// The memory estimate at P = 2, balanced: only the stages holding the embedding
// or the head grow with the vocabulary, the head's by its logits as well as
// its weights; micro-batches in flight multiply the activations, not the
// weights; bf16 weights halve the activations.
TEST(StageMemoryTest, TheVocabularyGrowsTheEndStagesAndInFlightTheActivations) {
  const ModelShape small = IssueShape(256), large = IssueShape(32768);
  const StagePartition first{4, 0, 5}, last{4, 5, 10};
  const StageMemory first_small = EstimateStageMemory(small, first, 2, Precision::kFp32);
  const StageMemory last_small = EstimateStageMemory(small, last, 1, Precision::kFp32);
  const StageMemory last_large = EstimateStageMemory(large, last, 1, Precision::kFp32);
  EXPECT_GT(EstimateStageMemory(large, first, 2, Precision::kFp32).parameters, first_small.parameters);
  const StageMemory middle_small = EstimateStageMemory(small, {4, 3, 6}, 1, Precision::kFp32);
  EXPECT_EQ(EstimateStageMemory(large, {4, 3, 6}, 1, Precision::kFp32).total(), middle_small.total());
  EXPECT_EQ(first_small.logits, 0);
  EXPECT_GT(last_large.logits, 100 * last_small.logits);
  // [512 tokens, 32,768] in float32 is 64 MiB, kept per micro-batch in flight.
  EXPECT_NEAR(last_large.logits / (1 << 20), 64, 1e-9);
  const StageMemory two = EstimateStageMemory(small, first, 2, Precision::kFp32);
  const StageMemory four = EstimateStageMemory(small, first, 4, Precision::kFp32);
  EXPECT_DOUBLE_EQ(four.activations, 2 * two.activations);
  EXPECT_DOUBLE_EQ(four.parameters, two.parameters);
  EXPECT_DOUBLE_EQ(EstimateStageMemory(small, first, 2, Precision::kBf16Weights).activations, two.activations / 2);
  EXPECT_GT(last_large.total(), last_large.parameters + last_large.logits);
  // Under bf16 the matmul's bfloat16 logits sit beside their float32 copy; autocast
  // also keeps bfloat16 copies of the head's weight and input.
  const StageMemory autocast = EstimateStageMemory(large, last, 1, Precision::kBf16Autocast);
  EXPECT_NEAR(autocast.logits - last_large.logits,
              512.0 * 32768 * 2 + (32768.0 * 256 + 512 * 256) * 2, 1e-6);
  EXPECT_NE(last_large.Describe().find("the head's logits 0.06 GiB"), std::string::npos)
      << last_large.Describe();
}

TEST(PlanPartitionTest, BalancedMovesBlocksOffTheHeadsStage) {
  absl::StatusOr<PartitionPlan> even = PlanPartition(IssueShape(8192), 2, "even");
  absl::StatusOr<PartitionPlan> balanced = PlanPartition(IssueShape(8192), 2, "balanced");
  ASSERT_TRUE(even.ok() && balanced.ok());
  EXPECT_EQ(even->boundaries, (std::vector<int>{0, 5, 10}));
  EXPECT_GT(balanced->boundaries[1], 5);
  EXPECT_LT(*std::max_element(balanced->stage_cost.begin(), balanced->stage_cost.end()),
            *std::max_element(even->stage_cost.begin(), even->stage_cost.end()));
  double sum = 0;
  for (double share : balanced->cost_share) sum += share;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_EQ(balanced->Stage(1).end_unit, 10);
  // The default is balanced.
  EXPECT_EQ(PlanPartition(IssueShape(8192), 2, "")->boundaries, balanced->boundaries);
}

// The cuts that timing each unit alone gives (paci_worker --profile_units on
// one thread, with the fused loss), and the fastest of the cuts measured at
// vocabulary 8,192 (docs/benchmarks.md, "The cost model after the fusion"):
// the head's stage takes the last block whole at 8,192, nothing else at 32,768.
TEST(PlanPartitionTest, BalancedIsTheMeasuredCutAtLargeVocabularies) {
  EXPECT_EQ(PlanPartition(IssueShape(8192), 2, "balanced")->boundaries, (std::vector<int>{0, 7, 10}));
  EXPECT_EQ(PlanPartition(IssueShape(32768), 2, "balanced")->boundaries, (std::vector<int>{0, 9, 10}));
  EXPECT_EQ(PlanPartition(IssueShape(256), 2, "balanced")->boundaries, (std::vector<int>{0, 5, 10}));
  // The head's backward is its two matmuls (and its weight gradient's pass):
  // the loss's passes over [N, V] are all in its forward.
  const UnitCost head = FlopUnitCosts(IssueShape(32768)).back();
  const double N = 4 * 128, d = 256, V = 32768;
  EXPECT_GT(head.forward, 2 * N * d * V + kElementPassFlops * kFusedLossPasses * N * V - 1);
  EXPECT_LT(head.backward, 4 * N * d * V * 1.03);
}

// Where the head outweighs a stage's share, "balanced" splits it by
// vocabulary: the stage before the last computes the head's first rows, the
// last stage the rest of the head alone, and the slowest stage is cheaper by
// at least kHeadSplitMinGain than the best cut on unit boundaries. Where the
// head is small, nothing is split.
TEST(PlanPartitionTest, BalancedSplitsTheHeadByVocabularyWhereItOutweighsAStage) {
  for (int P : {2, 3}) {
    SCOPED_TRACE(P);
    absl::StatusOr<PartitionPlan> plan = PlanPartition(IssueShape(32768), P, "balanced");
    ASSERT_TRUE(plan.ok()) << plan.status();
    const int64_t rows = plan->head_split;
    ASSERT_GT(rows, 0);
    EXPECT_EQ(rows % kHeadSplitRowMultiple, 0);
    EXPECT_EQ(plan->boundaries[P - 1], 9);  // the head alone on the last stage
    const StagePartition before = plan->Stage(P - 2), last = plan->Stage(P - 1);
    EXPECT_TRUE(before.has_head_shard());
    EXPECT_FALSE(before.has_head());
    EXPECT_EQ(before.head_row_begin, 0);
    EXPECT_EQ(before.head_row_end, rows);
    EXPECT_EQ(last.head_row_begin, rows);
    EXPECT_EQ(last.head_row_end, 32768);
    EXPECT_EQ(last.Describe(), absl::StrCat("[9,10) head head rows [", rows, ",32768)"));
    EXPECT_FALSE(plan->Stage(0).head_split() && P > 2);
    // Cheaper than the best cut on unit boundaries, by the margin asked.
    std::vector<double> totals;
    for (const UnitCost& c : FlopUnitCosts(IssueShape(32768))) totals.push_back(c.total());
    const std::vector<int> unsplit = BalancedCut(totals, P);
    double slowest_unsplit = 0;
    for (int s = 0; s < P; ++s) {
      double c = 0;
      for (int u = unsplit[s]; u < unsplit[s + 1]; ++u) c += totals[u];
      slowest_unsplit = std::max(slowest_unsplit, c);
    }
    const double slowest = *std::max_element(plan->stage_cost.begin(), plan->stage_cost.end());
    EXPECT_LT(slowest, slowest_unsplit * (1 - kHeadSplitMinGain));
    // The rows move the head's cost pro rata: the stages still sum to the model.
    double sum = 0;
    for (double c : plan->stage_cost) sum += c;
    double model = 0;
    for (double t : totals) model += t;
    EXPECT_NEAR(sum, model, 1e-6 * model);
  }
  for (int vocab : {256, 8192}) {
    EXPECT_EQ(PlanPartition(IssueShape(vocab), 2, "balanced")->head_split, 0) << vocab;
  }
  EXPECT_EQ(PlanPartition(IssueShape(32768), 1, "balanced")->head_split, 0);
  EXPECT_EQ(PlanPartition(IssueShape(32768), 2, "even")->head_split, 0);
}

TEST(PlanPartitionTest, AnExplicitHeadSplitIsUsedOrRefusedNamingTheField) {
  absl::StatusOr<PartitionPlan> plan = PlanPartition(IssueShape(8192), 2, "7/1024");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->boundaries, (std::vector<int>{0, 7, 10}));
  EXPECT_EQ(plan->head_split, 1024);
  EXPECT_EQ(plan->Stage(0).Describe(), "[0,7) emb..h2.mlp head rows [0,1024)");
  EXPECT_EQ(plan->Stage(1).head_row_begin, 1024);
  EXPECT_EQ(PlanPartition(IssueShape(8192), 2, "7")->head_split, 0);
  for (const char* bad : {"7/0", "7/8192", "7/x", "7/-3"}) {
    absl::StatusOr<PartitionPlan> refused = PlanPartition(IssueShape(8192), 2, bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("pipeline.partition"), std::string::npos)
        << refused.status();
  }
  absl::StatusOr<PartitionPlan> alone = PlanPartition(IssueShape(8192), 1, "/100");
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("two stages or more"), std::string::npos)
      << alone.status();
}

// What a stage holds of a split head counts in its memory estimate: the rows'
// weight and AdamW, and their softmax, on the stage before the last; the rest
// on the last stage.
TEST(StageMemoryTest, ASplitHeadsRowsCountWhereTheyAre) {
  const ModelShape shape = IssueShape(32768);
  const PartitionPlan plan = *PlanPartition(shape, 2, "9/8192");
  const PartitionPlan whole = *PlanPartition(shape, 2, "9");
  const StageMemory before = EstimateStageMemory(shape, plan.Stage(0), 2, Precision::kFp32);
  const StageMemory last = EstimateStageMemory(shape, plan.Stage(1), 1, Precision::kFp32);
  const StageMemory before_whole = EstimateStageMemory(shape, whole.Stage(0), 2, Precision::kFp32);
  const StageMemory last_whole = EstimateStageMemory(shape, whole.Stage(1), 1, Precision::kFp32);
  const double moved = 8192.0 * 256 * 16;  // weight, gradient and two moments, float32
  EXPECT_NEAR(before.parameters - before_whole.parameters, moved, 1);
  EXPECT_NEAR(last_whole.parameters - last.parameters, moved, 1);
  EXPECT_GT(before.logits, 0);
  EXPECT_NEAR(last.logits / last_whole.logits, 24576.0 / 32768, 1e-9);
}

TEST(PlanPartitionTest, ExplicitBoundariesAreUsedOrRefusedNamingTheField) {
  absl::StatusOr<PartitionPlan> plan = PlanPartition(IssueShape(256), 4, "2,5,8");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->mode, "explicit");
  EXPECT_EQ(plan->boundaries, (std::vector<int>{0, 2, 5, 8, 10}));
  EXPECT_EQ(plan->Stage(1).Describe(), "[2,5) h0.mlp..h1.mlp");
  for (const char* bad : {"2,5", "5,2,8", "0,5,8", "2,5,10", "2,x,8", "2,,8"}) {
    absl::StatusOr<PartitionPlan> refused = PlanPartition(IssueShape(256), 4, bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("pipeline.partition"), std::string::npos)
        << refused.status();
  }
  EXPECT_FALSE(PlanPartition(IssueShape(256), 11, "balanced").ok());
}

TEST(PlanPartitionTest, GivenUnitCostsAreCutAsTheyAre) {
  // Measured costs (seconds) of 2 layers: emb, h0.attn, h0.mlp, h1.attn, h1.mlp, head.
  const std::vector<UnitCost> units = {{1, 1, 0}, {2, 3, 0}, {3, 5, 0}, {2, 3, 0}, {3, 5, 0},
                                       {10, 20, 2}};
  absl::StatusOr<PartitionPlan> plan = PlanPartitionWithCosts(units, 2, "balanced");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->boundaries, (std::vector<int>{0, 5, 6}));  // 27 against 32
  EXPECT_DOUBLE_EQ(plan->stage_cost[1], 32);
  EXPECT_EQ(PlanPartitionWithCosts(units, 2, "even")->boundaries, (std::vector<int>{0, 3, 6}));
  EXPECT_FALSE(PlanPartitionWithCosts(units, 3, "even").ok());  // more stages than layers
  EXPECT_FALSE(PlanPartitionWithCosts({{1, 1, 0}}, 1, "balanced").ok());
}

}  // namespace
}  // namespace paci
