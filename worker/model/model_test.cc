#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/adamw.h"
#include "worker/model/gpt.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/partition.h"
#include "worker/model/precision.h"
#include "worker/model/test_models.h"
#include "worker/model/unit_profile.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

GptConfig TinyConfig() {
  GptConfig c = TinyGpt({/*vocab_size=*/23, /*num_layers=*/4, /*d_model=*/32, /*num_heads=*/4,
                         /*seq_len=*/16});
  c.init_seed = 7;
  return c;
}

// A llama of the same size: grouped-query attention, SwiGLU, RMSNorm, RoPE.
GptConfig TinyLlama() { return paci::TinyLlama(TinyConfig()); }

// The attention (LibTorch's fused scaled_dot_product_attention) is
// softmax(q k^T / sqrt(d_head), causal) v.
TEST(GptStageTest, AttentionIsCausalSoftmaxAttention) {
  const GptConfig c = TinyConfig();
  torch::manual_seed(5);
  CausalSelfAttention attention(c);
  const int64_t B = 2, T = c.seq_len, D = c.d_model, H = c.num_heads;
  const torch::Tensor x = torch::randn({B, T, D});
  std::map<std::string, torch::Tensor> w;
  for (const auto& item : attention->named_parameters()) w[item.key()] = item.value().detach();
  auto qkv = torch::linear(x, w["qkv.weight"], w["qkv.bias"]).view({B, T, 3, H, D / H});
  auto q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2),
       v = qkv.select(2, 2).transpose(1, 2);
  auto scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(D / H));
  scores = scores.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -1e30);
  auto y = scores.softmax(-1).matmul(v).transpose(1, 2).reshape({B, T, D});
  const torch::Tensor expected = torch::linear(y, w["proj.weight"], w["proj.bias"]);
  const torch::Tensor out = attention(x);
  EXPECT_TRUE(torch::allclose(out, expected, 1e-5, 1e-6));
  // Causal: a change at the last position leaves the others as they were.
  torch::Tensor changed = x.clone();
  changed.select(1, T - 1).add_(1.0);
  const torch::Tensor out2 = attention(changed);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::allclose(out.index({Slice(), Slice(0, T - 1)}),
                              out2.index({Slice(), Slice(0, T - 1)}), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(out.index({Slice(), T - 1}), out2.index({Slice(), T - 1})));
}

// The fused head and loss against the unfused one: the same loss and the same
// gradients of the hidden state and the head's weight, over a vocabulary
// large enough that the loss's passes take the logits two rows at a time with
// a last chunk of one (37 rows); without grad mode, the loss alone.
TEST(LinearCrossEntropyTest, MatchesTheHeadsLogitsAndCrossEntropyWithTheirGradients) {
  torch::manual_seed(5);
  const int64_t N = 37, d = 16, V = 100000;  // 2 rows of 100,000 floats per 1 MiB chunk
  const torch::Tensor hidden0 = torch::randn({N, d}), weight0 = 0.3 * torch::randn({V, d});
  const torch::Tensor targets = torch::randint(V, {N}, torch::kLong);
  torch::Tensor h1 = hidden0.clone().requires_grad_(), w1 = weight0.clone().requires_grad_();
  const torch::Tensor reference = LanguageModelLoss(torch::mm(h1, w1.t()), targets);
  (3 * reference).backward();  // a scale, as the accumulation's 1/a is
  torch::Tensor h2 = hidden0.clone().requires_grad_(), w2 = weight0.clone().requires_grad_();
  const torch::Tensor fused = LinearCrossEntropy(h2, w2, targets);
  EXPECT_EQ(fused.scalar_type(), torch::kFloat);
  EXPECT_NEAR(fused.item<double>(), reference.item<double>(), 1e-5 * reference.item<double>());
  (3 * fused).backward();
  EXPECT_TRUE(torch::allclose(h2.grad(), h1.grad(), 1e-4, 1e-7));
  EXPECT_TRUE(torch::allclose(w2.grad(), w1.grad(), 1e-4, 1e-9));
  torch::NoGradGuard no_grad;
  EXPECT_NEAR(LinearCrossEntropy(hidden0, weight0, targets).item<double>(), reference.item<double>(),
              1e-5 * reference.item<double>());
}

// The last stage's training path, GptStage::Loss (the head and loss fused),
// gives the unfused forward's loss and gradients for both architectures, in
// float32 and under bf16 autocast.
TEST(LinearCrossEntropyTest, AStagesLossIsItsLogitsCrossEntropyWithTheSameGradients) {
  for (const GptConfig& c : {TinyConfig(), TinyLlama()}) {
    SCOPED_TRACE(c.llama() ? "llama" : "gpt2");
    torch::manual_seed(2);
    const auto tokens = torch::randint(c.vocab_size, {3, c.seq_len}, torch::kLong);
    const auto targets = torch::randint(c.vocab_size, {3, c.seq_len}, torch::kLong);
    GptStage unfused(c, PartitionStage(c.num_layers, 1, 0)), fused(c, PartitionStage(c.num_layers, 1, 0));
    const torch::Tensor expected = LanguageModelLoss(unfused(tokens), targets);
    expected.backward();
    const torch::Tensor loss = fused->Loss(tokens, targets);
    loss.backward();
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>());
    auto want = unfused->named_parameters();
    for (const auto& item : fused->named_parameters()) {
      EXPECT_TRUE(torch::allclose(item.value().grad(), want[item.key()].grad(), 1e-3, 1e-6))
          << item.key();
    }
    StagePlacement placement = *ResolvePlacement("cpu", "bf16-autocast");
    AutocastScope autocast(placement);
    EXPECT_NEAR(fused->Loss(tokens, targets).item<double>(), expected.item<double>(),
                0.02 * expected.item<double>());
  }
}

TEST(GptStageTest, SplitModelMatchesUnsplitForwardAndGradients) {
  for (const GptConfig& c : {TinyConfig(), TinyLlama()}) {
    SCOPED_TRACE(c.llama() ? "llama" : "gpt2");
    torch::manual_seed(0);
    const auto tokens = torch::randint(c.vocab_size, {3, c.seq_len}, torch::kLong);
    const auto targets = torch::randint(c.vocab_size, {3, c.seq_len}, torch::kLong);

    GptStage full(c, PartitionStage(c.num_layers, 1, 0));
    auto full_logits = full(tokens);
    LanguageModelLoss(full_logits, targets).backward();

    // Even cuts of whole blocks, and cuts inside blocks (units of
    // worker/model/partition.h: 0 emb, 2b+1 / 2b+2 block b's halves, 9 head).
    std::vector<std::vector<int>> cuts;
    for (int P : {2, 3, 4}) cuts.push_back(EvenCut(c.num_layers, P));
    cuts.push_back({0, 2, 10});           // emb + h0.attn | the rest
    cuts.push_back({0, 1, 4, 9, 10});     // emb | h0..h1.attn | h1.mlp..h3 | head
    cuts.push_back({0, 3, 6, 8, 10});     // ends after h0, inside h2, inside h3
    for (const std::vector<int>& cut : cuts) {
      const int P = static_cast<int>(cut.size()) - 1;
      std::vector<GptStage> stages;
      for (int s = 0; s < P; ++s) {
        stages.emplace_back(c, StagePartition{c.num_layers, cut[s], cut[s + 1]});
      }
      // Run it as the workers do: each stage's input is a fresh leaf.
      std::vector<torch::Tensor> inputs, outputs;
      torch::Tensor x = tokens;
      for (int s = 0; s < P; ++s) {
        if (s > 0) x = x.detach().requires_grad_(true);
        inputs.push_back(x);
        outputs.push_back(stages[s](x));
        x = outputs.back();
      }
      ASSERT_TRUE(torch::allclose(outputs.back(), full_logits, 1e-5, 1e-6)) << "P=" << P;
      LanguageModelLoss(outputs.back(), targets).backward();
      for (int s = P - 2; s >= 0; --s) outputs[s].backward(inputs[s + 1].grad());

      std::map<std::string, torch::Tensor> full_params;
      for (auto& item : full->named_parameters()) full_params[item.key()] = item.value();
      size_t matched = 0;
      for (auto& stage : stages) {
        for (auto& item : stage->named_parameters()) {
          const auto& reference = full_params.at(item.key());
          ASSERT_TRUE(torch::equal(item.value(), reference)) << item.key();
          ASSERT_TRUE(torch::allclose(item.value().grad(), reference.grad(), 1e-5, 1e-7))
              << "P=" << P << " " << item.key();
          ++matched;
        }
      }
      EXPECT_EQ(matched, full_params.size());
    }
  }
}

// The head split by vocabulary between the last two stages: the stage before
// the last computes the first rows' part from the final norm's output, the
// last stage its own and the loss over both, and the first part's weight
// gradient comes from the scale the last stage sends back. Loss and every
// gradient are the whole head's, in each row's place; so is the evaluation's
// loss with the first rows lent.
TEST(GptStageTest, AHeadSplitByVocabularyGivesTheWholeHeadsLossAndGradients) {
  for (const GptConfig& c : {TinyConfig(), TinyLlama()}) {
    for (int64_t rows : {1, 9, 22}) {
      SCOPED_TRACE(absl::StrCat(c.llama() ? "llama" : "gpt2", " rows ", rows));
      torch::manual_seed(3);
      const auto tokens = torch::randint(c.vocab_size, {3, c.seq_len}, torch::kLong);
      const auto targets = torch::randint(c.vocab_size, {3, c.seq_len}, torch::kLong);
      GptStage full(c, PartitionStage(c.num_layers, 1, 0));
      const torch::Tensor expected = LanguageModelLoss(full(tokens), targets);
      (3 * expected).backward();

      StagePartition first{c.num_layers, 0, 7, 0, rows};
      StagePartition last{c.num_layers, 7, 10, rows, c.vocab_size};
      GptStage stage0(c, first), stage1(c, last);
      ASSERT_EQ(stage0->HeadRows(), std::make_pair(int64_t{0}, rows));
      const torch::Tensor out0 = stage0(tokens);
      const torch::Tensor in1 = out0.detach().requires_grad_(true);
      const torch::Tensor hidden = stage1->Hidden(in1);
      const torch::Tensor flat = hidden.reshape({-1, c.d_model});
      const torch::Tensor flat_targets = targets.reshape({-1});
      HeadShardPart other =
          HeadShardForward(flat.detach(), stage0->head_weight(), flat_targets, 0);
      HeadShardPart own =
          HeadShardForward(flat.detach(), stage1->head_weight(), flat_targets, rows);
      torch::Tensor scale;
      const torch::Tensor loss =
          SplitHeadLoss(flat, stage1->head_weight(), own, PackHeadShard(other), &scale);
      EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>());
      (3 * loss).backward();
      const double factor = 3.0 / static_cast<double>(flat.size(0));
      torch::Tensor first_rows_gradient = HeadShardWeightGradient(other, scale, factor);
      out0.backward(in1.grad());

      std::map<std::string, torch::Tensor> want;
      for (auto& item : full->named_parameters()) want[item.key()] = item.value();
      const torch::Tensor& head = want.at("head.weight");
      EXPECT_TRUE(torch::equal(stage0->head_weight(), head.narrow(0, 0, rows)));
      EXPECT_TRUE(torch::equal(stage1->head_weight(), head.narrow(0, rows, c.vocab_size - rows)));
      EXPECT_TRUE(torch::allclose(first_rows_gradient, head.grad().narrow(0, 0, rows), 1e-4, 1e-6));
      for (GptStage* stage : {&stage0, &stage1}) {
        for (auto& item : (*stage)->named_parameters()) {
          if (item.key() == "head.weight" && stage == &stage0) continue;  // its gradient: above
          const torch::Tensor reference =
              StageRowsOf(**stage, item.key(), want.at(item.key()).grad());
          EXPECT_TRUE(torch::allclose(item.value().grad(), reference, 1e-4, 1e-6)) << item.key();
        }
      }
      torch::NoGradGuard no_grad;
      EXPECT_NEAR(stage1->Loss(in1, targets, stage0->head_weight()).item<double>(),
                  expected.item<double>(), 1e-5 * expected.item<double>());
    }
  }
}

// Under bf16 autocast the split head's matmuls run in bfloat16 as the whole
// head's do: its loss and its two parts' weight gradients are the fused whole
// head's under autocast, within bfloat16's rounding.
TEST(GptStageTest, UnderBf16AutocastAHeadSplitGivesTheWholeHeadsLossAndGradients) {
  const GptConfig c = TinyConfig();
  const int64_t rows = 9;
  torch::manual_seed(4);
  const torch::Tensor hidden = torch::randn({3 * c.seq_len, c.d_model});
  const torch::Tensor targets = torch::randint(c.vocab_size, {3 * c.seq_len}, torch::kLong);
  const torch::Tensor weight = torch::randn({c.vocab_size, c.d_model}) * 0.3;
  StagePlacement placement = *ResolvePlacement("cpu", "bf16-autocast");
  AutocastScope autocast(placement);

  const torch::Tensor whole_hidden = hidden.clone().requires_grad_(true);
  const torch::Tensor whole_weight = weight.clone().requires_grad_(true);
  const torch::Tensor expected = LinearCrossEntropy(whole_hidden, whole_weight, targets);
  expected.backward();

  const torch::Tensor first = weight.narrow(0, 0, rows).clone();
  const torch::Tensor last = weight.narrow(0, rows, c.vocab_size - rows).clone().requires_grad_(true);
  const torch::Tensor split_hidden = hidden.clone().requires_grad_(true);
  HeadShardPart other = HeadShardForward(hidden, first, targets, 0);
  HeadShardPart own = HeadShardForward(hidden, last, targets, rows);
  EXPECT_EQ(own.hidden.scalar_type(), torch::kBFloat16);  // the matmuls' type
  torch::Tensor scale;
  const torch::Tensor loss = SplitHeadLoss(split_hidden, last, own, PackHeadShard(other), &scale);
  loss.backward();
  const torch::Tensor first_gradient =
      HeadShardWeightGradient(other, scale, 1.0 / static_cast<double>(hidden.size(0)));

  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 0.01 * expected.item<double>());
  const torch::Tensor& want = whole_weight.grad();
  const double tolerance = 0.02 * want.abs().max().item<double>();
  EXPECT_EQ(first_gradient.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(first_gradient, want.narrow(0, 0, rows), 0.0, tolerance));
  EXPECT_TRUE(torch::allclose(last.grad(), want.narrow(0, rows, c.vocab_size - rows), 0.0,
                              tolerance));
  EXPECT_TRUE(torch::allclose(split_hidden.grad(), whole_hidden.grad(), 0.0,
                              0.02 * whole_hidden.grad().abs().max().item<double>()));
}

// --profile_units' report: each unit timed, and the balanced plan's head
// split under the measured costs and under the model's, the latter the very
// split the workers make (PlanPartition of the spec).
TEST(UnitProfileTest, TheReportGivesTheHeadSplitUnderMeasuredAndModelCosts) {
  v1::JobSpec spec;
  v1::ModelSpec& model = *spec.mutable_model();
  model.set_vocab_size(8192);  // a head far heavier than the one block
  model.set_num_layers(1);
  model.set_d_model(16);
  model.set_num_heads(2);
  model.set_seq_len(8);
  spec.mutable_pipeline()->set_num_stages(2);
  spec.mutable_pipeline()->set_micro_batch_size(2);
  spec.mutable_pipeline()->set_accumulation(2);
  spec.mutable_pipeline()->set_schedule("paci");
  const std::string report = UnitProfileReport(spec, torch::Device("cpu"));
  const auto field = [&](const std::string& name) -> int64_t {
    const size_t at = report.find("\"" + name + "\": ");
    EXPECT_NE(at, std::string::npos) << name << " in " << report;
    return at == std::string::npos ? -1 : std::stoll(report.substr(at + name.size() + 4));
  };
  const int64_t model_split = field("model_head_split"), measured = field("measured_head_split");
  EXPECT_EQ(model_split, PlanPartition(spec)->head_split);
  EXPECT_GT(model_split, 0);
  EXPECT_EQ(measured % kHeadSplitRowMultiple, 0);
  EXPECT_LT(measured, 8192);
  EXPECT_NE(report.find("\"name\": \"head\""), std::string::npos);
}

// The in-place update trap of docs/design.md section 3: a micro-batch forwarded
// before an optimizer step has its backward after it.
TEST(InFlightBackwardTest, TorchOptimAdamWBreaksAPendingBackward) {
  torch::manual_seed(1);
  torch::nn::Linear layer(4, 3);
  auto x = torch::randn({2, 4}, torch::requires_grad());
  auto y = torch::tanh(layer(x));  // tanh saves its output; Linear saves the weight
  layer(torch::randn({2, 4})).sum().backward();
  torch::optim::AdamW adamw(layer->parameters(), torch::optim::AdamWOptions(0.1));
  adamw.step();
  EXPECT_THROW(y.sum().backward(), c10::Error);
}

TEST(InFlightBackwardTest, PaciAdamWLetsThePendingBackwardRunWithTheUpdatedWeights) {
  torch::manual_seed(1);
  torch::nn::Linear layer(4, 3);
  auto x = torch::randn({2, 4}, torch::requires_grad());
  auto y = layer(x);  // micro-batch 1 in flight
  const auto weight_at_forward = layer->weight.detach().clone();

  // Micro-batch 0's backward, then the optimizer step.
  layer(torch::randn({2, 4})).sum().backward();
  AdamW adamw({{"weight", layer->weight}, {"bias", layer->bias}}, AdamWOptions{});
  adamw.Step(0.1);
  adamw.ZeroGrad();
  const auto weight_after_step = layer->weight.detach().clone();
  ASSERT_FALSE(torch::allclose(weight_at_forward, weight_after_step));

  const auto grad_out = torch::randn({2, 3});
  ASSERT_NO_THROW(y.backward(grad_out));
  // The input gradient uses the weights as they are now, not as they were.
  EXPECT_TRUE(torch::allclose(x.grad(), grad_out.mm(weight_after_step)));
  EXPECT_FALSE(torch::allclose(x.grad(), grad_out.mm(weight_at_forward)));
  // The weight gradient uses the saved input.
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), grad_out.t().mm(x.detach())));
}

TEST(AdamWTest, MatchesTorchOptimAdamWStepForStep) {
  torch::manual_seed(3);
  torch::nn::Linear ours(5, 4), theirs(5, 4);
  {
    torch::NoGradGuard no_grad;
    theirs->weight.copy_(ours->weight);
    theirs->bias.copy_(ours->bias);
  }
  AdamW adamw({{"weight", ours->weight}, {"bias", ours->bias}},
              AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  // torch applies weight decay to every tensor in a group: give the bias its own group.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{theirs->weight},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(std::vector<torch::Tensor>{theirs->bias},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(0.01));
  for (int step = 0; step < 5; ++step) {
    const auto input = torch::randn({8, 5});
    ours(input).pow(2).sum().backward();
    theirs(input).pow(2).sum().backward();
    adamw.Step(0.01);
    reference.step();
    EXPECT_TRUE(adamw.last_step_fused());  // the CPU runs the fused kernel too
    adamw.ZeroGrad();
    reference.zero_grad();
    ASSERT_TRUE(torch::allclose(ours->weight, theirs->weight, 1e-6, 1e-7)) << step;
    ASSERT_TRUE(torch::allclose(ours->bias, theirs->bias, 1e-6, 1e-7)) << step;
  }
  EXPECT_EQ(adamw.steps(), 5);
}

// Parameters with given gradients, the same on every device: the optimizer alone.
std::vector<std::pair<std::string, torch::Tensor>> ParametersWithGradients(
    torch::Device device, torch::ScalarType dtype, int step) {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  const std::vector<std::vector<int64_t>> shapes = {{48, 32}, {32}, {7, 5, 3}, {1}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(100 * step + i);
    torch::Tensor p = at::normal(0.0, 0.1, shapes[i], gen).to(dtype).to(device);
    params.emplace_back("p" + std::to_string(i), p.requires_grad_(true));
  }
  return params;
}

void SetGradients(std::vector<std::pair<std::string, torch::Tensor>>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (i == 3) continue;  // no gradient: left alone
    torch::Tensor& p = params[i].second;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * (step + 1) + i);
    p.mutable_grad() = at::normal(0.0, 1.0, p.sizes(), gen).to(p.scalar_type()).to(p.device());
  }
}

// The multi-tensor path is kept for lists the fused kernel does not take (a
// float32 parameter that is not dense, as a strided view is): the same update.
TEST(AdamWTest, TheFusedKernelAndTheMultiTensorOpsMakeTheSameUpdate) {
  auto dense = ParametersWithGradients(torch::kCPU, torch::kFloat, 0);
  auto strided = ParametersWithGradients(torch::kCPU, torch::kFloat, 0);
  // Every other column of a tensor twice as wide: the same values, not dense.
  torch::Tensor view = torch::zeros({48, 64}).slice(1, 0, 64, 2);
  {
    torch::NoGradGuard no_grad;
    view.copy_(strided[0].second);
  }
  strided[0].second = view.requires_grad_(true);
  ASSERT_FALSE(strided[0].second.is_non_overlapping_and_dense());
  AdamW fused(dense, AdamWOptions{}), multi_tensor(strided, AdamWOptions{});
  for (int step = 0; step < 5; ++step) {
    SetGradients(dense, step);
    SetGradients(strided, step);
    fused.Step(0.01);
    multi_tensor.Step(0.01);
    EXPECT_TRUE(fused.last_step_fused());
    EXPECT_FALSE(multi_tensor.last_step_fused());
    fused.ZeroGrad();
    multi_tensor.ZeroGrad();
  }
  for (size_t i = 0; i < dense.size(); ++i) {
    EXPECT_TRUE(torch::allclose(dense[i].second, strided[i].second, 1e-5, 1e-6)) << dense[i].first;
  }
  EXPECT_FALSE(torch::equal(dense[0].second, ParametersWithGradients(torch::kCPU, torch::kFloat, 0)[0].second));
}

TEST(AdamWTest, ParametersWithoutAGradientAreLeftAlone) {
  auto params = ParametersWithGradients(torch::kCPU, torch::kFloat, 0);
  const torch::Tensor before = params[3].second.detach().clone();
  AdamW adamw(params, AdamWOptions{});
  for (int step = 0; step < 3; ++step) {
    SetGradients(params, step);
    adamw.Step(0.01);
    adamw.ZeroGrad();
  }
  EXPECT_TRUE(torch::equal(params[3].second, before));
  EXPECT_FALSE(params[3].second.grad().defined());
  EXPECT_FALSE(params[1].second.grad().defined());  // dropped by ZeroGrad
  for (const auto& [name, t] : adamw.State()) {
    if (name == "exp_avg/p3" || name == "exp_avg_sq/p3") {
      EXPECT_EQ(t.abs().sum().item<double>(), 0);
    }
  }
}

// pipeline.drift_correction "predict", by hand: one scalar, gradient 0.5, one
// step of lr 0.1 (beta1 0.9, beta2 0.95): m = 0.05, v = 0.0125, bias
// corrections 0.1 and 0.05, so m_hat = 0.5, sqrt(v_hat) = 0.5 and the step
// moves w from 1 to 0.9. Looking two steps ahead at lr 0.1 (lr_steps 0.2)
// moves it 0.2 * 0.5 / 0.5 further, to 0.7; Retract brings it back.
TEST(AdamWTest, ExtrapolateMovesAlongTheUpdateByHandAndRetractMovesBack) {
  torch::Tensor w = torch::ones({1}).requires_grad_(true);
  AdamWOptions options;
  options.weight_decay = 0;
  AdamW adamw({{"w", w}}, options);
  adamw.Extrapolate(0.2);  // no moments yet: nothing to extrapolate
  EXPECT_FLOAT_EQ(w.item<float>(), 1.0f);
  w.mutable_grad() = torch::full({1}, 0.5);
  adamw.Step(0.1);
  adamw.ZeroGrad();
  EXPECT_NEAR(w.item<double>(), 0.9, 1e-6);
  adamw.Extrapolate(0.2);
  EXPECT_NEAR(w.item<double>(), 0.7, 1e-6);
  adamw.Retract();
  EXPECT_NEAR(w.item<double>(), 0.9, 1e-6);
  // The moments are untouched: the next step is the one without the detour.
  w.mutable_grad() = torch::full({1}, 0.5);
  adamw.Step(0.1);
  // m = 0.095, v = 0.024375; bias corrections 0.19, 0.0975: m_hat 0.5, sqrt(v_hat) 0.5.
  EXPECT_NEAR(w.item<double>(), 0.8, 1e-6);
}

// pipeline.drift_correction "delay-comp", by hand (DC-ASGD-a with AdamW's
// v_hat as its mean square). After one step of lr 0.1 on gradient 0.5 (as
// above: m_hat 0.5, sqrt(v_hat) 0.5, the step moved w by -0.1), a gradient
// 0.4 that crossed that one step becomes 0.4 + 2 * 0.4^2 * (-0.1) / 0.5 =
// 0.336. On a matrix with weight decay 0.1 the step moved w from 1 to
// 0.99 - 0.1 = 0.89, a move of -0.11: 0.4 + 2 * 0.16 * (-0.11) / 0.5 = 0.3296.
// Drift 0 leaves the gradient alone.
TEST(AdamWTest, CompensateDelayAddsTheTaylorTermByHand) {
  for (const bool matrix : {false, true}) {
    SCOPED_TRACE(matrix ? "matrix with weight decay" : "vector");
    torch::Tensor w = torch::ones(matrix ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1})
                          .requires_grad_(true);
    AdamWOptions options;
    options.weight_decay = 0.1;  // matrices only
    AdamW adamw({{"w", w}}, options);
    w.mutable_grad() = torch::full_like(w, 0.5);
    adamw.CompensateDelay(0.1, 1, 2.0);  // before any step: nothing to compensate for
    EXPECT_FLOAT_EQ(w.grad().item<float>(), 0.5f);
    adamw.Step(0.1);
    adamw.ZeroGrad();
    EXPECT_NEAR(w.item<double>(), matrix ? 0.89 : 0.9, 1e-6);
    w.mutable_grad() = torch::full_like(w, 0.4);
    adamw.CompensateDelay(0.1, 0, 2.0);
    EXPECT_FLOAT_EQ(w.grad().item<float>(), 0.4f);
    adamw.CompensateDelay(0.1, 1, 2.0);
    EXPECT_NEAR(w.grad().item<double>(), matrix ? 0.3296 : 0.336, 1e-6);
  }
}

// Retract restores the parameters bit for bit, float32 (from the copy taken before the
// move) and bf16 (from the master weights) alike, however many moves, and so does
// RetractAndRelease, whose freed copy the next move takes again: replicas that predicted
// different forwards still hold the same weights.
TEST(AdamWTest, RetractRestoresTheWeightsBitForBit) {
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(5);
    torch::nn::Linear layer(16, 8);
    layer->to(dtype);
    AdamW adamw({{"weight", layer->weight}, {"bias", layer->bias}}, AdamWOptions{});
    for (int step = 0; step < 3; ++step) {
      layer(torch::randn({4, 16}).to(dtype)).to(torch::kFloat).pow(2).sum().backward();
      adamw.Step(1e-2);
      adamw.ZeroGrad();
    }
    const torch::Tensor before = layer->weight.detach().clone();
    for (double lr_steps : {5e-2, 1e-3, 3e-1}) {
      adamw.Extrapolate(lr_steps);
      EXPECT_FALSE(torch::equal(layer->weight, before));
      adamw.Retract();
      EXPECT_TRUE(torch::equal(layer->weight, before));
    }
    for (double lr_steps : {5e-2, 3e-1}) {
      adamw.Extrapolate(lr_steps);
      const torch::Tensor moved = layer->weight.detach().clone();
      EXPECT_FALSE(torch::equal(moved, before));
      adamw.RetractAndRelease();
      EXPECT_TRUE(torch::equal(layer->weight, before));
      adamw.Extrapolate(lr_steps);  // the same move again, on a new copy
      EXPECT_TRUE(torch::equal(layer->weight, moved));
      adamw.RetractAndRelease();
      EXPECT_TRUE(torch::equal(layer->weight, before));
    }
  }
}

// Extrapolate narrowed to what a forward reads: the listed rows of a table
// move element for element as the whole table's move moves them, the other
// rows and a parameter not in `only` stay, and Retract restores everything
// bit for bit; float32 (from the rows' copy) and bf16 (from the master
// weights). One piece at a time (`only`), each piece moves as in the move of
// all, and the next piece's move puts the one before back.
TEST(AdamWTest, ExtrapolatingTheRowsAForwardReadsMovesThemAsTheWholeTableDoes) {
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(7);
    torch::nn::Embedding table(50, 8);
    torch::nn::Linear layer(8, 8);
    table->to(dtype);
    layer->to(dtype);
    AdamW adamw({{"table", table->weight}, {"layer", layer->weight}}, AdamWOptions{});
    for (int step = 0; step < 3; ++step) {
      layer(table(torch::randint(50, {4, 6}))).to(torch::kFloat).pow(2).sum().backward();
      adamw.Step(1e-2);
      adamw.ZeroGrad();
    }
    const torch::Tensor table_before = table->weight.detach().clone();
    const torch::Tensor layer_before = layer->weight.detach().clone();
    adamw.Extrapolate(0.1);
    const torch::Tensor table_whole = table->weight.detach().clone();
    adamw.Retract();
    ASSERT_TRUE(torch::equal(table->weight, table_before));

    const torch::Tensor rows = torch::tensor({3, 17, 18, 42}, torch::kLong);
    const std::vector<std::string> table_only{"table"}, layer_only{"layer"};
    AdamW::Reads reads;
    reads.rows["table"] = rows;
    reads.only = &table_only;
    adamw.Extrapolate(0.1, reads);
    EXPECT_TRUE(torch::equal(table->weight.index_select(0, rows), table_whole.index_select(0, rows)));
    EXPECT_FALSE(torch::equal(table->weight.index_select(0, rows), table_before.index_select(0, rows)));
    const torch::Tensor others = torch::tensor({0, 1, 2, 4, 16, 19, 41, 43, 49}, torch::kLong);
    EXPECT_TRUE(torch::equal(table->weight.index_select(0, others), table_before.index_select(0, others)));
    EXPECT_TRUE(torch::equal(layer->weight, layer_before));
    adamw.Retract();
    EXPECT_TRUE(torch::equal(table->weight, table_before));
    EXPECT_TRUE(torch::equal(layer->weight, layer_before));
    // And whole again after a narrowed move: the copy is taken afresh.
    adamw.Extrapolate(0.1);
    EXPECT_TRUE(torch::equal(table->weight, table_whole));
    const torch::Tensor layer_whole = layer->weight.detach().clone();
    EXPECT_FALSE(torch::equal(layer_whole, layer_before));
    adamw.Retract();
    EXPECT_TRUE(torch::equal(table->weight, table_before));
    EXPECT_TRUE(torch::equal(layer->weight, layer_before));

    // One piece, then the next: the table's rows, then the layer.
    adamw.Extrapolate(0.1, reads);
    AdamW::Reads next;
    next.only = &layer_only;
    adamw.Extrapolate(0.1, next);
    EXPECT_TRUE(torch::equal(table->weight, table_before));
    EXPECT_TRUE(torch::equal(layer->weight, layer_whole));
    adamw.Retract();
    EXPECT_TRUE(torch::equal(layer->weight, layer_before));
    adamw.Retract();  // nothing left to put back
    EXPECT_TRUE(torch::equal(table->weight, table_before));
    EXPECT_TRUE(torch::equal(layer->weight, layer_before));
  }
}

TEST(AdamWTest, CudaMatchesCpuForFloat32AndBf16Weights) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA here (a CPU LibTorch or no GPU)";
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    auto cpu = ParametersWithGradients(torch::kCPU, dtype, 0);
    auto gpu = ParametersWithGradients(torch::Device("cuda:0"), dtype, 0);
    AdamW on_cpu(cpu, AdamWOptions{}), on_gpu(gpu, AdamWOptions{});
    for (int step = 0; step < 5; ++step) {
      SetGradients(cpu, step);
      SetGradients(gpu, step);
      on_cpu.Step(0.01);
      on_gpu.Step(0.01);
      // Both run the fused kernel, each device its own.
      EXPECT_TRUE(on_gpu.last_step_fused()) << dtype;
      EXPECT_TRUE(on_cpu.last_step_fused()) << dtype;
      on_cpu.ZeroGrad();
      on_gpu.ZeroGrad();
    }
    const double tolerance = dtype == torch::kFloat ? 1e-5 : 1e-2;  // a bf16 rounding apart
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_EQ(gpu[i].second.scalar_type(), dtype);
      EXPECT_TRUE(torch::allclose(cpu[i].second, gpu[i].second.cpu(), tolerance, 1e-6))
          << cpu[i].first << " " << dtype;
    }
    const auto cpu_state = on_cpu.State(), gpu_state = on_gpu.State();
    ASSERT_EQ(cpu_state.size(), gpu_state.size());
    for (size_t i = 0; i < cpu_state.size(); ++i) {
      EXPECT_TRUE(gpu_state[i].second.is_cuda());
      EXPECT_TRUE(torch::allclose(cpu_state[i].second, gpu_state[i].second.cpu(), 1e-5, 1e-7))
          << cpu_state[i].first << " " << dtype;
    }
  }
}

TEST(LrScheduleTest, WarmsUpLinearlyThenDecaysToTheFloor) {
  LrScheduleOptions o{1.0, 100, 0.1, 0.1};
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 10), 1.0);
  EXPECT_NEAR(LearningRateAt(o, 55), 0.55, 1e-9);
  EXPECT_NEAR(LearningRateAt(o, 100), 0.1, 1e-12);
  for (int s = 11; s < 100; ++s) EXPECT_LT(LearningRateAt(o, s), LearningRateAt(o, s - 1));
}

// Devices and precisions: what runs on this machine's CPU, and the CUDA cases
// that skip without a GPU.
TEST(PlacementTest, ParsesDevicesAndPrecisions) {
  absl::StatusOr<StagePlacement> cpu = ResolvePlacement("cpu", "bf16-weights");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->device.is_cpu());
  EXPECT_EQ(cpu->weight_dtype(), torch::kBFloat16);
  EXPECT_EQ(ResolvePlacement("", "fp32")->precision, Precision::kFp32);
  EXPECT_TRUE(ResolvePlacement("cpu", "fp32")->note.empty());
  absl::Status bad = ResolvePlacement("tpu:0", "fp32").status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("runtime.device"), std::string::npos) << bad;
  bad = ResolvePlacement("cpu", "fp8").status();
  EXPECT_NE(bad.message().find("runtime.precision"), std::string::npos) << bad;
  for (Precision p : {Precision::kFp32, Precision::kBf16Autocast, Precision::kBf16Weights}) {
    EXPECT_EQ(ResolvePlacement("cpu", PrecisionName(p))->precision, p);
  }
}

// "auto" (and the empty default): bf16-autocast where the CPU has bfloat16
// instructions, fp32 where it has not, each saying why.
TEST(PlacementTest, AutoIsBf16AutocastExactlyWhereTheCpuHasBf16) {
  for (const std::string precision : {"auto", ""}) {
    const StagePlacement with = *ResolvePlacement("cpu", precision, /*cpu_has_bf16=*/true);
    EXPECT_EQ(with.precision, Precision::kBf16Autocast);
    EXPECT_EQ(with.weight_dtype(), torch::kFloat);  // the links stay float32
    EXPECT_EQ(with.note, "automatic: this CPU has bfloat16 instructions");
    const StagePlacement without = *ResolvePlacement("cpu", precision, /*cpu_has_bf16=*/false);
    EXPECT_EQ(without.precision, Precision::kFp32);
    EXPECT_THAT(without.note, HasSubstr("automatic: this CPU has no bfloat16 instructions"));
  }
  // This machine: whichever its /proc/cpuinfo says.
  EXPECT_EQ(ResolvePlacement("cpu", "auto")->precision,
            CpuHasBf16() ? Precision::kBf16Autocast : Precision::kFp32);
}

TEST(PlacementTest, CudaWithoutAGpuIsRefusedNamingTheField) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has CUDA; the refusal is for one without";
  absl::Status status = ResolvePlacement("cuda:0", "fp32").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("runtime.device: cuda:0"), std::string::npos) << status;
  // This build says which of the two it lacks: CUDA in its LibTorch, or a GPU.
  EXPECT_NE(status.message().find(at::detail::getCUDAHooks().isBuilt() ? "sees no GPU" : "CPU build"),
            std::string::npos)
      << status;
}

// x86's and Arm's spellings in /proc/cpuinfo; a bf16 precision named for a
// CPU without them runs emulated, with a warning naming what to use instead.
TEST(PlacementTest, Bf16OnACpuWithoutBf16InstructionsRunsWithAWarning) {
  EXPECT_TRUE(CpuInfoHasBf16("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 avx512vl\n"));
  EXPECT_TRUE(CpuInfoHasBf16("flags\t\t: fpu amx_bf16 amx_tile\n"));
  EXPECT_TRUE(CpuInfoHasBf16("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"));
  EXPECT_FALSE(CpuInfoHasBf16("flags\t\t: fpu sse2 avx2 avx512f avx512vl\n"));
  EXPECT_FALSE(CpuInfoHasBf16("flags\t\t: fpu avx512_bf16x\n"));
  EXPECT_FALSE(CpuInfoHasBf16(""));
  for (const std::string precision : {"bf16-autocast", "bf16-weights"}) {
    const absl::StatusOr<StagePlacement> emulated =
        ResolvePlacement("cpu", precision, /*cpu_has_bf16=*/false);
    ASSERT_TRUE(emulated.ok()) << emulated.status();
    EXPECT_EQ(PrecisionName(emulated->precision), precision);
    EXPECT_TRUE(emulated->emulated);
    EXPECT_THAT(emulated->note, HasSubstr("warning: " + precision +
                                          " on a CPU without bfloat16 instructions"));
    EXPECT_THAT(emulated->note, HasSubstr("use fp32 or auto"));
    const StagePlacement native = *ResolvePlacement("cpu", precision, /*cpu_has_bf16=*/true);
    EXPECT_TRUE(native.note.empty());
    EXPECT_FALSE(native.emulated);
  }
}

TEST(PlacementTest, Bf16AutocastOnCpuComputesMatmulsInBf16AndKeepsTheLossClose) {
  for (const GptConfig& config : {TinyConfig(), TinyLlama()}) {
    SCOPED_TRACE(config.llama() ? "llama" : "gpt2");
    torch::manual_seed(1);
    GptStage model(config, PartitionStage(config.num_layers, 1, 0));
    const torch::Tensor tokens = torch::randint(config.vocab_size, {4, config.seq_len});
    const torch::Tensor targets = torch::randint(config.vocab_size, {4, config.seq_len});
    const double fp32 = LanguageModelLoss(model(tokens), targets).item<double>();

    StagePlacement placement = *ResolvePlacement("cpu", "bf16-autocast");
    torch::Tensor logits;
    {
      AutocastScope autocast(placement);
      logits = model(tokens);
    }
    EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);  // the head's matmul ran in bf16
    for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
    const double bf16 = LanguageModelLoss(logits.to(torch::kFloat), targets).item<double>();
    EXPECT_NEAR(bf16, fp32, 0.02 * fp32);
    // The scope ended: float32 again.
    EXPECT_EQ(model(tokens).scalar_type(), torch::kFloat);
  }
}

TEST(AdamWTest, Bf16WeightsFollowFloat32MasterWeights) {
  torch::manual_seed(3);
  torch::nn::Linear reference(16, 8), bf16(16, 8);
  {
    torch::NoGradGuard no_grad;
    bf16->weight.copy_(reference->weight);
    bf16->bias.copy_(reference->bias);
  }
  bf16->to(torch::kBFloat16);
  AdamW ours({{"weight", bf16->weight}, {"bias", bf16->bias}}, AdamWOptions{});
  AdamW theirs({{"weight", reference->weight}, {"bias", reference->bias}}, AdamWOptions{});
  for (int step = 0; step < 20; ++step) {
    const torch::Tensor input = torch::randn({8, 16});
    bf16(input.to(torch::kBFloat16)).to(torch::kFloat).pow(2).sum().backward();
    reference(input).pow(2).sum().backward();
    ours.Step(1e-2);
    theirs.Step(1e-2);
    ours.ZeroGrad();
    theirs.ZeroGrad();
  }
  EXPECT_EQ(bf16->weight.scalar_type(), torch::kBFloat16);
  // The master weights hold what bf16 cannot: the weights are their rounding.
  std::map<std::string, torch::Tensor> state;
  for (auto& [name, t] : ours.State()) state[name] = t;
  ASSERT_EQ(state.count("master/weight"), 1u);
  EXPECT_EQ(state["master/weight"].scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(bf16->weight, state["master/weight"].to(torch::kBFloat16)));
  // And they track the float32 run (bf16 gradients differ a little).
  EXPECT_LT((state["master/weight"] - reference->weight).abs().max().item<double>(), 0.05);
}

TEST(PlacementTest, CudaStageMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA here (a CPU LibTorch or no GPU)";
  torch::manual_seed(1);
  GptConfig config = TinyConfig();
  GptStage cpu_model(config, PartitionStage(config.num_layers, 1, 0));
  GptStage gpu_model(config, PartitionStage(config.num_layers, 1, 0));
  gpu_model->to(torch::Device("cuda:0"));
  const torch::Tensor tokens = torch::randint(config.vocab_size, {4, config.seq_len});
  const torch::Tensor cpu_logits = cpu_model(tokens);
  const torch::Tensor gpu_logits = gpu_model(tokens.to(torch::kCUDA)).to(torch::kCPU);
  EXPECT_TRUE(torch::allclose(cpu_logits, gpu_logits, 1e-3, 1e-4));
}

TEST(PlacementTest, CudaBf16PrecisionsTrainOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA here (a CPU LibTorch or no GPU)";
  torch::manual_seed(1);
  GptConfig config = TinyConfig();
  GptStage model(config, PartitionStage(config.num_layers, 1, 0));
  model->to(torch::Device("cuda:0"));
  const torch::Tensor tokens =
      torch::randint(config.vocab_size, {4, config.seq_len}).to(torch::kCUDA);
  const torch::Tensor targets =
      torch::randint(config.vocab_size, {4, config.seq_len}).to(torch::kCUDA);
  const double fp32 = LanguageModelLoss(model(tokens), targets).item<double>();

  // bf16 autocast on the GPU: matmuls in bf16, the loss close, float32 after the scope.
  StagePlacement autocast_placement = *ResolvePlacement("cuda:0", "bf16-autocast");
  torch::Tensor logits;
  {
    AutocastScope autocast(autocast_placement);
    logits = model(tokens);
  }
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  const double bf16 = LanguageModelLoss(logits.to(torch::kFloat), targets).item<double>();
  EXPECT_NEAR(bf16, fp32, 0.02 * fp32);
  EXPECT_EQ(model(tokens).scalar_type(), torch::kFloat);

  // bf16 weights (as the stage runtime converts them) with float32 master
  // weights and moments on the GPU: a few steps on one batch lower the loss.
  {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model->parameters()) p.set_data(p.data().to(torch::kBFloat16));
  }
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  AdamW optimizer(named, AdamWOptions{});
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    torch::Tensor loss = LanguageModelLoss(model(tokens).to(torch::kFloat), targets);
    last = loss.item<double>();
    if (step == 0) first = last;
    loss.backward();
    optimizer.Step(3e-3);
    optimizer.ZeroGrad();
  }
  EXPECT_LT(last, first);
  for (const auto& p : model->parameters()) {
    EXPECT_TRUE(p.is_cuda());
    EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  }
  for (const auto& [name, t] : optimizer.State()) {
    EXPECT_TRUE(t.is_cuda()) << name;
    EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
  }
}

}  // namespace
}  // namespace paci
