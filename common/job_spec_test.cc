#include "common/job_spec.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include <google/protobuf/unknown_field_set.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/schedule_kind.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kGenesis = PACI_SOURCE_DIR "/tests/data/kjv-genesis.txt";

// Every field set, in snake_case keys.
constexpr char kFullSpec[] = R"yaml(
name: kjv-small
model:
  vocab_size: 96
  num_layers: 4
  d_model: 128
  num_heads: 4
  seq_len: 64
  dropout: 0.1
  init_seed: 42
  architecture: gpt2
  num_kv_heads: 4
  ffn_hidden_size: 512
  rope_theta: 10000
  norm_eps: 1e-5
pipeline:
  num_stages: 2
  schedule: gpipe
  accumulation: 2
  micro_batch_size: 8
  partition: "6"
  drift_correction: none
  warmup_steps: 0
  data_parallel: 2
optimizer:
  lr: 3e-3
  beta1: 0.8
  beta2: 0.99
  eps: 1e-6
  weight_decay: 0.0
  warmup_fraction: 0.05
  min_lr_ratio: 0.2
  clip_norm: 1.5
training:
  steps: 300
  eval_interval: 50
  eval_micro_batches: 2
  max_nonfinite_steps: 3
data:
  corpus_path: CORPUS
  validation_fraction: 0.1
  seed: 7
  tokenizer: char
checkpoint:
  directory: /tmp/ckpt
  interval: 100
  resume: true
  keep: 0
runtime:
  threads_per_stage: 2
  device: cpu
  precision: bf16-autocast
run_policy:
  backoff_limit: 0
  active_deadline_seconds: 3600
  priority: 5
  worker_selector: {pool: gpu}
)yaml";

// The smallest spec that validates once defaults are applied.
constexpr char kMinimalSpec[] = R"yaml(
name: minimal
model: {vocab_size: 96, num_layers: 4, d_model: 128, num_heads: 4, seq_len: 64}
pipeline: {num_stages: 2, accumulation: 2, micro_batch_size: 8}
optimizer: {lr: 3e-3}
training: {steps: 300}
data: {corpus_path: CORPUS}
)yaml";

std::string WithCorpus(const char* yaml, const std::string& corpus = kGenesis) {
  return absl::StrReplaceAll(yaml, {{"CORPUS", corpus}});
}

std::string WriteTempFile(const std::string& name, const std::string& contents) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

v1::JobSpec ValidMinimalSpec() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(WithCorpus(kMinimalSpec));
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  return *spec;
}

// The data of `spec` from a dataset folder instead of its corpus.
void UseDataset(v1::JobSpec* spec) {
  spec->mutable_data()->clear_corpus_path();
  spec->mutable_data()->clear_tokenizer();
  spec->mutable_data()->clear_tokenizer_model();
  spec->mutable_data()->set_dataset("/data/kjv");
}

void ExpectInvalid(const v1::JobSpec& spec, const std::string& field) {
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(field + ": "));
}

void ExpectParseError(const std::string& yaml, const std::string& expected) {
  const absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(expected));
}

TEST(ParseJobSpecYamlTest, ReadsEveryFieldOfAFullSpec) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(WithCorpus(kFullSpec));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "kjv-small");
  EXPECT_EQ(spec->model().vocab_size(), 96);
  EXPECT_EQ(spec->model().num_layers(), 4);
  EXPECT_EQ(spec->model().d_model(), 128);
  EXPECT_EQ(spec->model().num_heads(), 4);
  EXPECT_EQ(spec->model().seq_len(), 64);
  EXPECT_FLOAT_EQ(spec->model().dropout(), 0.1f);
  EXPECT_EQ(spec->model().init_seed(), 42u);
  EXPECT_EQ(spec->pipeline().num_stages(), 2);
  EXPECT_EQ(spec->pipeline().schedule(), "gpipe");
  EXPECT_EQ(spec->pipeline().accumulation(), 2);
  EXPECT_EQ(spec->pipeline().micro_batch_size(), 8);
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), 3e-3f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta1(), 0.8f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta2(), 0.99f);
  EXPECT_FLOAT_EQ(spec->optimizer().eps(), 1e-6f);
  ASSERT_TRUE(spec->optimizer().has_weight_decay());
  EXPECT_FLOAT_EQ(spec->optimizer().weight_decay(), 0.0f);
  EXPECT_FLOAT_EQ(spec->optimizer().warmup_fraction(), 0.05f);
  EXPECT_FLOAT_EQ(spec->optimizer().min_lr_ratio(), 0.2f);
  EXPECT_EQ(spec->training().steps(), 300);
  EXPECT_EQ(spec->training().eval_interval(), 50);
  EXPECT_EQ(spec->training().eval_micro_batches(), 2);
  EXPECT_FLOAT_EQ(spec->optimizer().clip_norm(), 1.5f);
  EXPECT_EQ(spec->training().max_nonfinite_steps(), 3);
  EXPECT_EQ(spec->data().corpus_path(), kGenesis);
  EXPECT_FLOAT_EQ(spec->data().validation_fraction(), 0.1f);
  EXPECT_EQ(spec->data().seed(), 7u);
  EXPECT_EQ(spec->data().tokenizer(), "char");
  EXPECT_EQ(spec->checkpoint().directory(), "/tmp/ckpt");
  EXPECT_EQ(spec->checkpoint().interval(), 100);
  EXPECT_TRUE(spec->checkpoint().resume());
  EXPECT_EQ(spec->runtime().threads_per_stage(), 2);
}

TEST(ParseJobSpecYamlTest, AcceptsCamelCaseKeys) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(R"yaml(
model: {vocabSize: 96, numLayers: 4, dModel: 128, numHeads: 4, seqLen: 64, initSeed: 9}
pipeline: {numStages: 2, microBatchSize: 8}
training: {evalInterval: 5, evalMicroBatches: 3}
data: {corpusPath: a.txt, validationFraction: 0.2}
runtime: {threadsPerStage: 3}
)yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().vocab_size(), 96);
  EXPECT_EQ(spec->model().num_layers(), 4);
  EXPECT_EQ(spec->model().d_model(), 128);
  EXPECT_EQ(spec->model().num_heads(), 4);
  EXPECT_EQ(spec->model().seq_len(), 64);
  EXPECT_EQ(spec->model().init_seed(), 9u);
  EXPECT_EQ(spec->pipeline().num_stages(), 2);
  EXPECT_EQ(spec->pipeline().micro_batch_size(), 8);
  EXPECT_EQ(spec->training().eval_interval(), 5);
  EXPECT_EQ(spec->training().eval_micro_batches(), 3);
  EXPECT_EQ(spec->data().corpus_path(), "a.txt");
  EXPECT_FLOAT_EQ(spec->data().validation_fraction(), 0.2f);
  EXPECT_EQ(spec->runtime().threads_per_stage(), 3);
}

TEST(ParseJobSpecYamlTest, ReadsJsonToo) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml(R"({"name": "j", "pipeline": {"num_stages": 3}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "j");
  EXPECT_EQ(spec->pipeline().num_stages(), 3);
}

TEST(ParseJobSpecYamlTest, QuotedNumbersStayStrings) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml("name: \"123\"\npipeline: {schedule: '1e3'}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "123");
  EXPECT_EQ(spec->pipeline().schedule(), "1e3");
}

TEST(ParseJobSpecYamlTest, UnquotedNumberForAStringFieldIsInvalid) {
  ExpectParseError("name: 123\n", "name");
}

TEST(ParseJobSpecYamlTest, YamlNumberFormsBecomeNumbers) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      "model: {num_layers: +007, dropout: .5}\noptimizer: {lr: 2., eps: 1E-8}\n"
      "training: {steps: -3}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().num_layers(), 7);
  EXPECT_FLOAT_EQ(spec->model().dropout(), 0.5f);
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), 2.0f);
  EXPECT_FLOAT_EQ(spec->optimizer().eps(), 1e-8f);
  EXPECT_EQ(spec->training().steps(), -3);
}

TEST(ParseJobSpecYamlTest, EscapesQuotesBackslashesControlCharsAndKeepsUtf8) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml("data:\n  corpus_path: \"a\\\"b\\\\c\\td\\x01é\"\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().corpus_path(), "a\"b\\c\td\x01\xc3\xa9");
}

TEST(ParseJobSpecYamlTest, BooleansParse) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("checkpoint: {resume: true}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->checkpoint().resume());
}

TEST(ParseJobSpecYamlTest, NullValuesLeaveFieldsUnset) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml("name: x\ncheckpoint:\nmodel:\n  dropout: ~\n  init_seed: null\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_checkpoint());
  EXPECT_FALSE(spec->model().has_dropout());
  EXPECT_FALSE(spec->model().has_init_seed());
}

TEST(ParseJobSpecYamlTest, DuplicateKeyIsInvalidArgumentWithLine) {
  ExpectParseError("name: x\nname: y\n", "line 2: duplicate key \"name\"");
}

TEST(ParseJobSpecYamlTest, UnknownKeyIsInvalidArgumentNamingTheKey) {
  ExpectParseError("optimizer:\n  learning_rate: 0.1\n", "learning_rate");
}

TEST(ParseJobSpecYamlTest, WrongTypeIsInvalidArgumentNamingTheField) {
  ExpectParseError("pipeline:\n  num_stages: two\n", "num_stages");
}

TEST(ParseJobSpecYamlTest, SyntaxErrorIsInvalidArgumentWithLineAndColumn) {
  ExpectParseError("name: x\nmodel:\n  vocab_size: [96\n", "line ");
  ExpectParseError("name: x\nmodel: {vocab_size: 96\n", "YAML syntax error at line");
}

TEST(ParseJobSpecYamlTest, EmptyOrNonMappingDocumentIsInvalidArgument) {
  for (const char* yaml : {"", "# only a comment\n", "- a\n- b\n", "just-a-string"}) {
    ExpectParseError(yaml, "spec: expected a mapping at the top level");
  }
}

TEST(LoadJobSpecFileTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = testing::TempDir() + "/no-such-spec.yaml";
  const absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr(absl::StrCat("spec file: cannot read ", path, ": ")));
}

TEST(LoadJobSpecFileTest, ReadsAndParsesTheFile) {
  const absl::StatusOr<v1::JobSpec> spec =
      LoadJobSpecFile(WriteTempFile("load.yaml", WithCorpus(kFullSpec)));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "kjv-small");
}

TEST(ApplyJobSpecDefaultsTest, FillsEveryUnsetOptionalField) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(WithCorpus(kMinimalSpec));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  EXPECT_FLOAT_EQ(spec->model().dropout(), 0.0f);
  EXPECT_TRUE(spec->model().has_dropout());
  EXPECT_EQ(spec->model().init_seed(), 1234u);
  EXPECT_EQ(spec->pipeline().schedule(), "paci");
  EXPECT_EQ(spec->pipeline().partition(), "balanced");
  EXPECT_EQ(spec->pipeline().accumulation(), 2);
  EXPECT_EQ(spec->pipeline().data_parallel(), 1);
  EXPECT_EQ(WorkersOf(spec->pipeline()), spec->pipeline().num_stages());
  EXPECT_FLOAT_EQ(spec->optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(spec->optimizer().beta2(), 0.95f);
  EXPECT_FLOAT_EQ(spec->optimizer().eps(), 1e-8f);
  EXPECT_FLOAT_EQ(spec->optimizer().weight_decay(), 0.1f);
  EXPECT_FLOAT_EQ(spec->optimizer().warmup_fraction(), 0.01f);
  EXPECT_FLOAT_EQ(spec->optimizer().min_lr_ratio(), 0.1f);
  EXPECT_EQ(spec->training().eval_interval(), 30);
  EXPECT_EQ(spec->training().eval_micro_batches(), 4);
  EXPECT_EQ(spec->training().max_nonfinite_steps(), 10);
  EXPECT_FALSE(spec->optimizer().has_clip_norm());
  EXPECT_FLOAT_EQ(spec->data().validation_fraction(), 0.05f);
  EXPECT_EQ(spec->data().seed(), 1u);
  EXPECT_EQ(spec->data().tokenizer(), "char");
  EXPECT_EQ(spec->runtime().threads_per_stage(), 1);
  EXPECT_FALSE(spec->has_checkpoint());
  v1::JobSpec saving = *spec;
  saving.mutable_checkpoint()->set_directory("/tmp/ckpt");
  ApplyJobSpecDefaults(&saving);
  EXPECT_EQ(saving.checkpoint().keep(), 3);
}

TEST(ApplyJobSpecDefaultsTest, KeepsExplicitValuesIncludingZero) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(WithCorpus(kFullSpec));
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec defaulted = *spec;
  ApplyJobSpecDefaults(&defaulted);
  EXPECT_EQ(defaulted.SerializeAsString(), spec->SerializeAsString());
  EXPECT_FLOAT_EQ(defaulted.optimizer().weight_decay(), 0.0f);
}

TEST(ValidateJobSpecTest, RunPolicyRangesAreNamed) {
  v1::JobSpec spec = *ParseJobSpecYaml(WithCorpus(kFullSpec));
  spec.mutable_runtime()->set_trace_max_spans(1000001);
  EXPECT_NE(ValidateJobSpec(spec).message().find("runtime.trace_max_spans"), std::string::npos);
  spec.mutable_runtime()->set_trace_max_spans(1000000);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_checkpoint()->set_keep(-1);
  EXPECT_NE(ValidateJobSpec(spec).message().find("checkpoint.keep"), std::string::npos);
  spec.mutable_checkpoint()->set_keep(3);
  spec.mutable_run_policy()->set_backoff_limit(-1);
  EXPECT_NE(ValidateJobSpec(spec).message().find("run_policy.backoff_limit"), std::string::npos);
  spec.mutable_run_policy()->set_backoff_limit(1);
  spec.mutable_run_policy()->set_active_deadline_seconds(-5);
  EXPECT_NE(ValidateJobSpec(spec).message().find("run_policy.active_deadline_seconds"),
            std::string::npos);
  spec.mutable_run_policy()->set_active_deadline_seconds(0);
  spec.mutable_run_policy()->set_ttl_seconds_after_finished(-1);
  EXPECT_NE(ValidateJobSpec(spec).message().find("run_policy.ttl_seconds_after_finished"),
            std::string::npos);
  spec.mutable_run_policy()->set_ttl_seconds_after_finished(0);
  (*spec.mutable_run_policy()->mutable_worker_selector())[""] = "x";
  EXPECT_NE(ValidateJobSpec(spec).message().find("run_policy.worker_selector"), std::string::npos);
}

TEST(ApplyJobSpecDefaultsTest, IsIdempotent) {
  v1::JobSpec once = ValidMinimalSpec();
  v1::JobSpec twice = once;
  ApplyJobSpecDefaults(&twice);
  EXPECT_EQ(twice.SerializeAsString(), once.SerializeAsString());
}

TEST(ApplyJobSpecDefaultsTest, EvalIntervalIsAtLeastOneForShortRuns) {
  v1::JobSpec spec;
  spec.mutable_training()->set_steps(5);
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.training().eval_interval(), 1);
}

TEST(ApplyJobSpecDefaultsTest, AsyncOneFOneBGetsAccumulationOne) {
  v1::JobSpec spec;
  spec.mutable_pipeline()->set_schedule("async-1f1b");
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.pipeline().accumulation(), 1);
}

// A spec of P stages from YAML, with `pipeline_extra` in its pipeline, defaults applied.
v1::JobSpec PipelineSpec(int P, const std::string& pipeline_extra) {
  const std::string yaml = absl::StrCat(
      "name: d\nmodel: {vocab_size: 96, num_layers: 16, d_model: 32, num_heads: 4, seq_len: 8}\n"
      "pipeline: {num_stages: ", P, ", micro_batch_size: 2", pipeline_extra, "}\n"
      "optimizer: {lr: 1e-3}\ntraining: {steps: 10}\ndata: {corpus_path: x}\n");
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  return *spec;
}

// pipeline.global_batch (micro_batch_size 2 here): the accumulation follows from it
// and the replicas, or it from the accumulation; a drift limit never chooses either.
TEST(GlobalBatchTest, TheAccumulationFollowsFromTheGlobalBatchAndTheReplicas) {
  for (auto [R, G, a] : {std::tuple{1, 8, 4}, {2, 8, 2}, {4, 8, 1}, {1, 2, 1}, {3, 60, 10}}) {
    SCOPED_TRACE(absl::StrCat("R=", R, " G=", G));
    const v1::JobSpec spec =
        PipelineSpec(4, absl::StrCat(", global_batch: ", G, ", data_parallel: ", R));
    EXPECT_EQ(spec.pipeline().accumulation(), a);
    EXPECT_EQ(spec.pipeline().global_batch(), G);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
  // Given the accumulation, the global batch is what it gives; the spec keeps what the user gave.
  const v1::JobSpec from_accumulation = PipelineSpec(4, ", accumulation: 3, data_parallel: 2");
  EXPECT_FALSE(from_accumulation.pipeline().has_global_batch());
  EXPECT_EQ(GlobalBatch(from_accumulation.pipeline()), 12);
  EXPECT_EQ(GlobalBatch(PipelineSpec(4, ", global_batch: 8, data_parallel: 2").pipeline()), 8);
  // The same global batch whatever the drift limit: D only checks the split.
  const v1::JobSpec limited = PipelineSpec(4, ", global_batch: 8, max_drift: 1");
  EXPECT_EQ(limited.pipeline().accumulation(), 4);
  EXPECT_TRUE(ValidateJobSpec(limited).ok()) << ValidateJobSpec(limited);
}

TEST(GlobalBatchTest, AMaxDriftAloneOrASplitThatDoesNotAddUpIsRefusedNamingTheField) {
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", max_drift: 1")).message(),
            "pipeline.accumulation: required (or pipeline.global_batch, from which it is "
            "derived); max_drift does not choose the batch, the sequences per optimizer step "
            "are yours");
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", global_batch: 7")).message(),
            "pipeline.global_batch: must be a multiple of micro_batch_size x data_parallel (2 x "
            "1 = 2), got 7");
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", global_batch: 8, accumulation: 2")).message(),
            "pipeline.global_batch: must be accumulation x micro_batch_size x data_parallel (2 x "
            "1 = 2): 2 x 2 = 4; give one of global_batch and accumulation, or both in agreement, "
            "got 8");
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", global_batch: 8194")).message(),
            "pipeline.global_batch: must be at most 4096 (the largest accumulation) x "
            "micro_batch_size x data_parallel (2 x 1 = 2), got 8194");
  ExpectInvalid(PipelineSpec(4, ", global_batch: 0"), "pipeline.global_batch");
  ExpectInvalid(PipelineSpec(4, ", global_batch: -4"), "pipeline.global_batch");
  // A global batch too small for the limit: the accumulation it gives is named.
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", global_batch: 2, max_drift: 1")).message(),
            "pipeline.max_drift: accumulation 1 lets a micro-batch cross ceil(3/1) = 3 optimizer "
            "steps at stage 0, more than max_drift 1; use accumulation of at least 3 (for the "
            "same global batch, a smaller micro_batch_size)");
}

TEST(DriftLimitTest, LeftOutItIsWhatTheAccumulationGives) {
  const auto limit = [](int P, const std::string& extra) {
    const v1::JobSpec spec = PipelineSpec(P, extra);
    EXPECT_FALSE(spec.pipeline().has_max_drift()) << "the spec keeps what the user gave";
    return DriftLimit(spec.pipeline());
  };
  EXPECT_EQ(limit(8, ", accumulation: 2"), 4);
  EXPECT_EQ(limit(8, ", accumulation: 7"), 1);
  EXPECT_EQ(limit(8, ", accumulation: 2, schedule: 1f1b-flush"), 0);
  EXPECT_EQ(limit(8, ", schedule: async-1f1b"), 7);
  EXPECT_EQ(limit(1, ", accumulation: 3"), 0);
  // Given both, consistent: kept as given (a limit above what a gives is allowed).
  const v1::JobSpec both = PipelineSpec(8, ", accumulation: 4, max_drift: 3");
  EXPECT_EQ(both.pipeline().accumulation(), 4);
  EXPECT_EQ(DriftLimit(both.pipeline()), 3);
  EXPECT_TRUE(ValidateJobSpec(both).ok()) << ValidateJobSpec(both);
}

TEST(DriftLimitTest, AContradictionOrAnImpossibleLimitIsRefusedNamingMaxDrift) {
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(8, ", accumulation: 2, max_drift: 2")).message(),
            "pipeline.max_drift: accumulation 2 lets a micro-batch cross ceil(7/2) = 4 optimizer "
            "steps at stage 0, more than max_drift 2; use accumulation of at least 4 (for the "
            "same global batch, a smaller micro_batch_size)");
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", accumulation: 4, max_drift: 0")).message(),
            "pipeline.max_drift: 0 with schedule paci needs a single stage (a drift of 0 is the "
            "flush: use schedule 1f1b-flush), got 4 stages");
  ExpectInvalid(PipelineSpec(4, ", schedule: async-1f1b, max_drift: 2"), "pipeline.max_drift");
  ExpectInvalid(PipelineSpec(4, ", accumulation: 2, max_drift: -1"), "pipeline.max_drift");
  ExpectInvalid(PipelineSpec(4, ", accumulation: 2, max_drift: 5000"), "pipeline.max_drift");
  // The flushes never drift: any limit holds.
  EXPECT_TRUE(ValidateJobSpec(PipelineSpec(4, ", schedule: 1f1b-flush, accumulation: 4, max_drift: 0")).ok());
  // Neither given.
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, "")).message(),
            "pipeline.accumulation: required (or pipeline.global_batch, from which it is derived)");
}

// The automatic default (steps: 10 here): a pipeline that drifts gets weight prediction after
// a synchronous warm-up that grows with the share of forwards crossing a step; one stage, or a
// flush, gets neither; what the spec gives is kept.
TEST(AutomaticDefaultTest, PredictsAfterAWarmUpThatGrowsWithTheDriftWhereThePipelineDrifts) {
  for (const char* schedule : {"paci", "async-1f1b"}) {
    SCOPED_TRACE(schedule);
    const v1::JobSpec spec =
        PipelineSpec(4, absl::StrCat(", accumulation: 1, schedule: ", schedule));
    EXPECT_EQ(spec.pipeline().drift_correction(), "predict");
    EXPECT_EQ(spec.pipeline().warmup_steps(), 5);  // a = 1 at P = 4: 3/4 cross, capped at half
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
  for (const char* schedule : {"1f1b-flush", "gpipe"}) {
    SCOPED_TRACE(schedule);
    const v1::JobSpec spec =
        PipelineSpec(4, absl::StrCat(", accumulation: 2, schedule: ", schedule));
    EXPECT_EQ(spec.pipeline().drift_correction(), "none");
    EXPECT_EQ(spec.pipeline().warmup_steps(), 0);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
  const v1::JobSpec one_stage = PipelineSpec(1, ", accumulation: 2");
  EXPECT_EQ(one_stage.pipeline().drift_correction(), "none");
  EXPECT_EQ(one_stage.pipeline().warmup_steps(), 0);
  const v1::JobSpec given =
      PipelineSpec(4, ", accumulation: 2, drift_correction: none, warmup_steps: 0");
  EXPECT_EQ(given.pipeline().drift_correction(), "none");
  EXPECT_EQ(given.pipeline().warmup_steps(), 0);
  EXPECT_TRUE(given.pipeline().has_warmup_steps());
  // 0.8 of the share S of forwards whose backward crosses a step, rounded up, at most half
  // the run: S = sum_s min(a, P-1-s) / (a P).
  struct Case {
    ScheduleKind schedule;
    int P, a;
    int64_t steps, warmup;
  };
  for (const Case& c : {
           Case{ScheduleKind::kPaci, 2, 4, 600, 60},     // S = 1/8: a tenth
           Case{ScheduleKind::kPaci, 2, 4, 2000, 200},
           Case{ScheduleKind::kPaci, 2, 4, 95, 10},      // 9.5 rounded up
           Case{ScheduleKind::kPaci, 2, 4, 1, 1},
           Case{ScheduleKind::kPaci, 2, 2, 1000, 200},   // S = 1/4
           Case{ScheduleKind::kPaci, 4, 3, 600, 240},    // S = (1+2+3)/12 = 1/2
           Case{ScheduleKind::kPaci, 4, 4, 600, 180},    // S = (1+2+3)/16
           Case{ScheduleKind::kPaci, 8, 7, 600, 240},    // S = 28/56
           Case{ScheduleKind::kPaci, 8, 2, 600, 300},    // S = 13/16: capped at half
           Case{ScheduleKind::kAsyncOneFOneB, 2, 1, 600, 240},  // S = 1/2
           Case{ScheduleKind::kPaci, 2, 4, std::numeric_limits<int64_t>::max(),
                std::numeric_limits<int64_t>::max() / 10 + 1},  // no overflow
       }) {
    SCOPED_TRACE(absl::StrCat("P ", c.P, " a ", c.a, " steps ", c.steps));
    EXPECT_EQ(ScheduleTraitsOf(c.schedule).default_warmup_steps(c.P, c.a, c.steps), c.warmup);
  }
  // ApplyJobSpecDefaults reads the accumulation the global batch gives (10 steps here):
  // a = 6 / 2 = 3 at P = 4 warms up 4 steps, where a = 1 would warm up 5.
  EXPECT_EQ(PipelineSpec(4, ", global_batch: 6").pipeline().warmup_steps(), 4);
  EXPECT_EQ(PipelineSpec(4, ", global_batch: 2").pipeline().warmup_steps(), 5);
}

TEST(DriftCorrectionTest, IsOneOfTheTablesAndOnlyForTheDriftingSchedules) {
  for (const char* correction : {"none", "staleness", "stage-lr", "predict", "delay-comp"}) {
    const v1::JobSpec spec =
        PipelineSpec(4, absl::StrCat(", accumulation: 2, drift_correction: ", correction));
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << correction << ": " << ValidateJobSpec(spec);
  }
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", accumulation: 2, drift_correction: magic")).message(),
            "pipeline.drift_correction: must be none, staleness, stage-lr, predict or delay-comp, "
            "got \"magic\"");
  ExpectInvalid(PipelineSpec(4, ", accumulation: 2, schedule: 1f1b-flush, drift_correction: staleness"),
                "pipeline.drift_correction");
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", accumulation: 2, schedule: gpipe, "
                                            "drift_correction: predict"))
                .message(),
            "pipeline.drift_correction: must be none unless schedule is paci or async-1f1b, got "
            "\"predict\"");
}

// pipeline.warmup_steps (steps: 10 here): 0 when given so, within the run, and
// only for a schedule with drift to release.
TEST(WarmupTest, IsWithinTheRunAndOnlyForTheSchedulesThatDoNotFlush) {
  EXPECT_EQ(PipelineSpec(4, ", accumulation: 2, warmup_steps: 0").pipeline().warmup_steps(), 0);
  for (const char* schedule : {"paci", "async-1f1b"}) {
    for (int warmup : {1, 10}) {
      const v1::JobSpec spec = PipelineSpec(
          4, absl::StrCat(", accumulation: 1, schedule: ", schedule, ", warmup_steps: ", warmup));
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << schedule << ": " << ValidateJobSpec(spec);
    }
  }
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", accumulation: 2, warmup_steps: 11")).message(),
            "pipeline.warmup_steps: must be at most training.steps (10): a warm-up longer than "
            "the run is the flush, got 11");
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", accumulation: 2, warmup_steps: -1")).message(),
            "pipeline.warmup_steps: must be at least 0, got -1");
  for (const char* schedule : {"1f1b-flush", "gpipe"}) {
    EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, absl::StrCat(", accumulation: 2, schedule: ",
                                                           schedule, ", warmup_steps: 3")))
                  .message(),
              absl::StrCat("pipeline.warmup_steps: must be 0 with schedule ", schedule,
                           ", which drains the pipe at every step already, got 3"));
  }
}

// Every row of the drift-correction table against every schedule: the schedules
// its row names take it, the others refuse it naming pipeline.drift_correction
// and the schedules that do.
TEST(DriftCorrectionTest, EveryCorrectionIsTakenByItsSchedulesAndRefusedByTheOthers) {
  for (const ScheduleTraits& schedule : Schedules()) {
    const std::string pipeline = absl::StrCat(", accumulation: 1, schedule: ", schedule.name);
    ASSERT_TRUE(ValidateJobSpec(PipelineSpec(4, pipeline)).ok())
        << schedule.name << ": " << ValidateJobSpec(PipelineSpec(4, pipeline));
    for (const DriftCorrectionTraits& correction : DriftCorrections()) {
      SCOPED_TRACE(absl::StrCat(schedule.name, " with ", correction.name));
      const absl::Status status = ValidateJobSpec(
          PipelineSpec(4, absl::StrCat(pipeline, ", drift_correction: ", correction.name)));
      if (DriftCorrectionAllowed(correction, schedule.kind)) {
        EXPECT_TRUE(status.ok()) << status;
        continue;
      }
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(status.message(),
                absl::StrCat("pipeline.drift_correction: must be none unless schedule is ",
                             ScheduleNames(correction.schedules, " or "), ", got \"",
                             correction.name, "\""));
    }
  }
  EXPECT_EQ(ValidateJobSpec(PipelineSpec(4, ", accumulation: 2, schedule: 1f1b-flush, "
                                            "drift_correction: staleness"))
                .message(),
            "pipeline.drift_correction: must be none unless schedule is paci, got \"staleness\"");
}

// A left-out accumulation is what the schedule's row derives: paci's from the
// drift limit, async-1f1b's 1, none for the flushes (then it is required).
TEST(ApplyJobSpecDefaultsTest, ALeftOutAccumulationIsTheSchedulesRowsDefault) {
  for (const ScheduleTraits& schedule : Schedules()) {
    const v1::JobSpec spec =
        PipelineSpec(8, absl::StrCat(", max_drift: 2, schedule: ", schedule.name));
    PipelineShape shape;
    shape.num_stages = 8;
    shape.max_drift = 2;
    EXPECT_EQ(spec.pipeline().accumulation(), schedule.default_accumulation(shape))
        << schedule.name;
  }
  // A drift limit never chooses the batch: paci derives no accumulation from it.
  EXPECT_EQ(PipelineSpec(8, ", max_drift: 2").pipeline().accumulation(), 0);
  EXPECT_EQ(PipelineSpec(8, ", max_drift: 2, schedule: async-1f1b").pipeline().accumulation(), 1);
  EXPECT_EQ(PipelineSpec(8, ", max_drift: 2, schedule: gpipe").pipeline().accumulation(), 0);
}

TEST(ValidateJobSpecTest, AcceptsTheFullAndMinimalSpecs) {
  absl::StatusOr<v1::JobSpec> full = ParseJobSpecYaml(WithCorpus(kFullSpec));
  ASSERT_TRUE(full.ok()) << full.status();
  ApplyJobSpecDefaults(&*full);
  EXPECT_TRUE(ValidateJobSpec(*full).ok()) << ValidateJobSpec(*full);
  ValidMinimalSpec();
}

TEST(ValidateJobSpecTest, MessageGivesTheAllowedRangeAndTheValue) {
  v1::JobSpec spec = ValidMinimalSpec();
  spec.mutable_pipeline()->set_num_stages(0);
  EXPECT_EQ(ValidateJobSpec(spec).message(),
            "pipeline.num_stages: must be between 1 and 64, got 0");
}

TEST(ValidateJobSpecTest, DataParallelIsAtLeastOneReplicaAndGivesTheWorkerCount) {
  v1::JobSpec spec = ValidMinimalSpec();
  for (int bad : {0, -1, 257}) {
    spec.mutable_pipeline()->set_data_parallel(bad);
    EXPECT_EQ(ValidateJobSpec(spec).message(),
              absl::StrCat("pipeline.data_parallel: must be between 1 and 256, got ", bad));
  }
  spec.mutable_pipeline()->set_data_parallel(3);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  EXPECT_EQ(WorkersOf(spec.pipeline()), 3 * spec.pipeline().num_stages());
}

TEST(StageDeviceTest, ReplicasShareAStagesDeviceOrHaveTheirOwn) {
  v1::JobSpec spec = ValidMinimalSpec();  // P = 2
  EXPECT_EQ(StageDevice(spec, 1, 0), "cpu");
  spec.mutable_pipeline()->set_data_parallel(2);
  for (const char* d : {"cuda:0", "cuda:1"}) spec.mutable_runtime()->add_stage_devices(d);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  EXPECT_EQ(StageDevice(spec, 1, 0), "cuda:1");  // one per stage: every replica's stage 1
  EXPECT_EQ(StageDevice(spec, 1, 1), "cuda:1");
  for (const char* d : {"cuda:2", "cuda:3"}) spec.mutable_runtime()->add_stage_devices(d);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  EXPECT_EQ(StageDevice(spec, 0, 1), "cuda:2");  // one per stage of each replica
  EXPECT_EQ(StageDevice(spec, 1, 1), "cuda:3");
  spec.mutable_runtime()->add_stage_devices("cuda:4");
  EXPECT_EQ(ValidateJobSpec(spec).message(),
            "runtime.stage_devices: must be one device per stage (2) or per stage of each "
            "replica (4), got 5 devices");
}

TEST(ValidateJobSpecTest, PartitionIsBalancedEvenOrUnitBoundaries) {
  v1::JobSpec spec = ValidMinimalSpec();  // 4 layers: units 0 .. 9
  for (const char* ok : {"balanced", "even", "1", "5", "9"}) {
    spec.mutable_pipeline()->set_partition(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok << ": " << ValidateJobSpec(spec);
  }
  spec.mutable_pipeline()->set_num_stages(4);
  spec.mutable_pipeline()->set_partition(" 2, 5 ,8");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const char* bad : {"fast", "2,5", "2,5,8,9", "0,5,8", "2,5,10", "5,2,8", "2,2,8",
                          "2,x,8", "2,,8", "-1,5,8"}) {
    spec.mutable_pipeline()->set_partition(bad);
    ExpectInvalid(spec, "pipeline.partition");
  }
  spec.mutable_pipeline()->set_partition("2,5");
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              HasSubstr("must be balanced, even or 3 increasing unit boundaries between 1 and 9"));
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()), HasSubstr("2 boundaries for 4 stages"));
  // Quoted numbers stay strings; ParsePartitionBoundaries gives the whole cut.
  absl::StatusOr<std::vector<int>> cut = ParsePartitionBoundaries("3,7", 4, 3);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(*cut, (std::vector<int>{0, 3, 7, 10}));
}

// "/R" splits the head by vocabulary: R rows in [1, vocab_size), two stages
// or more, and a schedule that keeps the stage before the last within
// kHeadSplitMaxInFlight micro-batches (gpipe holds the accumulation there).
TEST(ValidateJobSpecTest, AHeadSplitNeedsRowsInTheVocabularyAndAScheduleThatAllowsIt) {
  v1::JobSpec spec = ValidMinimalSpec();
  const int64_t vocab = spec.model().vocab_size();
  spec.mutable_pipeline()->set_partition(absl::StrCat("5/", vocab - 1));
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_pipeline()->set_partition("5 / 3");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(*ParsePartitionHeadSplit("5 / 3", 4, 2, vocab), 3);
  EXPECT_EQ(*ParsePartitionHeadSplit("5", 4, 2, vocab), 0);
  for (const std::string& bad : {std::string("5/0"), absl::StrCat("5/", vocab), std::string("5/"),
                                 std::string("5/3/4"), std::string("5/x")}) {
    spec.mutable_pipeline()->set_partition(bad);
    ExpectInvalid(spec, "pipeline.partition");
  }
  spec.mutable_pipeline()->set_partition("5/3");
  spec.mutable_pipeline()->set_schedule("gpipe");
  spec.mutable_pipeline()->clear_drift_correction();  // the defaults were paci's
  spec.mutable_pipeline()->clear_warmup_steps();
  spec.mutable_pipeline()->clear_global_batch();
  spec.mutable_pipeline()->set_accumulation(kHeadSplitMaxInFlight);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_TRUE(HeadSplitFitsSchedule(spec.pipeline()));
  spec.mutable_pipeline()->set_accumulation(kHeadSplitMaxInFlight + 1);
  EXPECT_FALSE(HeadSplitFitsSchedule(spec.pipeline()));
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              HasSubstr("pipeline.partition: the head split \"/3\" needs the stage before the "
                        "last to hold at most 32 micro-batches in flight; schedule gpipe"));
  spec.mutable_pipeline()->set_schedule("paci");
  EXPECT_TRUE(HeadSplitFitsSchedule(spec.pipeline()));
}

TEST(ValidateJobSpecTest, MoreStagesThanLayersIsInvalid) {
  v1::JobSpec spec = ValidMinimalSpec();
  spec.mutable_pipeline()->set_num_stages(5);
  EXPECT_EQ(ValidateJobSpec(spec).message(),
            "pipeline.num_stages: 5 stages need at least 5 layers, model.num_layers is 4");
}

TEST(ValidateJobSpecTest, AcceptsValidNamesIncludingDigitsOnly) {
  for (const char* name : {"a", "123", "kjv-small-2"}) {
    v1::JobSpec spec = ValidMinimalSpec();
    spec.set_name(name);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << name << ": " << ValidateJobSpec(spec);
  }
}

TEST(ValidateJobSpecTest, RejectsBadNames) {
  for (const std::string& name :
       {std::string(), std::string("Kjv"), std::string("-a"), std::string("a-"),
        std::string("a_b"), std::string("a.b"), std::string(64, 'a')}) {
    v1::JobSpec spec = ValidMinimalSpec();
    spec.set_name(name);
    SCOPED_TRACE(name);
    ExpectInvalid(spec, "name");
  }
}

// Each case breaks one field of a valid spec; the error must name it.
// What one spec may cost the coordinator, which keeps every job in memory and
// in its store: each string at most PATH_MAX (4096) bytes, named by its path;
// a worker selector within the limits of labels; the whole spec at most
// 64 KiB serialized, which leaves room for every path at its limit and a full
// selector.
TEST(ValidateJobSpecTest, StringsSelectorsAndTheWholeSpecAreBounded) {
  using Setter = void (*)(v1::JobSpec*, const std::string&);
  const std::pair<std::string, Setter> strings[] = {
      {"checkpoint.directory",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_checkpoint()->set_directory(v); }},
      {"checkpoint.init_from",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_checkpoint()->set_init_from(v); }},
      {"data.corpus_path",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_data()->set_corpus_path(v); }},
      {"data.dataset",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_data()->set_dataset(v); }},
      {"data.tokenizer_model",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_data()->set_tokenizer_model(v); }},
      {"data.tokenizer",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_data()->set_tokenizer(v); }},
      {"pipeline.partition",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_pipeline()->set_partition(v); }},
      {"model.architecture",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_model()->set_architecture(v); }},
      {"runtime.device",
       [](v1::JobSpec* s, const std::string& v) { s->mutable_runtime()->set_device(v); }},
      {"runtime.stage_devices[1]",
       [](v1::JobSpec* s, const std::string& v) {
         s->mutable_runtime()->add_stage_devices("cpu");
         s->mutable_runtime()->add_stage_devices(v);
       }},
  };
  for (const auto& [field, set] : strings) {
    SCOPED_TRACE(field);
    v1::JobSpec spec = ValidMinimalSpec();
    set(&spec, "/" + std::string(4096, 'p'));
    ExpectInvalid(spec, field);
    EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
                HasSubstr("must be at most 4096 bytes (PATH_MAX), got 4097 bytes"));
  }
  v1::JobSpec five_thousand = ValidMinimalSpec();
  five_thousand.mutable_checkpoint()->set_directory("/" + std::string(4999, 'd'));
  EXPECT_EQ(ValidateJobSpec(five_thousand),
            absl::InvalidArgumentError(
                "checkpoint.directory: must be at most 4096 bytes (PATH_MAX), got 5000 bytes"));

  // Every path at its limit and a full selector of the longest keys and values: valid.
  v1::JobSpec largest = ValidMinimalSpec();
  const std::string path = "/" + std::string(4095, 'p');
  largest.mutable_data()->set_corpus_path(path);
  largest.mutable_data()->set_tokenizer("sentencepiece");
  largest.mutable_data()->set_tokenizer_model(path);
  largest.mutable_checkpoint()->set_directory(path);
  largest.mutable_checkpoint()->set_init_from(path);
  auto& selector = *largest.mutable_run_policy()->mutable_worker_selector();
  for (int i = 0; i < kMaxLabels; ++i) {
    selector[std::string(250, 'k') + std::to_string(100 + i)] = std::string(253, 'v');
  }
  EXPECT_TRUE(ValidateJobSpec(largest).ok()) << ValidateJobSpec(largest);
  EXPECT_LE(largest.ByteSizeLong(), kMaxJobSpecBytes);

  // One more selector entry, a longer key or value: refused naming the selector.
  v1::JobSpec many = largest;
  (*many.mutable_run_policy()->mutable_worker_selector())["one-more"] = "x";
  EXPECT_EQ(ValidateJobSpec(many), absl::InvalidArgumentError(
                                       "run_policy.worker_selector: must be at most 64 labels, "
                                       "got 65"));
  v1::JobSpec long_key = ValidMinimalSpec();
  (*long_key.mutable_run_policy()->mutable_worker_selector())[std::string(254, 'k')] = "x";
  ExpectInvalid(long_key, "run_policy.worker_selector");
  v1::JobSpec long_value = ValidMinimalSpec();
  (*long_value.mutable_run_policy()->mutable_worker_selector())["pool"] = std::string(254, 'v');
  EXPECT_EQ(ValidateJobSpec(long_value),
            absl::InvalidArgumentError(
                "run_policy.worker_selector[pool]: must be at most 253 characters, got 254"));

  // Past 64 KiB serialized (here padded with a field this version does not know): refused.
  v1::JobSpec padded = ValidMinimalSpec();
  padded.GetReflection()->MutableUnknownFields(&padded)->AddLengthDelimited(
      999, std::string(kMaxJobSpecBytes, 'x'));
  const absl::Status big = ValidateJobSpec(padded);
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.message()),
              StartsWith(absl::StrCat("spec: must be at most 65536 bytes serialized, got ",
                                      padded.ByteSizeLong(), " bytes")));
}

// A submission's labels (and a list's label selector): Kubernetes' limits.
TEST(ValidateJobLabelsTest, AtMost64KeysOf253AndValuesOf63) {
  google::protobuf::Map<std::string, std::string> labels;
  labels[std::string(253, 'k')] = std::string(63, 'v');
  labels["paci.dev/namespace"] = "team-a";
  EXPECT_TRUE(ValidateJobLabels(labels, "labels").ok());
  labels["team"] = std::string(64, 'v');
  EXPECT_EQ(ValidateJobLabels(labels, "labels"),
            absl::InvalidArgumentError("labels[team]: must be at most 63 characters, got 64"));
  labels.erase("team");
  labels[std::string(254, 'k')] = "v";
  EXPECT_EQ(ValidateJobLabels(labels, "label_selector"),
            absl::InvalidArgumentError(
                "label_selector: keys must be 1 to 253 characters, got one of 254"));
  labels.clear();
  labels[""] = "v";
  EXPECT_EQ(ValidateJobLabels(labels, "labels").code(), absl::StatusCode::kInvalidArgument);
  labels.clear();
  for (int i = 0; i < 65; ++i) labels[absl::StrCat("k", i)] = "v";
  EXPECT_EQ(ValidateJobLabels(labels, "labels"),
            absl::InvalidArgumentError("labels: must be at most 64 labels, got 65"));
}

TEST(ValidateJobSpecTest, EachOutOfRangeFieldIsNamed) {
  struct Case {
    std::string field;
    void (*mutate)(v1::JobSpec*);
  };
  const Case cases[] = {
      {"model.vocab_size", [](v1::JobSpec* s) { s->mutable_model()->set_vocab_size(1); }},
      {"model.num_layers", [](v1::JobSpec* s) { s->mutable_model()->set_num_layers(257); }},
      {"model.d_model", [](v1::JobSpec* s) { s->mutable_model()->set_d_model(4); }},
      {"model.num_heads", [](v1::JobSpec* s) { s->mutable_model()->set_num_heads(0); }},
      {"model.num_heads", [](v1::JobSpec* s) { s->mutable_model()->set_num_heads(3); }},
      {"model.seq_len", [](v1::JobSpec* s) { s->mutable_model()->set_seq_len(1); }},
      {"model.dropout", [](v1::JobSpec* s) { s->mutable_model()->set_dropout(1); }},
      {"pipeline.num_stages", [](v1::JobSpec* s) { s->mutable_pipeline()->set_num_stages(65); }},
      {"pipeline.schedule",
       [](v1::JobSpec* s) { s->mutable_pipeline()->set_schedule("pipedream"); }},
      {"pipeline.accumulation",
       [](v1::JobSpec* s) { s->mutable_pipeline()->set_accumulation(0); }},
      {"pipeline.accumulation",
       [](v1::JobSpec* s) { s->mutable_pipeline()->set_accumulation(4097); }},
      {"pipeline.accumulation",
       [](v1::JobSpec* s) { s->mutable_pipeline()->set_schedule("async-1f1b"); }},
      {"pipeline.micro_batch_size",
       [](v1::JobSpec* s) { s->mutable_pipeline()->set_micro_batch_size(0); }},
      {"optimizer.lr", [](v1::JobSpec* s) { s->mutable_optimizer()->set_lr(0); }},
      {"optimizer.lr", [](v1::JobSpec* s) { s->mutable_optimizer()->set_lr(11); }},
      {"optimizer.beta1", [](v1::JobSpec* s) { s->mutable_optimizer()->set_beta1(1); }},
      {"optimizer.beta2", [](v1::JobSpec* s) { s->mutable_optimizer()->set_beta2(-0.1f); }},
      {"optimizer.eps", [](v1::JobSpec* s) { s->mutable_optimizer()->set_eps(0); }},
      {"optimizer.weight_decay",
       [](v1::JobSpec* s) { s->mutable_optimizer()->set_weight_decay(-1); }},
      {"optimizer.warmup_fraction",
       [](v1::JobSpec* s) { s->mutable_optimizer()->set_warmup_fraction(1.5f); }},
      {"optimizer.min_lr_ratio",
       [](v1::JobSpec* s) { s->mutable_optimizer()->set_min_lr_ratio(-0.5f); }},
      {"training.steps", [](v1::JobSpec* s) { s->mutable_training()->set_steps(0); }},
      {"training.steps",
       [](v1::JobSpec* s) { s->mutable_training()->set_steps(1000000001); }},
      {"training.eval_interval",
       [](v1::JobSpec* s) { s->mutable_training()->set_eval_interval(0); }},
      {"training.eval_micro_batches",
       [](v1::JobSpec* s) { s->mutable_training()->set_eval_micro_batches(10001); }},
      {"training.max_nonfinite_steps",
       [](v1::JobSpec* s) { s->mutable_training()->set_max_nonfinite_steps(0); }},
      {"optimizer.clip_norm", [](v1::JobSpec* s) { s->mutable_optimizer()->set_clip_norm(-1); }},
      {"optimizer.clip_norm",
       [](v1::JobSpec* s) {
         s->mutable_optimizer()->set_clip_norm(std::numeric_limits<float>::infinity());
       }},
      {"data.corpus_path", [](v1::JobSpec* s) { s->mutable_data()->clear_corpus_path(); }},
      {"data.corpus_path", [](v1::JobSpec* s) { s->mutable_data()->set_dataset("/d"); }},
      {"data.tokenizer", [](v1::JobSpec* s) { s->mutable_data()->set_tokenizer("bpe"); }},
      {"data.tokenizer_model",
       [](v1::JobSpec* s) { s->mutable_data()->set_tokenizer("sentencepiece"); }},
      {"data.tokenizer_model",
       [](v1::JobSpec* s) { s->mutable_data()->set_tokenizer_model("m.model"); }},
      {"data.tokenizer_model",
       [](v1::JobSpec* s) {
         UseDataset(s);
         s->mutable_data()->set_tokenizer("sentencepiece");
         s->mutable_data()->set_tokenizer_model("m.model");
       }},
      {"data.validation_shards",
       [](v1::JobSpec* s) { s->mutable_data()->set_validation_shards(1); }},
      {"data.validation_shards",
       [](v1::JobSpec* s) {
         UseDataset(s);
         s->mutable_data()->set_validation_shards(-1);
       }},
      {"data.validation_fraction",
       [](v1::JobSpec* s) { s->mutable_data()->set_validation_fraction(0); }},
      {"data.validation_fraction",
       [](v1::JobSpec* s) { s->mutable_data()->set_validation_fraction(0.6f); }},
      {"checkpoint.interval",
       [](v1::JobSpec* s) { s->mutable_checkpoint()->set_interval(-1); }},
      {"checkpoint.directory",
       [](v1::JobSpec* s) { s->mutable_checkpoint()->set_resume(true); }},
      {"runtime.threads_per_stage",
       [](v1::JobSpec* s) { s->mutable_runtime()->set_threads_per_stage(0); }},
      {"runtime.device", [](v1::JobSpec* s) { s->mutable_runtime()->set_device("gpu0"); }},
      {"runtime.stage_devices",
       [](v1::JobSpec* s) {
         for (int i = 0; i < 65; ++i) s->mutable_runtime()->add_stage_devices("cpu");
       }},
      {"runtime.precision", [](v1::JobSpec* s) { s->mutable_runtime()->set_precision("fp8"); }},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = ValidMinimalSpec();
    c.mutate(&spec);
    SCOPED_TRACE(c.field);
    ExpectInvalid(spec, c.field);
  }
}

TEST(ValidateJobSpecTest, NanIsRejectedForEveryFloatRange) {
  const float nan = std::nanf("");
  const std::pair<std::string, void (*)(v1::JobSpec*, float)> cases[] = {
      {"model.dropout", [](v1::JobSpec* s, float v) { s->mutable_model()->set_dropout(v); }},
      {"optimizer.lr", [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_lr(v); }},
      {"optimizer.beta1", [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_beta1(v); }},
      {"optimizer.beta2", [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_beta2(v); }},
      {"optimizer.eps", [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_eps(v); }},
      {"optimizer.weight_decay",
       [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_weight_decay(v); }},
      {"optimizer.warmup_fraction",
       [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_warmup_fraction(v); }},
      {"optimizer.min_lr_ratio",
       [](v1::JobSpec* s, float v) { s->mutable_optimizer()->set_min_lr_ratio(v); }},
      {"data.validation_fraction",
       [](v1::JobSpec* s, float v) { s->mutable_data()->set_validation_fraction(v); }},
  };
  for (const auto& [field, set] : cases) {
    v1::JobSpec spec = ValidMinimalSpec();
    set(&spec, nan);
    SCOPED_TRACE(field);
    ExpectInvalid(spec, field);
  }
}

TEST(ValidateJobSpecTest, NanLrWrittenInYamlIsRejected) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml(absl::StrReplaceAll(WithCorpus(kMinimalSpec), {{"3e-3", "NaN"}}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  ExpectInvalid(*spec, "optimizer.lr");
}

TEST(ValidateJobSpecTest, DataComesFromACorpusOrADatasetWithTheirTokenizers) {
  v1::JobSpec spec = ValidMinimalSpec();
  spec.mutable_data()->set_tokenizer("sentencepiece");
  spec.mutable_data()->set_tokenizer_model("kjv.model");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const std::string tokenizer : {"", "char", "sentencepiece"}) {
    UseDataset(&spec);
    spec.mutable_data()->set_tokenizer(tokenizer);
    spec.mutable_data()->set_validation_shards(2);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
  const absl::Status both = [] {
    v1::JobSpec spec = ValidMinimalSpec();
    spec.mutable_data()->set_dataset("/data/kjv");
    return ValidateJobSpec(spec);
  }();
  EXPECT_THAT(std::string(both.message()), HasSubstr("data.dataset"));
  EXPECT_THAT(std::string(both.message()), HasSubstr("got both"));
}

TEST(ValidateJobSpecTest, ReportsTheFirstProblemOnly) {
  v1::JobSpec spec = ValidMinimalSpec();
  spec.mutable_model()->set_vocab_size(0);
  spec.mutable_runtime()->set_threads_per_stage(0);
  ExpectInvalid(spec, "model.vocab_size");
}

TEST(LoadAndValidateJobSpecTest, LoadsAValidSpecAndKeepsAbsolutePaths) {
  const absl::StatusOr<v1::JobSpec> spec =
      LoadAndValidateJobSpec(WriteTempFile("full.yaml", WithCorpus(kFullSpec)));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().corpus_path(),
            std::filesystem::path(kGenesis).lexically_normal().string());
  EXPECT_EQ(spec->checkpoint().directory(), "/tmp/ckpt");
}

TEST(LoadAndValidateJobSpecTest, MakesRelativePathsAbsoluteAgainstTheCurrentDirectory) {
  const std::string corpus = WriteTempFile("corpus.txt", "In the beginning");
  const std::string relative =
      std::filesystem::relative(corpus, std::filesystem::current_path()).string();
  ASSERT_FALSE(std::filesystem::path(relative).is_absolute());
  const absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(WriteTempFile(
      "relative.yaml", WithCorpus(kMinimalSpec, relative) + "checkpoint: {directory: ckpt}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(std::filesystem::path(spec->data().corpus_path()).is_absolute());
  EXPECT_TRUE(std::filesystem::equivalent(spec->data().corpus_path(), corpus));
  EXPECT_EQ(spec->checkpoint().directory(),
            (std::filesystem::current_path() / "ckpt").lexically_normal().string());
}

TEST(LoadAndValidateJobSpecTest, AppliesDefaults) {
  const absl::StatusOr<v1::JobSpec> spec =
      LoadAndValidateJobSpec(WriteTempFile("minimal.yaml", WithCorpus(kMinimalSpec)));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->pipeline().schedule(), "paci");
  EXPECT_EQ(spec->training().eval_interval(), 30);
}

TEST(LoadAndValidateJobSpecTest, MissingCorpusIsNotFoundNamingDataCorpusPath) {
  const std::string corpus = testing::TempDir() + "/no-such-corpus.txt";
  const absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(
      WriteTempFile("no-corpus.yaml", WithCorpus(kMinimalSpec, corpus)));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("data.corpus_path: cannot read "));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("no-such-corpus.txt"));
}

TEST(LoadAndValidateJobSpecTest, CorpusThatIsADirectoryIsNotFound) {
  const absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(
      WriteTempFile("dir-corpus.yaml", WithCorpus(kMinimalSpec, testing::TempDir())));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("data.corpus_path: "));
}

TEST(LoadAndValidateJobSpecTest, MakesDatasetAndTokenizerModelPathsAbsoluteAndChecksThem) {
  const std::string dataset = testing::TempDir() + "/job-spec-dataset";
  std::filesystem::create_directories(dataset);
  WriteTempFile("job-spec-dataset/tokenizer", "paci-tokenizer char\nab");
  const std::string relative =
      std::filesystem::relative(dataset, std::filesystem::current_path()).string();
  const std::string yaml = absl::StrReplaceAll(
      kMinimalSpec, {{"corpus_path: CORPUS", "dataset: " + relative + ", validation_shards: 1"}});
  absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(WriteTempFile("dataset.yaml", yaml));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(std::filesystem::path(spec->data().dataset()).is_absolute());
  EXPECT_TRUE(std::filesystem::equivalent(spec->data().dataset(), dataset));
  EXPECT_EQ(spec->data().tokenizer(), "");  // the dataset's own
  EXPECT_EQ(spec->data().corpus_path(), "");

  spec = LoadAndValidateJobSpec(WriteTempFile(
      "no-dataset.yaml", absl::StrReplaceAll(yaml, {{relative, testing::TempDir()}})));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("data.dataset: cannot read "));

  spec = LoadAndValidateJobSpec(WriteTempFile(
      "no-model.yaml",
      absl::StrReplaceAll(kMinimalSpec, {{"CORPUS}", kGenesis + ", tokenizer: sentencepiece, "
                                                               "tokenizer_model: none.model}"}})));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("data.tokenizer_model: cannot read " +
                         (std::filesystem::current_path() / "none.model").string()));
}

TEST(LoadAndValidateJobSpecTest, ExampleSpecValidates) {
  absl::StatusOr<v1::JobSpec> spec =
      LoadJobSpecFile(PACI_SOURCE_DIR "/examples/kjv-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->name(), "kjv-small");
  EXPECT_EQ(spec->pipeline().num_stages(), 2);
  // The demo checkpoints, for pacictl sample, and resumes when run again.
  EXPECT_EQ(spec->checkpoint().directory(), "runs/kjv-small");
  EXPECT_TRUE(spec->checkpoint().resume());
}

// The examples that train from token shards validate too (the dataset is made by
// pacictl prepare-data; tests/integration/data_test.py trains from it).
TEST(LoadAndValidateJobSpecTest, ShardExampleSpecValidates) {
  absl::StatusOr<v1::JobSpec> spec =
      LoadJobSpecFile(PACI_SOURCE_DIR "/examples/kjv-bpe-shards.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->data().dataset(), "data/kjv-bpe");
  EXPECT_EQ(spec->data().validation_shards(), 1);
}

// The Llama example validates and keeps its architecture's fields.
TEST(LoadAndValidateJobSpecTest, LlamaExampleSpecValidates) {
  absl::StatusOr<v1::JobSpec> spec =
      LoadJobSpecFile(PACI_SOURCE_DIR "/examples/llama-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->model().architecture(), "llama");
  EXPECT_EQ(spec->model().num_kv_heads(), 2);
  EXPECT_EQ(spec->model().ffn_hidden_size(), DefaultFfnHiddenSize("llama", 128));
}

// The defaults run before validation, so a width far out of range reaches the
// feed-forward default as written: it must come out refused under
// model.d_model, not as an overflowed size (the fuzzer's finding).
TEST(ApplyJobSpecDefaultsTest, WidthOutOfRangeIsRefusedUnderItsOwnName) {
  for (const char* architecture : {"gpt2", "llama"}) {
    for (const int d_model : {std::numeric_limits<int>::max(), std::numeric_limits<int>::min()}) {
      SCOPED_TRACE(absl::StrCat(architecture, " d_model ", d_model));
      v1::JobSpec spec = ValidMinimalSpec();
      spec.mutable_model()->set_architecture(architecture);
      spec.mutable_model()->set_d_model(d_model);
      spec.mutable_model()->clear_ffn_hidden_size();
      ApplyJobSpecDefaults(&spec);
      EXPECT_EQ(spec.model().ffn_hidden_size(), d_model > 0 ? std::numeric_limits<int>::max()
                                                            : std::numeric_limits<int>::min());
      ExpectInvalid(spec, "model.d_model");
    }
  }
}

TEST(LoadAndValidateJobSpecTest, EachBadSpecFileNamesTheBrokenField) {
  const std::pair<const char*, const char*> cases[] = {
      {"zero-stages.yaml", "pipeline.num_stages: "},
      {"too-many-stages.yaml", "pipeline.num_stages: "},
      {"unknown-field.yaml", "learning_rate"},
      {"heads-not-dividing-width.yaml", "model.num_heads: "},
  };
  for (const auto& [file, field] : cases) {
    const absl::StatusOr<v1::JobSpec> spec =
        LoadAndValidateJobSpec(absl::StrCat(PACI_SOURCE_DIR "/tests/data/bad-specs/", file));
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
        << file << ": " << spec.status();
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(field)) << file;
  }
}

}  // namespace
}  // namespace paci
