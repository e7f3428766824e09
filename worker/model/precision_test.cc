// Devices and precisions: what runs on this machine's CPU, and the CUDA cases
// that skip without a GPU.

#include "worker/model/precision.h"

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "worker/model/adamw.h"
#include "worker/model/gpt.h"
#include "worker/model/partition.h"

namespace paci {
namespace {

GptConfig Tiny() {
  GptConfig c;
  c.vocab_size = 23;
  c.num_layers = 2;
  c.d_model = 32;
  c.num_heads = 4;
  c.seq_len = 16;
  c.init_seed = 11;
  return c;
}

TEST(PlacementTest, ParsesDevicesAndPrecisions) {
  absl::StatusOr<StagePlacement> cpu = ResolvePlacement("cpu", "bf16-weights");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->device.is_cpu());
  EXPECT_EQ(cpu->weight_dtype(), torch::kBFloat16);
  EXPECT_EQ(ResolvePlacement("", "")->precision, Precision::kFp32);
  absl::Status bad = ResolvePlacement("tpu:0", "fp32").status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("runtime.device"), std::string::npos) << bad;
  bad = ResolvePlacement("cpu", "fp8").status();
  EXPECT_NE(bad.message().find("runtime.precision"), std::string::npos) << bad;
}

TEST(PlacementTest, CudaWithoutAGpuIsRefusedNamingTheField) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has CUDA; the refusal is for one without";
  absl::Status status = ResolvePlacement("cuda:0", "fp32").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("runtime.device: cuda:0"), std::string::npos) << status;
}

TEST(PlacementTest, Bf16AutocastOnCpuComputesMatmulsInBf16AndKeepsTheLossClose) {
  torch::manual_seed(1);
  GptConfig config = Tiny();
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
  GptConfig config = Tiny();
  GptStage cpu_model(config, PartitionStage(config.num_layers, 1, 0));
  GptStage gpu_model(config, PartitionStage(config.num_layers, 1, 0));
  gpu_model->to(torch::Device("cuda:0"));
  const torch::Tensor tokens = torch::randint(config.vocab_size, {4, config.seq_len});
  const torch::Tensor cpu_logits = cpu_model(tokens);
  const torch::Tensor gpu_logits = gpu_model(tokens.to(torch::kCUDA)).to(torch::kCPU);
  EXPECT_TRUE(torch::allclose(cpu_logits, gpu_logits, 1e-3, 1e-4));
}

}  // namespace
}  // namespace paci
