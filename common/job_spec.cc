#include "common/job_spec.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/elastic_shape.h"
#include "common/read_file.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "common/yaml_json.h"
#include "google/protobuf/util/json_util.h"

namespace paci {
namespace {

// `path` made absolute against the current directory, so that the spec can be
// handed to workers that run elsewhere.
std::string MakeAbsolute(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

// Whether `path` is a regular file this process can open for reading.
absl::Status CheckReadableFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec) return absl::NotFoundError(ec.message());
  if (!std::filesystem::is_regular_file(status)) {
    return absl::NotFoundError("not a regular file");
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return absl::NotFoundError(std::strerror(errno));
  std::fclose(file);
  return absl::OkStatus();
}

// Makes the data paths absolute and checks that they can be read: NotFound
// "<field>: cannot read <path>: <reason>". A dataset is a folder that holds a
// `tokenizer` file.
absl::Status ResolveDataPaths(v1::DataSpec* data) {
  const auto readable = [](const char* field, const std::string& path) -> absl::Status {
    absl::Status status = CheckReadableFile(path);
    if (status.ok()) return status;
    return absl::NotFoundError(absl::StrCat(field, ": cannot read ", path, ": ", status.message()));
  };
  if (!data->corpus_path().empty()) {
    data->set_corpus_path(MakeAbsolute(data->corpus_path()));
    RETURN_IF_ERROR(readable("data.corpus_path", data->corpus_path()));
  }
  if (!data->dataset().empty()) {
    data->set_dataset(MakeAbsolute(data->dataset()));
    RETURN_IF_ERROR(readable("data.dataset", data->dataset() + "/tokenizer"));
  }
  if (!data->tokenizer_model().empty()) {
    data->set_tokenizer_model(MakeAbsolute(data->tokenizer_model()));
    RETURN_IF_ERROR(readable("data.tokenizer_model", data->tokenizer_model()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(std::string_view text) {
  ASSIGN_OR_RETURN(const std::string json, YamlMappingToJson(text, "spec"));
  v1::JobSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", std::string(status.message())));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("spec file: ", text.status().message()));
  }
  return ParseJobSpecYaml(*text);
}

namespace {

absl::Status RefusePartition(absl::string_view text, int units, int num_stages,
                             absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline.partition: must be balanced, even or ", num_stages - 1,
      " increasing unit boundaries between 1 and ", units - 1,
      " separated by commas (units: 0 the embedding, 2b+1 and 2b+2 the halves of block b, ",
      units - 1, " the head), optionally followed by \"/R\", the rows of the head's vocabulary "
      "the stage before the last computes, got \"", text, "\": ", why));
}

}  // namespace

absl::StatusOr<std::vector<int>> ParsePartitionBoundaries(std::string_view text_in,
                                                          int num_layers, int num_stages) {
  const absl::string_view whole(text_in.data(), text_in.size());
  const absl::string_view text = whole.substr(0, whole.find('/'));
  const int units = 2 * num_layers + 2;
  const auto refuse = [&](absl::string_view why) {
    return RefusePartition(whole, units, num_stages, why);
  };
  std::vector<int> bounds = {0};
  if (!absl::StripAsciiWhitespace(text).empty()) {
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      int b = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &b)) {
        return refuse(absl::StrCat("\"", part, "\" is not a whole number"));
      }
      if (b <= bounds.back() || b >= units) {
        return refuse(absl::StrCat(b, " is out of order or out of range"));
      }
      bounds.push_back(b);
    }
  }
  if (static_cast<int>(bounds.size()) != num_stages) {
    return refuse(absl::StrCat(bounds.size() - 1, " boundaries for ", num_stages, " stages"));
  }
  bounds.push_back(units);
  return bounds;
}

absl::StatusOr<int64_t> ParsePartitionHeadSplit(std::string_view text_in, int num_layers,
                                                int num_stages, int64_t vocab_size) {
  const absl::string_view whole(text_in.data(), text_in.size());
  const size_t slash = whole.find('/');
  if (slash == absl::string_view::npos) return 0;
  const absl::string_view rows_text = absl::StripAsciiWhitespace(whole.substr(slash + 1));
  const int units = 2 * num_layers + 2;
  int64_t rows = 0;
  if (!absl::SimpleAtoi(rows_text, &rows)) {
    return RefusePartition(whole, units, num_stages,
                           absl::StrCat("\"", rows_text, "\" is not a whole number of rows"));
  }
  if (num_stages < 2) {
    return RefusePartition(whole, units, num_stages,
                           "one stage holds the whole head; a split needs two stages or more");
  }
  if (rows < 1 || rows >= vocab_size) {
    return RefusePartition(whole, units, num_stages,
                           absl::StrCat(rows, " rows of the head: must be between 1 and ",
                                        vocab_size - 1, " (model.vocab_size - 1)"));
  }
  return rows;
}

PipelineShape PipelineShapeOf(const v1::PipelineSpec& pipeline) {
  PipelineShape shape;
  shape.num_stages = pipeline.num_stages();
  shape.accumulation = pipeline.accumulation();
  if (pipeline.has_max_drift()) shape.max_drift = pipeline.max_drift();
  return shape;
}

// The accumulation the schedule derives when it is left out: its row's
// default_accumulation (paci: the one a drift limit, pipeline.max_drift in
// job.proto, asks for; async-1f1b: 1). A schedule that does not parse is left
// for the validator to name.
void ApplyAccumulationDefault(v1::PipelineSpec* pipeline) {
  if (pipeline->accumulation() != 0) return;
  // From the global batch, when it splits evenly (else the validator names it).
  const int64_t per_accumulation =
      int64_t{pipeline->micro_batch_size()} * pipeline->data_parallel();
  if (pipeline->has_global_batch() && per_accumulation > 0 &&
      pipeline->global_batch() % per_accumulation == 0 &&
      pipeline->global_batch() / per_accumulation > 0) {
    pipeline->set_accumulation(static_cast<int32_t>(pipeline->global_batch() / per_accumulation));
    return;
  }
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline->schedule());
  if (!kind.ok()) return;
  const int accumulation =
      ScheduleTraitsOf(*kind).default_accumulation(PipelineShapeOf(*pipeline));
  if (accumulation != 0) pipeline->set_accumulation(accumulation);
}

// The automatic default of the drift correction and the warm-up: the
// schedule's row says it (a schedule that does not parse corrects nothing).
void ApplyMethodDefaults(const v1::TrainingSpec& training, v1::PipelineSpec* pipeline) {
  const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline->schedule());
  if (pipeline->drift_correction().empty()) {
    pipeline->set_drift_correction(
        kind.ok() ? ScheduleTraitsOf(*kind).default_correction(pipeline->num_stages()) : "none");
  }
  if (!pipeline->has_warmup_steps()) {
    if (!kind.ok()) {
      pipeline->set_warmup_steps(0);
    } else {
      const ScheduleTraits& row = ScheduleTraitsOf(*kind);
      pipeline->set_warmup_steps(row.default_warmup_steps(
          pipeline->num_stages(), row.effective_accumulation(pipeline->accumulation()),
          training.steps()));
    }
  }
}

// Computed in 64 bits: the defaults run before validation, so d_model may be
// anything a user wrote; a width out of range yields a size the validator
// refuses under model.d_model, never an overflow.
int DefaultFfnHiddenSize(std::string_view architecture, int d_model) {
  int64_t hidden = int64_t{4} * d_model;
  if (architecture == "llama") hidden = ((int64_t{8} * d_model + 2) / 3 + 7) / 8 * 8;
  return static_cast<int>(std::clamp<int64_t>(hidden, std::numeric_limits<int>::min(),
                                              std::numeric_limits<int>::max()));
}

void ApplyJobSpecDefaults(v1::JobSpec* spec) {
  v1::ModelSpec* model = spec->mutable_model();
  if (!model->has_dropout()) model->set_dropout(0);
  if (!model->has_init_seed()) model->set_init_seed(1234);
  if (model->architecture().empty()) model->set_architecture("gpt2");
  if (!model->has_num_kv_heads()) model->set_num_kv_heads(model->num_heads());
  if (!model->has_ffn_hidden_size()) {
    model->set_ffn_hidden_size(DefaultFfnHiddenSize(model->architecture(), model->d_model()));
  }
  if (!model->has_rope_theta()) model->set_rope_theta(10000);
  if (!model->has_norm_eps()) model->set_norm_eps(1e-5);

  v1::PipelineSpec* pipeline = spec->mutable_pipeline();
  if (pipeline->schedule().empty()) pipeline->set_schedule("paci");
  if (pipeline->partition().empty()) pipeline->set_partition("balanced");
  if (!pipeline->has_data_parallel()) pipeline->set_data_parallel(1);
  ApplyAccumulationDefault(pipeline);
  ApplyMethodDefaults(*spec->mutable_training(), pipeline);  // from the accumulation
  ApplyElasticDefaults(pipeline);

  v1::OptimizerSpec* optimizer = spec->mutable_optimizer();
  if (!optimizer->has_beta1()) optimizer->set_beta1(0.9f);
  if (!optimizer->has_beta2()) optimizer->set_beta2(0.95f);
  if (!optimizer->has_eps()) optimizer->set_eps(1e-8f);
  if (!optimizer->has_weight_decay()) optimizer->set_weight_decay(0.1f);
  if (!optimizer->has_warmup_fraction()) optimizer->set_warmup_fraction(0.01f);
  if (!optimizer->has_min_lr_ratio()) optimizer->set_min_lr_ratio(0.1f);

  v1::TrainingSpec* training = spec->mutable_training();
  if (!training->has_eval_interval()) {
    training->set_eval_interval(static_cast<int32_t>(std::clamp<int64_t>(
        training->steps() / 10, 1, std::numeric_limits<int32_t>::max())));
  }
  if (!training->has_eval_micro_batches()) training->set_eval_micro_batches(4);
  if (!training->has_max_nonfinite_steps()) training->set_max_nonfinite_steps(10);

  v1::DataSpec* data = spec->mutable_data();
  if (!data->has_validation_fraction()) data->set_validation_fraction(0.05f);
  if (!data->has_seed()) data->set_seed(1);
  if (!data->corpus_path().empty() && data->tokenizer().empty()) data->set_tokenizer("char");

  v1::RuntimeSpec* runtime = spec->mutable_runtime();
  if (!runtime->has_threads_per_stage()) runtime->set_threads_per_stage(1);
  if (runtime->device().empty()) runtime->set_device("cpu");
  // runtime.precision stays empty when not given: "auto" (worker/model/precision.h),
  // left unwritten so that a worker from before "auto" reads it as its own fp32 default.

  if (spec->has_checkpoint() && !spec->checkpoint().has_keep()) {
    spec->mutable_checkpoint()->set_keep(3);
  }

  v1::RunPolicy* policy = spec->mutable_run_policy();
  if (!policy->has_backoff_limit()) policy->set_backoff_limit(3);
}

std::string StageDevice(const v1::JobSpec& spec, int stage, int replica) {
  const v1::RuntimeSpec& runtime = spec.runtime();
  const int P = spec.pipeline().num_stages();
  // One entry per stage of each replica, or one per stage that every replica shares.
  const int index = runtime.stage_devices_size() > P ? replica * P + stage : stage;
  if (stage >= 0 && index >= 0 && index < runtime.stage_devices_size()) {
    return runtime.stage_devices(index);
  }
  return runtime.device().empty() ? "cpu" : runtime.device();
}

absl::StatusOr<v1::JobSpec> LoadAndValidateJobSpec(const std::string& path) {
  return LoadAndValidateJobSpec(path, nullptr);
}

absl::StatusOr<v1::JobSpec> LoadAndValidateJobSpec(
    const std::string& path, const std::function<void(v1::JobSpec*)>& edit) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile(path));
  if (edit) edit(&spec);
  ApplyJobSpecDefaults(&spec);
  RETURN_IF_ERROR(ValidateJobSpec(spec));

  if (!spec.checkpoint().directory().empty()) {
    spec.mutable_checkpoint()->set_directory(MakeAbsolute(spec.checkpoint().directory()));
  }
  if (!spec.checkpoint().init_from().empty()) {
    spec.mutable_checkpoint()->set_init_from(MakeAbsolute(spec.checkpoint().init_from()));
  }

  RETURN_IF_ERROR(ResolveDataPaths(spec.mutable_data()));
  return spec;
}

int WorkersOf(const v1::PipelineSpec& pipeline) {
  return pipeline.num_stages() * std::max(1, pipeline.data_parallel());
}

int64_t LargestLinkMessageBytes(const v1::JobSpec& spec) {
  return int64_t{spec.pipeline().micro_batch_size()} * spec.model().seq_len() *
             spec.model().d_model() * 4 +
         64 * 1024;
}

std::string StageName(const v1::PipelineSpec& pipeline, int stage, int replica) {
  if (pipeline.data_parallel() <= 1) return absl::StrCat("stage ", stage);
  return absl::StrCat("stage ", stage, " replica ", replica);
}

int64_t GlobalBatch(const v1::PipelineSpec& pipeline) {
  if (pipeline.has_global_batch()) return pipeline.global_batch();
  return int64_t{pipeline.accumulation()} * pipeline.micro_batch_size() *
         std::max(1, pipeline.data_parallel());
}

int64_t DriftLimit(const v1::PipelineSpec& pipeline) {
  if (pipeline.has_max_drift()) return pipeline.max_drift();
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline.schedule());
  if (!kind.ok()) return 0;
  return DriftBound(*kind, pipeline.num_stages(), 0, pipeline.accumulation());
}

}  // namespace paci
