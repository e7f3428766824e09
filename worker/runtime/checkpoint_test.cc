#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "worker/model/test_models.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/checkpoint_layout.h"

namespace paci {
namespace {
namespace fs = std::filesystem;

GptConfig Config(uint64_t seed) {
  GptConfig c = TinyGpt({/*vocab_size=*/17, /*num_layers=*/4, /*d_model=*/16, /*num_heads=*/2,
                         /*seq_len=*/8});
  c.init_seed = seed;
  return c;
}

struct Stage {
  explicit Stage(uint64_t seed, int num_stages = 2, int stage = 0)
      : Stage(seed, PartitionStage(4, num_stages, stage)) {}
  Stage(uint64_t seed, const StagePartition& partition) : model(Config(seed), partition) {
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
    optimizer = std::make_unique<AdamW>(params, AdamWOptions{});
  }
  void TrainOneStep() {
    const torch::Tensor input = model->partition().has_embedding()
                                    ? torch::randint(17, {2, 8}, torch::kLong)
                                    : torch::randn({2, 8, 16});
    torch::Tensor loss = model(input).pow(2).mean();
    // A split head's rows on a stage before the last: a gradient, so AdamW keeps moments of them.
    if (model->partition().has_head_shard()) loss = loss + model->head_weight().pow(2).sum();
    loss.backward();
    optimizer->Step(0.01);
    optimizer->ZeroGrad();
  }
  ShardMeta Meta(int64_t step) const {
    ShardMeta m;
    m.job_name = "job";
    m.stage = model->partition().has_embedding() ? 0 : 1;
    m.num_stages = 2;
    m.model_fingerprint = model->Fingerprint();
    m.step = step;
    m.next_micro_batch = step * 4;
    return m;
  }
  GptStage model;
  std::unique_ptr<AdamW> optimizer;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    dir_ = (fs::path(testing::TempDir()) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name()).string();
    fs::remove_all(dir_);
  }
  // The two stages hold equal parameters, and still do after one more step
  // on the same data: the optimizer state was restored too.
  static void ExpectSameNowAndAfterAStep(Stage& trained, Stage& fresh) {
    auto expect_same = [&](const char* when) {
      auto b = fresh.model->named_parameters();
      for (auto& item : trained.model->named_parameters()) {
        EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key() << " " << when;
      }
    };
    expect_same("after loading");
    torch::manual_seed(5);
    trained.TrainOneStep();
    torch::manual_seed(5);
    fresh.TrainOneStep();
    expect_same("after one more step");
  }
  std::string dir_;
};

TEST_F(CheckpointTest, SaveThenLoadRestoresParametersOptimizerStateAndPosition) {
  Stage trained(1);
  trained.TrainOneStep();
  trained.TrainOneStep();
  const std::string path = ShardPath(dir_, 2, 0, 2);
  ASSERT_TRUE(SaveShard(path, trained.Meta(2), trained.model, *trained.optimizer).ok());

  Stage fresh(99);  // other initial weights
  auto meta = LoadShard(path, trained.Meta(0), fresh.model, *fresh.optimizer);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 2);
  EXPECT_EQ(meta->next_micro_batch, 8u);
  EXPECT_EQ(fresh.optimizer->steps(), 2);
  ExpectSameNowAndAfterAStep(trained, fresh);
}

TEST_F(CheckpointTest, ACorruptShardIsRefusedAndNothingChanges) {
  Stage trained(1);
  trained.TrainOneStep();
  const std::string path = ShardPath(dir_, 1, 0, 2);
  ASSERT_TRUE(SaveShard(path, trained.Meta(1), trained.model, *trained.optimizer).ok());
  std::string bytes = ReadFile(path);
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

  Stage fresh(99);
  const auto before = fresh.model->named_parameters().values()[0].clone();
  auto meta = LoadShard(path, trained.Meta(0), fresh.model, *fresh.optimizer);
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kDataLoss) << meta.status();
  EXPECT_NE(meta.status().message().find(path), std::string::npos);
  EXPECT_TRUE(torch::equal(before, fresh.model->named_parameters().values()[0]));
  EXPECT_EQ(fresh.optimizer->steps(), 0);
  EXPECT_EQ(ReadFile(path), bytes) << "the corrupt file must be left as it was";

  // A truncated shard too.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  EXPECT_EQ(LoadShard(path, trained.Meta(0), fresh.model, *fresh.optimizer).status().code(),
            absl::StatusCode::kDataLoss);
}

// Loads tests/data/bad-checkpoints/<file> as stage 0 of 2 into a fresh stage:
// it must be refused, the stage's parameters and optimizer left as they were.
// Returns the refusal and, in *path, where the shard was.
absl::Status LoadBadCheckpoint(const std::string& dir, const std::string& file,
                               std::string* path) {
  *path = ShardPath(dir, 1, 0, 2);
  fs::create_directories(fs::path(*path).parent_path());
  fs::copy_file(std::string(PACI_SOURCE_DIR) + "/tests/data/bad-checkpoints/" + file, *path);
  Stage fresh(99);
  const auto before = fresh.model->named_parameters().values()[0].clone();
  auto meta = LoadShard(*path, fresh.Meta(0), fresh.model, *fresh.optimizer);
  EXPECT_TRUE(torch::equal(before, fresh.model->named_parameters().values()[0]));
  EXPECT_EQ(fresh.optimizer->steps(), 0);
  return meta.ok() ? absl::OkStatus() : meta.status();
}

// Found by fuzz/checkpoint_fuzz.cc: an archive with a matching footer and CRC whose pickle
// makes LibTorch throw std::out_of_range, not c10::Error; it ended the process.
TEST_F(CheckpointTest, AForgedArchiveWithAValidFooterIsDataLossNotACrash) {
  std::string path;
  const absl::Status status = LoadBadCheckpoint(dir_, "unpickler-out-of-range.pt", &path);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(path + " is corrupt or unreadable"), std::string::npos)
      << status;
}

// A memo id of 1.6 billion in data.pkl (found by fuzz/checkpoint_fuzz.cc) would
// make LibTorch's unpickler allocate 25 GB: refused before it reads the pickle.
TEST_F(CheckpointTest, APickleWhoseMemoIdPassesItsSizeIsDataLossBeforeLibTorchReadsIt) {
  std::string path;
  const absl::Status status = LoadBadCheckpoint(dir_, "unpickler-memo-too-large.pt", &path);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(path + " is corrupt: "), std::string::npos) << status;
  EXPECT_NE(status.message().find("data.pkl: its pickle stores memo entry 1596876899"),
            std::string::npos)
      << status;
}

TEST_F(CheckpointTest, AShardOfAnotherStageOrModelIsRefusedNamingTheMismatch) {
  Stage stage0(1, 2, 0);
  const std::string path = ShardPath(dir_, 1, 0, 2);
  ASSERT_TRUE(SaveShard(path, stage0.Meta(1), stage0.model, *stage0.optimizer).ok());

  Stage stage1(1, 2, 1);
  ShardMeta expected = stage1.Meta(0);
  expected.stage = 1;
  auto meta = LoadShard(path, expected, stage1.model, *stage1.optimizer);
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(meta.status().message().find("written by stage 0 of 2; this worker is stage 1 of 2"),
            std::string::npos)
      << meta.status();

  ShardMeta other_model = stage0.Meta(0);
  other_model.model_fingerprint = "vocab=17 layers=4 d_model=32";
  meta = LoadShard(path, other_model, stage0.model, *stage0.optimizer);
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(meta.status().message().find("different model slice"), std::string::npos);
}

// A cut inside a block (worker/model/partition.h): stage 0 holds the
// embedding, block 0 and block 1's attention half, stage 1 block 1's MLP half
// onwards. Both shards save and load; a shard of another cut is refused.
TEST_F(CheckpointTest, ASubBlockCutSavesAndResumesAndAnotherCutIsRefused) {
  const StagePartition first{4, 0, 4}, second{4, 4, 10};
  for (const StagePartition& part : {first, second}) {
    Stage trained(1, part);
    trained.TrainOneStep();
    trained.TrainOneStep();
    EXPECT_NE(trained.model->Fingerprint().find("units=["), std::string::npos);
    ShardMeta meta = trained.Meta(2);
    meta.stage = part.has_embedding() ? 0 : 1;
    const std::string path = ShardPath(dir_, 2, meta.stage, 2);
    ASSERT_TRUE(SaveShard(path, meta, trained.model, *trained.optimizer).ok());

    Stage fresh(99, part);
    ShardMeta expected = fresh.Meta(0);
    expected.stage = meta.stage;
    auto loaded = LoadShard(path, expected, fresh.model, *fresh.optimizer);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(fresh.optimizer->steps(), 2);
    ExpectSameNowAndAfterAStep(trained, fresh);
  }
  // Stage 1 of the even cut (blocks 2 and 3) cannot load the shard of the cut above.
  Stage even(1, 2, 1);
  ShardMeta expected = even.Meta(0);
  expected.stage = 1;
  auto meta = LoadShard(ShardPath(dir_, 2, 1, 2), expected, even.model, *even.optimizer);
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kFailedPrecondition) << meta.status();
}

TEST_F(CheckpointTest, LatestCompleteStepIgnoresStepsWithMissingShards) {
  Stage s0(1, 2, 0), s1(1, 2, 1);
  ASSERT_TRUE(SaveShard(ShardPath(dir_, 10, 0, 2), s0.Meta(10), s0.model, *s0.optimizer).ok());
  ASSERT_TRUE(SaveShard(ShardPath(dir_, 10, 1, 2), s1.Meta(10), s1.model, *s1.optimizer).ok());
  ASSERT_TRUE(SaveShard(ShardPath(dir_, 20, 0, 2), s0.Meta(20), s0.model, *s0.optimizer).ok());
  auto latest = LatestCompleteStep(dir_, 2);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(-1), 10);
  EXPECT_TRUE(HoldsCheckpoints(dir_));
  EXPECT_FALSE(LatestCompleteStep(dir_ + "/nowhere", 2)->has_value());
  // Nothing but the shard in its folder: no temporary file is left.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(StepDirectory(dir_, 20))) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"stage-0-of-2.pt"});
}

// A stage died between the shards of the first checkpoint: a restart that
// resumes finds nothing complete and starts afresh, whatever the listing order.
TEST_F(CheckpointTest, OnlyAnIncompleteStepMeansNothingToResume) {
  Stage s0(1, 2, 0);
  const std::string dir = dir_ + "/first";
  ASSERT_TRUE(SaveShard(ShardPath(dir, 50, 0, 2), s0.Meta(50), s0.model, *s0.optimizer).ok());
  absl::StatusOr<std::optional<int64_t>> latest = LatestCompleteStep(dir, 2);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
}

// Writes both stages' shards of each of `steps`.
void SaveSteps(const std::string& dir, const std::vector<int64_t>& steps) {
  Stage s0(1, 2, 0), s1(1, 2, 1);
  for (int64_t step : steps) {
    ASSERT_TRUE(SaveShard(ShardPath(dir, step, 0, 2), s0.Meta(step), s0.model, *s0.optimizer).ok());
    ASSERT_TRUE(SaveShard(ShardPath(dir, step, 1, 2), s1.Meta(step), s1.model, *s1.optimizer).ok());
  }
}

// Cuts the file at `path` to `size` bytes, as a crash or a full disk can.
void Truncate(const std::string& path, uintmax_t size) { fs::resize_file(path, size); }

TEST_F(CheckpointTest, ATornNewestStepIsPassedOverAndNamedNotFatal) {
  SaveSteps(dir_, {10, 20, 30});
  const std::string torn = ShardPath(dir_, 30, 1, 2);
  Truncate(torn, fs::file_size(torn) / 2);
  EXPECT_EQ(VerifyShard(torn).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(VerifyShard(ShardPath(dir_, 20, 1, 2)).ok());
  std::vector<std::string> passed_over;
  absl::StatusOr<std::optional<int64_t>> step = LatestSoundStep(dir_, 2, &passed_over);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->value_or(-1), 20);
  ASSERT_EQ(passed_over.size(), 1u);
  EXPECT_NE(passed_over[0].find("step 30: "), std::string::npos) << passed_over[0];
  EXPECT_NE(passed_over[0].find(torn), std::string::npos) << passed_over[0];
  // The torn file is left as it was, for whoever looks into it.
  EXPECT_TRUE(fs::exists(torn));
}

TEST_F(CheckpointTest, NoSoundStepAtAllIsDataLossListingEachStep) {
  SaveSteps(dir_, {10, 20});
  for (int64_t step : {10, 20}) {
    std::ofstream(ShardPath(dir_, step, 0, 2), std::ios::binary | std::ios::trunc) << "garbage";
  }
  std::vector<std::string> passed_over;
  absl::StatusOr<std::optional<int64_t>> step = LatestSoundStep(dir_, 2, &passed_over);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(step.status().message().find("step 20: "), std::string::npos) << step.status();
  EXPECT_NE(step.status().message().find("step 10: "), std::string::npos) << step.status();
  // No checkpoint at all is no error: nothing to resume.
  step = LatestSoundStep(dir_ + "/nowhere", 2, &passed_over);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_FALSE(step->has_value());
}

// Stage 0's shard of step 30 is a copy of its shard of step 20: each shard
// verifies, but stage 0 would resume at step 20 and stage 1 at step 30. Step
// 30 is passed over, naming the shard; every stage resumes from step 20.
TEST_F(CheckpointTest, AShardCopiedFromAnOlderStepIsPassedOverNamingIt) {
  SaveSteps(dir_, {20, 30});
  const std::string stale = ShardPath(dir_, 30, 0, 2);
  fs::copy_file(ShardPath(dir_, 20, 0, 2), stale, fs::copy_options::overwrite_existing);
  EXPECT_TRUE(VerifyShard(stale).ok()) << "whole, but of another step";
  const absl::Status whole = CheckStep(dir_, 30, 2);
  EXPECT_EQ(whole.code(), absl::StatusCode::kFailedPrecondition) << whole;
  EXPECT_NE(whole.message().find(stale + " says it is stage 0 of 2 at step 20; its name says "
                                         "stage 0 of 2 at step 30"),
            std::string::npos)
      << whole;
  EXPECT_TRUE(CheckStep(dir_, 20, 2).ok());

  std::vector<std::string> passed_over;
  absl::StatusOr<std::optional<int64_t>> step = LatestSoundStep(dir_, 2, &passed_over);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->value_or(-1), 20);
  ASSERT_EQ(passed_over.size(), 1u);
  EXPECT_NE(passed_over[0].find("step 30: "), std::string::npos) << passed_over[0];
  EXPECT_NE(passed_over[0].find(stale), std::string::npos) << passed_over[0];

  // With no whole step left: FailedPrecondition naming the shard.
  fs::remove_all(StepDirectory(dir_, 20));
  passed_over.clear();
  step = LatestSoundStep(dir_, 2, &passed_over);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  EXPECT_NE(step.status().message().find(stale), std::string::npos) << step.status();
  EXPECT_TRUE(passed_over.empty());
}

// Another job's stage-1 shard, of the same model and stage count, copied into
// this job's newest step: passed over (as ReadCheckpoint refuses it), and it
// does not count for checkpoint.keep either.
TEST_F(CheckpointTest, AShardOfAnotherJobIsPassedOverNamingBothJobs) {
  SaveSteps(dir_, {20, 30});
  Stage other(1, 2, 1);
  ShardMeta meta = other.Meta(30);
  meta.job_name = "other-job";
  const std::string theirs = ShardPath(dir_ + "-other", 30, 1, 2);
  ASSERT_TRUE(SaveShard(theirs, meta, other.model, *other.optimizer).ok());
  const std::string foreign = ShardPath(dir_, 30, 1, 2);
  fs::copy_file(theirs, foreign, fs::copy_options::overwrite_existing);

  const absl::Status whole = CheckStep(dir_, 30, 2);
  EXPECT_EQ(whole.code(), absl::StatusCode::kFailedPrecondition) << whole;
  EXPECT_NE(whole.message().find(foreign + " is of job \"other-job\", stage 0's of job \"job\""),
            std::string::npos)
      << whole;
  std::vector<std::string> passed_over;
  absl::StatusOr<std::optional<int64_t>> step = LatestSoundStep(dir_, 2, &passed_over);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->value_or(-1), 20);
  ASSERT_EQ(passed_over.size(), 1u);
  EXPECT_NE(passed_over[0].find(foreign), std::string::npos) << passed_over[0];

  absl::StatusOr<std::vector<int64_t>> pruned = PruneSteps(dir_, 2, /*keep=*/1);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_TRUE(pruned->empty());
  EXPECT_TRUE(CheckStep(dir_, 20, 2).ok());
}

// checkpoint.keep 1 with a corrupt newest step: the step before it is the
// only one a resume can use, so it stays until a newer step is whole.
TEST_F(CheckpointTest, PruningCountsOnlyWholeStepsSoACorruptNewestStepKeepsTheLastGoodOne) {
  SaveSteps(dir_, {10, 20});
  const std::string corrupt = ShardPath(dir_, 20, 1, 2);
  std::string bytes = ReadFile(corrupt);
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
  std::ofstream(corrupt, std::ios::binary | std::ios::trunc) << bytes;

  absl::StatusOr<std::vector<int64_t>> pruned = PruneSteps(dir_, 2, /*keep=*/1);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_TRUE(pruned->empty());
  EXPECT_TRUE(CheckStep(dir_, 10, 2).ok());
  std::vector<std::string> passed_over;
  absl::StatusOr<std::optional<int64_t>> step = LatestSoundStep(dir_, 2, &passed_over);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->value_or(-1), 10);

  // Step 30 is whole: it alone stays. The steps found whole are remembered,
  // and forgotten once pruned.
  SaveSteps(dir_, {30});
  std::set<int64_t> whole = {10};
  pruned = PruneSteps(dir_, 2, 1, &whole);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(whole, std::set<int64_t>{30});
  EXPECT_EQ(*CompleteSteps(dir_, 2), std::vector<int64_t>{30});
}

TEST_F(CheckpointTest, PruningKeepsTheNewestCompleteStepsAndNothingOfAnotherStageCount) {
  SaveSteps(dir_, {10, 20, 30, 40});
  // A shard of a 3-stage job in step 10, and a temporary file a crash left in step 20.
  std::ofstream(ShardPath(dir_, 10, 0, 3)) << "other";
  std::ofstream(ShardPath(dir_, 20, 1, 2) + ".tmp.99.0") << "torn";
  // Stage 0 has written step 50, stage 1 not yet: 50 is not complete, so
  // 20, 30 and 40 stay and only step 10 goes (but the other job's shard).
  Stage s0(1, 2, 0);
  ASSERT_TRUE(SaveShard(ShardPath(dir_, 50, 0, 2), s0.Meta(50), s0.model, *s0.optimizer).ok());
  absl::StatusOr<std::vector<int64_t>> pruned = PruneSteps(dir_, 2, /*keep=*/3);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, std::vector<int64_t>{10});
  EXPECT_FALSE(fs::exists(ShardPath(dir_, 10, 0, 2)));
  EXPECT_FALSE(fs::exists(ShardPath(dir_, 10, 1, 2)));
  EXPECT_TRUE(fs::exists(ShardPath(dir_, 10, 0, 3)));
  EXPECT_EQ(*CompleteSteps(dir_, 2), (std::vector<int64_t>{20, 30, 40}));
  // Stage 1 saves 50 and prunes: 30, 40 and 50 stay; step 20 goes, its
  // temporary file and its folder with it.
  Stage s1(1, 2, 1);
  ASSERT_TRUE(SaveShard(ShardPath(dir_, 50, 1, 2), s1.Meta(50), s1.model, *s1.optimizer).ok());
  pruned = PruneSteps(dir_, 2, 3);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, std::vector<int64_t>{20});  // step 10 holds nothing of it any more
  EXPECT_FALSE(fs::exists(StepDirectory(dir_, 20)));
  EXPECT_TRUE(fs::exists(ShardPath(dir_, 10, 0, 3)));
  EXPECT_EQ(*CompleteSteps(dir_, 2), (std::vector<int64_t>{30, 40, 50}));
  // keep 0 keeps everything.
  pruned = PruneSteps(dir_, 2, 0);
  ASSERT_TRUE(pruned.ok());
  EXPECT_TRUE(pruned->empty());
  EXPECT_TRUE(fs::exists(ShardPath(dir_, 30, 0, 2)));
}

// A job resumed at another shape: the step of P stages read into a cut of P'
// stages carries every parameter and every AdamW moment over by its name,
// and the step count; each stage then steps as the unsplit model would.
void SaveStages(const std::string& dir, int64_t step, std::vector<Stage*> stages) {
  for (size_t s = 0; s < stages.size(); ++s) {
    ShardMeta meta = stages[s]->Meta(step);
    meta.stage = static_cast<int>(s);
    meta.num_stages = static_cast<int>(stages.size());
    ASSERT_TRUE(SaveShard(ShardPath(dir, step, meta.stage, meta.num_stages), meta,
                          stages[s]->model, *stages[s]->optimizer)
                    .ok());
  }
}

std::map<std::string, torch::Tensor> Everything(std::vector<Stage*> stages) {
  std::map<std::string, torch::Tensor> all;
  for (Stage* stage : stages) {
    for (auto& item : stage->model->named_parameters()) all["param/" + item.key()] = item.value();
    for (const auto& [name, t] : stage->optimizer->State()) all[name] = t;
  }
  return all;
}

void ExpectSame(const std::map<std::string, torch::Tensor>& a,
                const std::map<std::string, torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_EQ(b.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  }
}

TEST_F(CheckpointTest, AStepOfTwoStagesResumesAsOneAndOneAsTwo) {
  Stage s0(1, 2, 0), s1(1, 2, 1);
  for (Stage* s : {&s0, &s1}) {
    s->TrainOneStep();
    s->TrainOneStep();
  }
  SaveStages(dir_, 20, {&s0, &s1});
  Stage whole(99, 1, 0);  // other initial weights, the whole model
  absl::StatusOr<ShardMeta> meta = LoadRecut(dir_, 20, 2, whole.model, *whole.optimizer);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, 20);
  EXPECT_EQ(meta->next_micro_batch, 80u);
  EXPECT_EQ(whole.optimizer->steps(), 2);
  ExpectSame(Everything({&s0, &s1}), Everything({&whole}));

  // And back: the whole model's step, one more taken, into two stages.
  whole.TrainOneStep();
  SaveStages(dir_, 30, {&whole});
  Stage t0(7, 2, 0), t1(7, 2, 1);
  for (Stage* t : {&t0, &t1}) {
    ASSERT_TRUE(LoadRecut(dir_, 30, 1, t->model, *t->optimizer).ok());
    EXPECT_EQ(t->optimizer->steps(), 3);
  }
  ExpectSame(Everything({&whole}), Everything({&t0, &t1}));
}

// A head split by vocabulary keeps each stage's rows under the global name:
// a re-cut joins them in stage order (weights and AdamW moments) and cuts the
// joined head again for stages that split it.
TEST_F(CheckpointTest, ASplitHeadsRowsJoinWhenReCutAndSplitAgain) {
  const auto split = [](int stage) {
    StagePartition p{4, stage == 0 ? 0 : 5, stage == 0 ? 5 : 10};
    p.head_row_begin = stage == 0 ? 0 : 7;
    p.head_row_end = stage == 0 ? 7 : 17;
    return p;
  };
  Stage s0(1, split(0)), s1(1, split(1));
  for (Stage* s : {&s0, &s1}) {
    s->TrainOneStep();
    s->TrainOneStep();
  }
  SaveStages(dir_, 20, {&s0, &s1});
  Stage whole(99, 1, 0);
  absl::StatusOr<ShardMeta> meta = LoadRecut(dir_, 20, 2, whole.model, *whole.optimizer);
  ASSERT_TRUE(meta.ok()) << meta.status();
  std::map<std::string, torch::Tensor> parts0 = Everything({&s0}), parts1 = Everything({&s1});
  std::map<std::string, torch::Tensor> joined;
  for (const auto& [name, t] : parts0) joined[name] = t;
  for (const auto& [name, t] : parts1) {
    joined[name] = IsHeadWeight(name.substr(name.find('/') + 1)) ? torch::cat({joined.at(name), t}) : t;
  }
  ASSERT_EQ(joined.at("param/head.weight").size(0), 17);
  ASSERT_GT(joined.at("exp_avg/head.weight").narrow(0, 0, 7).abs().sum().item<double>(), 0);
  ExpectSame(joined, Everything({&whole}));

  // And split again: the whole model's step, one more taken, into the split stages.
  whole.TrainOneStep();
  SaveStages(dir_, 30, {&whole});
  Stage t0(7, split(0)), t1(7, split(1));
  for (Stage* t : {&t0, &t1}) ASSERT_TRUE(LoadRecut(dir_, 30, 1, t->model, *t->optimizer).ok());
  const std::map<std::string, torch::Tensor> all = Everything({&whole});
  for (Stage* t : {&t0, &t1}) {
    for (const auto& [name, tensor] : Everything({t})) {
      const std::string key = name.rfind("param/", 0) == 0 ? name.substr(6) : name;
      EXPECT_TRUE(torch::equal(tensor, StageRowsOf(*t->model, key, all.at(name)))) << name;
    }
  }
}

// A stage that skipped a non-finite step took one optimizer step fewer: the
// re-cut goes on from the fewest of the shards it takes from, not a refusal.
TEST_F(CheckpointTest, ShardsAtDifferentOptimizerStepsAreReCutFromTheFewest) {
  Stage s0(1, 2, 0), s1(1, 2, 1);
  s0.TrainOneStep();
  s0.TrainOneStep();
  for (int i = 0; i < 3; ++i) s1.TrainOneStep();
  SaveStages(dir_, 30, {&s0, &s1});
  Stage whole(99, 1, 0);
  ASSERT_TRUE(LoadRecut(dir_, 30, 2, whole.model, *whole.optimizer).ok());
  EXPECT_EQ(whole.optimizer->steps(), 2);
  ExpectSame(Everything({&s0, &s1}), Everything({&whole}));
}

TEST_F(CheckpointTest, TheNewestWholeStepOfAnyStageCountIsWhereAJobResumes) {
  Stage s0(1, 2, 0), s1(1, 2, 1), whole(1, 1, 0);
  SaveStages(dir_, 10, {&s0, &s1});
  SaveStages(dir_, 20, {&whole});
  std::vector<std::string> passed_over;
  absl::StatusOr<std::optional<CheckpointStep>> found = LatestSoundCheckpoint(dir_, 2, &passed_over);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->step, 20);
  EXPECT_EQ((*found)->num_stages, 1);
  // The same step of both counts: the job's own count.
  SaveStages(dir_, 20, {&s0, &s1});
  found = LatestSoundCheckpoint(dir_, 2, &passed_over);
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->num_stages, 2);
  // A torn newest step of one count does not hide the other count's.
  SaveStages(dir_, 30, {&whole});
  const std::string torn = ShardPath(dir_, 30, 0, 1);
  Truncate(torn, fs::file_size(torn) / 2);
  found = LatestSoundCheckpoint(dir_, 2, &passed_over);
  ASSERT_TRUE(found.ok() && found->has_value()) << found.status();
  EXPECT_EQ((*found)->step, 20);
  EXPECT_EQ((*found)->num_stages, 2);
  ASSERT_FALSE(passed_over.empty());
  EXPECT_NE(passed_over.back().find("step 30"), std::string::npos) << passed_over.back();
  // Nothing at all: nothing to resume.
  passed_over.clear();
  found = LatestSoundCheckpoint(dir_ + "-none", 2, &passed_over);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());
}

// A job resumed at another count: the old count's steps go once the new
// count has checkpoint.keep whole steps of its own, older ones only.
TEST_F(CheckpointTest, StepsOfAnotherStageCountGoOnceThisCountHasKeepOfItsOwn) {
  Stage s0(1, 2, 0), s1(1, 2, 1), whole(1, 1, 0);
  SaveStages(dir_, 10, {&s0, &s1});
  SaveStages(dir_, 20, {&s0, &s1});
  SaveStages(dir_, 30, {&whole});
  SaveStages(dir_, 40, {&whole});
  absl::StatusOr<std::vector<int64_t>> removed = PruneOtherStageCounts(dir_, 1, 3, {30, 40});
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());  // only 2 of its own: the old count's stay
  removed = PruneOtherStageCounts(dir_, 1, 2, {30, 40});
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<int64_t>{10, 20}));
  EXPECT_FALSE(fs::exists(ShardPath(dir_, 10, 0, 2)));
  EXPECT_FALSE(fs::exists(ShardPath(dir_, 20, 1, 2)));
  EXPECT_TRUE(fs::exists(ShardPath(dir_, 30, 0, 1)));
  EXPECT_TRUE(PruneOtherStageCounts(dir_, 1, 0, {30, 40})->empty());  // keep 0: all stay
}

TEST_F(CheckpointTest, AStepOfAnotherModelIsNotReCutAndNothingChanges) {
  Stage s0(1, 2, 0), s1(1, 2, 1);
  SaveStages(dir_, 10, {&s0, &s1});
  GptConfig wider = Config(3);
  wider.d_model = 32;
  GptStage other(wider, PartitionStage(4, 1, 0));
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& item : other->named_parameters()) params.emplace_back(item.key(), item.value());
  AdamW optimizer(params, AdamWOptions{});
  const torch::Tensor before = params.front().second.clone();
  absl::StatusOr<ShardMeta> meta = LoadRecut(dir_, 10, 2, other, optimizer);
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(meta.status().message().find("holds a model of another shape"), std::string::npos)
      << meta.status();
  EXPECT_TRUE(torch::equal(before, params.front().second));
  EXPECT_EQ(optimizer.steps(), 0);
  // A shard of the step gone missing: NotFound naming it.
  fs::remove(ShardPath(dir_, 10, 1, 2));
  Stage whole(99, 1, 0);
  meta = LoadRecut(dir_, 10, 2, whole.model, *whole.optimizer);
  EXPECT_FALSE(meta.ok());
  EXPECT_NE(meta.status().message().find("stage-1-of-2.pt"), std::string::npos) << meta.status();
}

}  // namespace
}  // namespace paci
