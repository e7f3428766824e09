// A model put to use: checkpoints of any stage count read back whole, the
// TorchScript inference module against the training model, decoding with the
// key/value cache, sampling, export, and checkpoint.init_from in a StageRuntime.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/schedule_kind.h"
#include "common/temp_dir.h"
#include "worker/data/char_tokenizer.h"
#include "worker/model/gpt_weights.h"
#include "worker/model/hf_format.h"
#include "worker/model/inference_model.h"
#include "worker/model/model_export.h"
#include "worker/model/sampler.h"
#include "worker/model/test_models.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/checkpoint_layout.h"
#include "worker/runtime/checkpoint_reader.h"
#include "worker/runtime/stage_runtime.h"

namespace paci {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kAlphabet[] = "abcdefghijklmnopqrs ";  // 20 characters

GptConfig TinyConfig() {
  return TinyGpt({/*vocab_size=*/20, /*num_layers=*/2, /*d_model=*/16, /*num_heads=*/2,
                  /*seq_len=*/12});
}

// A llama of the same size: grouped-query attention (4 query heads share 2
// key/value heads), a SwiGLU MLP of width 24, a rotary base not the default.
GptConfig TinyLlama() {
  GptConfig c = paci::TinyLlama(TinyConfig());
  c.num_heads = 4;
  c.norm_eps = 1e-6;
  return c;
}

CharTokenizer Alphabet() { return *CharTokenizer::FromText(kAlphabet); }

// Moves every parameter away from its initial value by a seeded amount that
// depends on its name only, so any cut of the model gets the same weights
// (and LayerNorm gains and biases are not the trivial 1 and 0).
void Perturb(GptStage& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(std::hash<std::string>()(item.key()));
    item.value().add_(at::normal(0.0, 0.1, item.value().sizes(), gen));
  }
}

GptStage PerturbedStage(const GptConfig& config, int num_stages, int stage) {
  GptStage model(config, PartitionStage(config.num_layers, num_stages, stage));
  Perturb(model);
  model->eval();
  return model;
}

// The shards of a checkpoint at `step` of `num_stages` stages of the
// perturbed model.
void WriteCheckpoint(const std::string& directory, int64_t step, int num_stages,
                     const GptConfig& config, const std::string& job = "source") {
  for (int s = 0; s < num_stages; ++s) {
    GptStage model = PerturbedStage(config, num_stages, s);
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
    AdamW optimizer(std::move(params), AdamWOptions());
    ShardMeta meta;
    meta.job_name = job;
    meta.stage = s;
    meta.num_stages = num_stages;
    meta.model_fingerprint = model->Fingerprint();
    meta.step = step;
    if (s == 0) meta.tokenizer = Alphabet().Serialize();
    ASSERT_TRUE(SaveShard(ShardPath(directory, step, s, num_stages), meta, model, optimizer).ok());
  }
}

double MaxDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

torch::Tensor Forward(torch::jit::Module& module, const torch::Tensor& idx) {
  return module.forward({idx}).toTensor();
}

class InferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(7);
    ASSERT_FALSE(dir_.path().empty());
  }
  std::string Path(const std::string& name) const {
    return (fs::path(dir_.path()) / name).string();
  }

  TempDir dir_{"paci-inference-test"};
};

TEST_F(InferenceTest, TheInferenceModuleComputesTheTrainingModelsLogits) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  absl::StatusOr<torch::jit::Module> module = BuildInferenceModule(reference);
  ASSERT_TRUE(module.ok()) << module.status();
  const torch::Tensor idx = torch::randint(20, {3, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxDifference(Forward(*module, idx), reference(idx)), 1e-5);
  EXPECT_EQ(module->attr("seq_len").toInt(), 12);
}

TEST_F(InferenceTest, ACheckpointOfTwoStagesIsTheSameModelAsOneStage) {
  WriteCheckpoint(Path("ckpt"), 30, 2, TinyConfig());
  absl::StatusOr<ModelCheckpoint> checkpoint = ReadCheckpoint(Path("ckpt"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->step, 30);
  EXPECT_EQ(checkpoint->num_stages, 2);
  EXPECT_EQ(checkpoint->job_name, "source");
  EXPECT_EQ(checkpoint->config.d_model, 16);
  EXPECT_EQ(checkpoint->tokenizer->Id(), Alphabet().Id());
  absl::StatusOr<GptStage> model =
      GptFromWeights(checkpoint->config, checkpoint->parameters, "test");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<torch::jit::Module> module = BuildInferenceModule(*model);
  ASSERT_TRUE(module.ok()) << module.status();

  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  const torch::Tensor idx = torch::randint(20, {2, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxDifference(Forward(*module, idx), reference(idx)), 1e-5);
}

TEST_F(InferenceTest, DecodingWithTheCacheGivesTheFullForwardsLogitsAtEveryPosition) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  torch::jit::Module module = *BuildInferenceModule(reference);
  const torch::Tensor idx = torch::randint(20, {2, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor full = Forward(module, idx);
  using torch::indexing::Slice;
  // A prefill of three positions, then one token at a time.
  c10::List<torch::Tensor> k_cache, v_cache;
  torch::Tensor last = Decode(module, idx.index({Slice(), Slice(0, 3)}), k_cache, v_cache);
  EXPECT_LT(MaxDifference(last, full.index({Slice(), 2})), 1e-5);
  for (int64_t t = 3; t < 12; ++t) {
    last = Decode(module, idx.index({Slice(), Slice(t, t + 1)}), k_cache, v_cache);
    EXPECT_LT(MaxDifference(last, full.index({Slice(), t})), 1e-5) << "position " << t;
  }
  EXPECT_EQ(k_cache.size(), 2u);
  EXPECT_EQ(k_cache.get(0).size(2), 12);
  // A thirteenth position is past seq_len.
  EXPECT_ANY_THROW(Decode(module, idx.index({Slice(), Slice(0, 1)}), k_cache, v_cache));
}

TEST_F(InferenceTest, TheLlamaInferenceModuleAndItsCacheComputeTheTrainingModelsLogits) {
  GptStage reference = PerturbedStage(TinyLlama(), 1, 0);
  EXPECT_THAT(reference->Fingerprint(), HasSubstr("llama kv_heads=2 ffn=24"));
  torch::jit::Module module = *BuildInferenceModule(reference);
  const torch::Tensor idx = torch::randint(20, {2, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor full = Forward(module, idx);
  EXPECT_LT(MaxDifference(full, reference(idx)), 1e-5);
  using torch::indexing::Slice;
  c10::List<torch::Tensor> k_cache, v_cache;
  torch::Tensor last = Decode(module, idx.index({Slice(), Slice(0, 5)}), k_cache, v_cache);
  EXPECT_LT(MaxDifference(last, full.index({Slice(), 4})), 1e-5);
  for (int64_t t = 5; t < 12; ++t) {
    last = Decode(module, idx.index({Slice(), Slice(t, t + 1)}), k_cache, v_cache);
    EXPECT_LT(MaxDifference(last, full.index({Slice(), t})), 1e-5) << "position " << t;
  }
  EXPECT_EQ(k_cache.get(0).size(1), 2);  // the key/value heads, not the query heads
  EXPECT_EQ(module.attr("architecture").toStringRef(), "llama");
}

TEST_F(InferenceTest, ALlamaOfTwoStagesCheckpointsAndReadsBackAsTheSameModel) {
  for (const int stages : {2, 3}) {
    const std::string dir = Path(absl::StrCat("llama", stages));
    WriteCheckpoint(dir, 10, stages, TinyLlama());
    absl::StatusOr<ModelCheckpoint> checkpoint = ReadCheckpoint(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_FALSE(ShapeDifference(TinyLlama(), checkpoint->config).has_value());
    absl::StatusOr<GptStage> model =
        GptFromWeights(checkpoint->config, checkpoint->parameters, "test");
    ASSERT_TRUE(model.ok()) << model.status();
    GptStage reference = PerturbedStage(TinyLlama(), 1, 0);
    const torch::Tensor idx = torch::randint(20, {2, 12}, torch::kLong);
    torch::NoGradGuard no_grad;
    EXPECT_LT(MaxDifference((*model)(idx), reference(idx)), 1e-5) << stages << " stages";
  }
  GptConfig other = TinyLlama();
  other.num_kv_heads = 4;
  EXPECT_EQ(*ShapeDifference(other, TinyLlama()), "model.num_kv_heads is 2 there, 4 here");
}

NamedWeights WeightsOf(GptStage& model) {
  NamedWeights weights;
  for (const auto& item : model->named_parameters()) weights[item.key()] = item.value();
  return weights;
}

// Weights of an older gpt2 whose LM head had a bias are refused by name, not
// loaded without it; the last stage of a two-stage cut (which holds the head)
// refuses them too, while stage 0 has nothing of the head to check.
TEST_F(InferenceTest, AWeightThisModelHasNotInAModuleItHoldsIsRefusedByName) {
  GptStage whole = PerturbedStage(TinyConfig(), 1, 0);
  NamedWeights weights = WeightsOf(whole);
  ASSERT_TRUE(GptFromWeights(TinyConfig(), weights, "old").ok());
  weights["head.bias"] = torch::zeros({TinyConfig().vocab_size});
  const absl::Status whole_refused = GptFromWeights(TinyConfig(), weights, "old").status();
  EXPECT_EQ(whole_refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(whole_refused.message(), HasSubstr("old holds parameter head.bias"));

  GptStage last = PerturbedStage(TinyConfig(), 2, 1);
  const absl::Status last_refused = CopyWeightsByName(weights, "old", *last);
  EXPECT_THAT(last_refused.message(), HasSubstr("old holds parameter head.bias")) << last_refused;
  GptStage first = PerturbedStage(TinyConfig(), 2, 0);
  EXPECT_TRUE(CopyWeightsByName(weights, "old", *first).ok());
}

TEST_F(InferenceTest, AHuggingFaceFolderOfEitherArchitectureReadsBackAsTheSameWeights) {
  for (const GptConfig& config : {TinyConfig(), TinyLlama()}) {
    for (const int64_t shard_bytes : {int64_t{1} << 30, int64_t{4096}}) {
      const std::string folder =
          Path(absl::StrCat("hf-", ArchitectureName(config.architecture), "-", shard_bytes));
      GptStage model = PerturbedStage(config, 1, 0);
      HfExportOptions options;
      options.max_shard_bytes = shard_bytes;
      ASSERT_TRUE(WriteHfFolder(config, WeightsOf(model), Alphabet(), folder, options).ok());
      const bool sharded = shard_bytes < 100000;
      EXPECT_EQ(fs::exists(folder + "/model.safetensors.index.json"), sharded);
      EXPECT_EQ(fs::exists(folder + "/model.safetensors"), !sharded);
      EXPECT_TRUE(fs::exists(folder + "/tokenizer.json"));
      ASSERT_TRUE(IsHfFolder(folder));
      absl::StatusOr<HfModel> back = ReadHfFolder(folder);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_FALSE(ShapeDifference(config, back->config).has_value())
          << *ShapeDifference(config, back->config);
      const NamedWeights original = WeightsOf(model);
      ASSERT_EQ(back->weights.size(), original.size());
      for (const auto& [name, tensor] : original) {
        ASSERT_TRUE(back->weights.count(name)) << name;
        EXPECT_TRUE(torch::equal(back->weights.at(name), tensor)) << name;
      }
    }
  }
}

TEST_F(InferenceTest, AMalformedHuggingFaceFolderIsRefusedNamingTheFileAndWhat) {
  const std::string folder = Path("hf-bad");
  GptStage model = PerturbedStage(TinyLlama(), 1, 0);
  ASSERT_TRUE(WriteHfFolder(TinyLlama(), WeightsOf(model), Alphabet(), folder).ok());
  // A truncated weights file.
  const std::string weights = folder + "/model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 4);
  absl::StatusOr<HfModel> read = ReadHfFolder(folder);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("model.safetensors"));
  // A config of another shape than the tensors.
  ASSERT_TRUE(WriteHfFolder(TinyLlama(), WeightsOf(model), Alphabet(), folder).ok());
  GptConfig wider = TinyLlama();
  wider.ffn_hidden_size = 32;
  { std::ofstream(folder + "/config.json") << HfConfigJson(wider); }
  read = ReadHfFolder(folder);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("gate_proj"));
  // A model paci does not build.
  { std::ofstream(folder + "/config.json") << R"({"model_type": "bert"})"; }
  read = ReadHfFolder(folder);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), AllOf(HasSubstr("config.json"), HasSubstr("bert")));
  EXPECT_FALSE(GptConfigFromHfConfig(R"({"model_type": "llama", "rope_scaling": {"type": "yarn"}})",
                                     "config.json")
                   .ok());
  EXPECT_FALSE(GptConfigFromHfConfig(R"({"model_type": "gpt2", "activation_function": "gelu_new"})",
                                     "config.json")
                   .ok());
}

TEST_F(InferenceTest, GreedySamplingFollowsTheLikeliestTokenAndTheSameSeedGivesTheSameText) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  torch::jit::Module module = *BuildInferenceModule(reference);
  const CharTokenizer tokenizer = Alphabet();
  SampleOptions greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 8;  // within seq_len: no cropping
  absl::StatusOr<std::string> text = Sample(module, tokenizer, "abc", greedy, nullptr);
  ASSERT_TRUE(text.ok()) << text.status();
  // The same with the full forward and no cache.
  std::vector<int32_t> ids = *tokenizer.Encode("abc");
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 8; ++i) {
    const torch::Tensor idx =
        torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
    ids.push_back(static_cast<int32_t>(reference(idx)[0][-1].argmax().item<int64_t>()));
  }
  EXPECT_EQ("abc" + *text, tokenizer.Decode(ids));

  SampleOptions drawn;
  drawn.temperature = 0.9;
  drawn.top_k = 5;
  drawn.seed = 42;
  drawn.max_tokens = 40;  // past seq_len: the context is cropped and the cache rebuilt
  std::string streamed;
  absl::StatusOr<std::string> first =
      Sample(module, tokenizer, "sea", drawn, [&](std::string_view piece) { streamed += piece; });
  absl::StatusOr<std::string> second = Sample(module, tokenizer, "sea", drawn, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(first->size(), 40u);
  EXPECT_EQ(streamed, *first);
  drawn.seed = 43;
  EXPECT_NE(*Sample(module, tokenizer, "sea", drawn, nullptr), *first);
}

// Past seq_len the sampler crops the context: once the cache is full, each step starts again
// from the last seq_len - 1 tokens. Greedy sampling through the cache equals a full forward
// (no cache) over the same windows, token for token. A tiny temperature is greedy too, and
// top_k = 1 keeps one token whatever the temperature.
TEST_F(InferenceTest, CroppedContextsMatchTheFullForwardAndTinyTemperaturesAreGreedy) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  torch::jit::Module module = *BuildInferenceModule(reference);
  const CharTokenizer tokenizer = Alphabet();
  const size_t seq_len = static_cast<size_t>(TinyConfig().seq_len);
  SampleOptions greedy;
  greedy.temperature = 0;
  greedy.max_tokens = static_cast<int>(3 * seq_len);
  absl::StatusOr<std::string> text = Sample(module, tokenizer, "abc", greedy, nullptr);
  ASSERT_TRUE(text.ok()) << text.status();

  std::vector<int32_t> ids = *tokenizer.Encode("abc");
  size_t start = 0;  // the window's first token, as the sampler keeps it
  torch::NoGradGuard no_grad;
  for (int i = 0; i < greedy.max_tokens; ++i) {
    const torch::Tensor idx =
        torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end())).unsqueeze(0);
    const bool full = ids.size() - start >= seq_len;
    ids.push_back(static_cast<int32_t>(reference(idx)[0][-1].argmax().item<int64_t>()));
    if (full) start = ids.size() - (seq_len - 1);
  }
  EXPECT_EQ("abc" + *text, tokenizer.Decode(ids));

  SampleOptions cold = greedy;
  cold.temperature = 1e-30;
  EXPECT_EQ(*Sample(module, tokenizer, "abc", cold, nullptr), *text);
  SampleOptions one = greedy;
  one.temperature = 5;
  one.top_k = 1;
  EXPECT_EQ(*Sample(module, tokenizer, "abc", one, nullptr), *text);
}

TEST_F(InferenceTest, SamplingRefusesAPromptCharacterTheTokenizerDoesNotKnowAndBadOptions) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  torch::jit::Module module = *BuildInferenceModule(reference);
  absl::StatusOr<std::string> text = Sample(module, Alphabet(), "abc!", SampleOptions(), nullptr);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), AllOf(HasSubstr("prompt"), HasSubstr("U+0021")));
  EXPECT_THAT(Sample(module, Alphabet(), "", SampleOptions(), nullptr).status().message(),
              HasSubstr("prompt"));
  SampleOptions bad;
  bad.temperature = -1;
  EXPECT_THAT(Sample(module, Alphabet(), "a", bad, nullptr).status().message(),
              HasSubstr("temperature"));
  bad = SampleOptions();
  bad.top_k = -2;
  EXPECT_THAT(Sample(module, Alphabet(), "a", bad, nullptr).status().message(),
              HasSubstr("top_k"));
}

TEST_F(InferenceTest, AnExportLoadsAsTorchScriptWithItsConfigTokenizerAndCheck) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  torch::jit::Module module = *BuildInferenceModule(reference);
  const std::string path = Path("model.pt");
  ASSERT_TRUE(ExportModel(reference, module, Alphabet(), path).ok());
  for (const auto& entry : fs::directory_iterator(dir_.path())) {  // no temporary file left
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), "model.pt.tmp"));
  }

  torch::jit::ExtraFilesMap extra = {{"config.json", ""}, {"tokenizer", ""}, {"check.json", ""}};
  torch::jit::Module loaded = torch::jit::load(path, torch::kCPU, extra);
  EXPECT_EQ(extra["config.json"],
            "{\"vocab_size\": 20, \"num_layers\": 2, \"d_model\": 16, \"num_heads\": 2, "
            "\"seq_len\": 12}\n");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = ParseTokenizer(extra["tokenizer"], "t");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Id(), Alphabet().Id());
  // check.json holds the token ids 1, 18, 15, ... ((1 + 37 i) mod 20) and their logits.
  EXPECT_THAT(extra["check.json"], HasSubstr("\"tokens\": [[1, 18, 15, 12, 9, 6, 3, 0]]"));
  EXPECT_THAT(extra["check.json"], HasSubstr("\"logits\": [["));
  const torch::Tensor idx = torch::randint(20, {1, 12}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_LT(MaxDifference(Forward(loaded, idx), reference(idx)), 1e-5);
  c10::List<torch::Tensor> k_cache, v_cache;
  EXPECT_LT(MaxDifference(Decode(loaded, idx, k_cache, v_cache), reference(idx)[0][-1]), 1e-5);
}

TEST_F(InferenceTest, AnExportThatCannotBeWrittenNamesThePathAndLeavesNothing) {
  GptStage reference = PerturbedStage(TinyConfig(), 1, 0);
  torch::jit::Module module = *BuildInferenceModule(reference);
  const std::string path = Path("no-such-folder/model.pt");
  const absl::Status status = ExportModel(reference, module, Alphabet(), path);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_FALSE(fs::exists(Path("no-such-folder")));
}

TEST_F(InferenceTest, ReadingTakesTheLatestCompleteStep) {
  WriteCheckpoint(Path("ckpt"), 10, 2, TinyConfig());
  WriteCheckpoint(Path("ckpt"), 20, 2, TinyConfig());
  fs::remove(ShardPath(Path("ckpt"), 20, 1, 2));  // step 20 is still being written
  absl::StatusOr<ModelCheckpoint> checkpoint = ReadCheckpoint(Path("ckpt"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->step, 10);
}

TEST_F(InferenceTest, AMissingShardIsRefusedNamingIt) {
  WriteCheckpoint(Path("ckpt"), 10, 2, TinyConfig());
  const std::string missing = ShardPath(Path("ckpt"), 10, 1, 2);
  fs::remove(missing);
  const absl::Status status = ReadCheckpoint(Path("ckpt")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(missing));
}

TEST_F(InferenceTest, ACorruptShardIsRefusedNamingIt) {
  WriteCheckpoint(Path("ckpt"), 10, 2, TinyConfig());
  const std::string corrupt = ShardPath(Path("ckpt"), 10, 1, 2);
  {
    std::fstream file(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x5a');
  }
  const absl::Status status = ReadCheckpoint(Path("ckpt")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(corrupt));
}

TEST_F(InferenceTest, AnEmptyOrMissingFolderIsRefusedNamingIt) {
  fs::create_directories(Path("empty"));
  absl::Status status = ReadCheckpoint(Path("empty")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(Path("empty")));
  status = ReadCheckpoint(Path("nowhere")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(Path("nowhere")));
}

TEST_F(InferenceTest, ShardsOfDifferentJobsAreRefusedNamingTheOddOne) {
  WriteCheckpoint(Path("ckpt"), 10, 2, TinyConfig(), "one");
  WriteCheckpoint(Path("other"), 10, 2, TinyConfig(), "two");
  const std::string odd = ShardPath(Path("ckpt"), 10, 1, 2);
  fs::copy_file(ShardPath(Path("other"), 10, 1, 2), odd, fs::copy_options::overwrite_existing);
  const absl::Status status = ReadCheckpoint(Path("ckpt")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(odd), HasSubstr("\"two\"")));
}

// checkpoint.init_from in a whole pipeline of one stage.
class InitFromTest : public InferenceTest {
 protected:
  // The job's model: vocab_size 80 (the corpus' characters), otherwise TinyConfig.
  static GptConfig JobConfig() {
    GptConfig c = TinyConfig();
    c.vocab_size = 80;
    c.seq_len = 16;
    return c;
  }

  v1::JobSpec Spec(const std::string& init_from, const std::string& directory) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(R"(
name: fine-tune
model: {vocab_size: 80, num_layers: 2, d_model: 16, num_heads: 2, seq_len: 16}
pipeline: {num_stages: 1, schedule: paci, accumulation: 1, micro_batch_size: 2}
optimizer: {lr: 1e-9, weight_decay: 0}
training: {steps: 1, eval_micro_batches: 1}
runtime: {threads_per_stage: 1}
checkpoint: {directory: )", directory, ", init_from: ", init_from, R"(}
data: {corpus_path: )", PACI_SOURCE_DIR, "/tests/data/kjv-genesis.txt}\n"));
    EXPECT_TRUE(spec.ok()) << spec.status();
    ApplyJobSpecDefaults(&*spec);
    EXPECT_TRUE(ValidateJobSpec(*spec).ok());
    return *spec;
  }

  // Init and, when it succeeds, Run.
  absl::Status Train(const v1::JobSpec& spec) {
    CorpusOptions options;
    options.path = spec.data().corpus_path();
    options.seq_len = spec.model().seq_len();
    options.micro_batch_size = spec.pipeline().micro_batch_size();
    absl::StatusOr<Corpus> corpus = Corpus::Load(options);
    EXPECT_TRUE(corpus.ok()) << corpus.status();
    prometheus::Registry registry;
    Inbox inbox(16);
    StageMetrics metrics(registry, spec.name(), 0, 0, 1, 0, 0);
    StageRuntimeOptions runtime_options;
    runtime_options.spec = spec;
    runtime_options.corpus = &*corpus;
    runtime_options.inbox = &inbox;
    runtime_options.link_id = "t/0";
    StageRuntime runtime(std::move(runtime_options), metrics);
    absl::Status status = runtime.Init();
    return status.ok() ? runtime.Run() : status;
  }
};

TEST_F(InitFromTest, AJobStartsFromTheWeightsOfACheckpointOfAnotherStageCount) {
  WriteCheckpoint(Path("source"), 50, 2, JobConfig());
  ASSERT_TRUE(Train(Spec(Path("source"), Path("tuned"))).ok());
  // One step at lr 1e-9 later, the job's own checkpoint holds the source's weights.
  absl::StatusOr<ModelCheckpoint> source = ReadCheckpoint(Path("source"));
  absl::StatusOr<ModelCheckpoint> tuned = ReadCheckpoint(Path("tuned"));
  ASSERT_TRUE(source.ok() && tuned.ok()) << source.status() << tuned.status();
  EXPECT_EQ(tuned->step, 1);  // counted from 0, not from the source's 50
  EXPECT_EQ(tuned->num_stages, 1);
  ASSERT_EQ(tuned->parameters.size(), source->parameters.size());
  for (const auto& [name, tensor] : source->parameters) {
    EXPECT_LT(MaxDifference(tuned->parameters.at(name), tensor), 1e-6) << name;
  }
}

// Another shape is refused naming the field, even where every tensor would fit (num_heads
// changes none of them, yet the model it makes is another).
TEST_F(InitFromTest, ACheckpointOfAnotherShapeIsRefusedNamingTheField) {
  const std::pair<const char*, std::function<void(GptConfig&)>> cases[] = {
      {"model.d_model is 32 there, 16 here", [](GptConfig& c) { c.d_model = 32; }},
      {"model.num_heads is 4 there, 2 here", [](GptConfig& c) { c.num_heads = 4; }},
      {"model.num_layers is 3 there, 2 here", [](GptConfig& c) { c.num_layers = 3; }}};
  for (const auto& [message, change] : cases) {
    GptConfig other = JobConfig();
    change(other);
    ASSERT_NE(other.num_heads, 0);
    const std::string source = Path(absl::StrCat("source-", other.d_model, other.num_heads,
                                                 other.num_layers));
    WriteCheckpoint(source, 50, 1, other);
    const absl::Status status = Train(Spec(source, Path("tuned")));
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("checkpoint.init_from"), HasSubstr(message)));
    EXPECT_FALSE(HoldsCheckpoints(Path("tuned")));
  }
}

TEST_F(InitFromTest, AMissingSourceIsRefusedNamingTheField) {
  const absl::Status status = Train(Spec(Path("nowhere"), Path("tuned")));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("checkpoint.init_from"), HasSubstr(Path("nowhere"))));
  EXPECT_FALSE(HoldsCheckpoints(Path("tuned")));
}

}  // namespace
}  // namespace paci
