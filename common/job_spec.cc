#include "common/job_spec.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "common/yaml_json.h"
#include "google/protobuf/util/json_util.h"

namespace paci {
namespace {

// "<field>: must be <rule>, got <value>" unless `ok`. NaN fails every
// comparison, so a NaN never passes a range rule.
template <typename T>
absl::Status Require(bool ok, absl::string_view field, absl::string_view rule, const T& value) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": must be ", rule, ", got ", value));
}

template <typename T>
absl::Status RequireBetween(absl::string_view field, T value, T lo, T hi) {
  return Require(value >= lo && value <= hi, field, absl::StrCat("between ", lo, " and ", hi),
                 value);
}

// "cpu", "cuda" or "cuda:N".
bool IsValidDevice(const std::string& device) {
  if (device == "cpu" || device == "cuda") return true;
  int index = -1;
  return absl::StartsWith(device, "cuda:") && absl::SimpleAtoi(device.substr(5), &index) &&
         index >= 0 && index < 1024;
}

bool IsValidName(std::string_view name) {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (name.empty() || !alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-'; });
}

absl::Status ValidateModel(const v1::ModelSpec& m) {
  RETURN_IF_ERROR(RequireBetween("model.vocab_size", m.vocab_size(), 2, 1000000));
  RETURN_IF_ERROR(RequireBetween("model.num_layers", m.num_layers(), 1, 256));
  RETURN_IF_ERROR(RequireBetween("model.d_model", m.d_model(), 8, 65536));
  RETURN_IF_ERROR(Require(m.num_heads() >= 1, "model.num_heads", "at least 1", m.num_heads()));
  RETURN_IF_ERROR(Require(m.d_model() % m.num_heads() == 0, "model.num_heads",
                          absl::StrCat("a divisor of model.d_model (", m.d_model(), ")"),
                          m.num_heads()));
  RETURN_IF_ERROR(RequireBetween("model.seq_len", m.seq_len(), 2, 65536));
  RETURN_IF_ERROR(Require(m.dropout() >= 0 && m.dropout() < 1, "model.dropout", "in [0, 1)",
                          m.dropout()));
  const bool llama = m.architecture() == "llama";
  if (!llama && m.architecture() != "gpt2" && !m.architecture().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.architecture: must be \"gpt2\" or \"llama\", got \"", m.architecture(), "\""));
  }
  if (m.has_num_kv_heads()) {
    RETURN_IF_ERROR(Require(m.num_kv_heads() >= 1 && m.num_heads() % m.num_kv_heads() == 0,
                            "model.num_kv_heads",
                            absl::StrCat("a divisor of model.num_heads (", m.num_heads(), ")"),
                            m.num_kv_heads()));
    RETURN_IF_ERROR(Require(llama || m.num_kv_heads() == m.num_heads(), "model.num_kv_heads",
                            "model.num_heads for gpt2 (grouped-query attention is llama's)",
                            m.num_kv_heads()));
  }
  if (m.has_ffn_hidden_size()) {
    RETURN_IF_ERROR(RequireBetween("model.ffn_hidden_size", m.ffn_hidden_size(), 1, 1048576));
  }
  if (llama) {
    RETURN_IF_ERROR(Require((m.d_model() / m.num_heads()) % 2 == 0, "model.num_heads",
                            "one that leaves an even head size (d_model / num_heads) for "
                            "rotary positions",
                            m.num_heads()));
  }
  if (m.has_rope_theta()) {
    RETURN_IF_ERROR(Require(m.rope_theta() > 1 && m.rope_theta() <= 1e9, "model.rope_theta",
                            "in (1, 1e9]", m.rope_theta()));
  }
  if (m.has_norm_eps()) {
    RETURN_IF_ERROR(Require(m.norm_eps() > 0 && m.norm_eps() <= 0.1, "model.norm_eps",
                            "in (0, 0.1]", m.norm_eps()));
  }
  return absl::OkStatus();
}

// pipeline.max_drift against the schedule and the accumulation.
absl::Status ValidateDriftLimit(const v1::PipelineSpec& p, ScheduleKind kind) {
  if (!p.has_max_drift()) return absl::OkStatus();
  const int D = p.max_drift();
  RETURN_IF_ERROR(RequireBetween("pipeline.max_drift", D, 0, 4096));
  const int needed = AccumulationForDriftLimit(p.num_stages(), D);
  if (kind == ScheduleKind::kPaci && needed == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.max_drift: 0 with schedule paci needs a single stage (a drift of 0 is the "
        "flush: use schedule 1f1b-flush), got ", p.num_stages(), " stages"));
  }
  const int64_t drift = DriftBound(kind, p.num_stages(), 0, p.accumulation());
  if (drift <= D) return absl::OkStatus();
  if (kind == ScheduleKind::kAsyncOneFOneB) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.max_drift: async-1f1b lets a micro-batch cross P-1 = ", drift,
        " optimizer steps at stage 0, more than max_drift ", D, "; use schedule paci"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline.max_drift: accumulation ", p.accumulation(), " lets a micro-batch cross ceil(",
      p.num_stages() - 1, "/", p.accumulation(), ") = ", drift,
      " optimizer steps at stage 0, more than max_drift ", D,
      "; use accumulation of at least ", needed, ", or leave it out to have it derived"));
}

absl::Status ValidatePipeline(const v1::PipelineSpec& p, int num_layers) {
  RETURN_IF_ERROR(RequireBetween("pipeline.num_stages", p.num_stages(), 1, 64));
  if (p.num_stages() > num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.num_stages: ", p.num_stages(), " stages need at least ",
                     p.num_stages(), " layers, model.num_layers is ", num_layers));
  }
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(p.schedule());
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.schedule: ", kind.status().message()));
  }
  if (p.accumulation() == 0 && !p.has_max_drift()) {
    return absl::InvalidArgumentError(
        "pipeline.accumulation: required (or pipeline.max_drift, from which it is derived)");
  }
  // A limit that no accumulation meets is named before the accumulation it left unset.
  if (p.accumulation() == 0) RETURN_IF_ERROR(ValidateDriftLimit(p, *kind));
  RETURN_IF_ERROR(RequireBetween("pipeline.accumulation", p.accumulation(), 1, 4096));
  RETURN_IF_ERROR(Require(*kind != ScheduleKind::kAsyncOneFOneB || p.accumulation() == 1,
                          "pipeline.accumulation", "1 with schedule async-1f1b",
                          p.accumulation()));
  RETURN_IF_ERROR(ValidateDriftLimit(p, *kind));
  const std::string& correction = p.drift_correction();
  RETURN_IF_ERROR(Require(correction.empty() || correction == "none" ||
                              correction == "staleness" || correction == "stage-lr",
                          "pipeline.drift_correction", "none, staleness or stage-lr",
                          absl::StrCat("\"", correction, "\"")));
  RETURN_IF_ERROR(Require(correction.empty() || correction == "none" || *kind == ScheduleKind::kPaci,
                          "pipeline.drift_correction", "none unless schedule is paci",
                          absl::StrCat("\"", correction, "\"")));
  RETURN_IF_ERROR(RequireBetween("pipeline.micro_batch_size", p.micro_batch_size(), 1, 65536));
  RETURN_IF_ERROR(RequireBetween("pipeline.data_parallel", p.data_parallel(), 1, 256));
  if (!p.partition().empty() && p.partition() != "balanced" && p.partition() != "even") {
    return ParsePartitionBoundaries(p.partition(), num_layers, p.num_stages()).status();
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const v1::OptimizerSpec& o) {
  RETURN_IF_ERROR(Require(o.lr() > 0 && o.lr() <= 10, "optimizer.lr", "in (0, 10]", o.lr()));
  RETURN_IF_ERROR(
      Require(o.beta1() >= 0 && o.beta1() < 1, "optimizer.beta1", "in [0, 1)", o.beta1()));
  RETURN_IF_ERROR(
      Require(o.beta2() >= 0 && o.beta2() < 1, "optimizer.beta2", "in [0, 1)", o.beta2()));
  RETURN_IF_ERROR(Require(o.eps() > 0 && std::isfinite(o.eps()), "optimizer.eps",
                          "a positive number", o.eps()));
  RETURN_IF_ERROR(Require(o.weight_decay() >= 0 && std::isfinite(o.weight_decay()),
                          "optimizer.weight_decay", "a number >= 0", o.weight_decay()));
  RETURN_IF_ERROR(RequireBetween("optimizer.warmup_fraction", o.warmup_fraction(), 0.0f, 1.0f));
  RETURN_IF_ERROR(RequireBetween("optimizer.min_lr_ratio", o.min_lr_ratio(), 0.0f, 1.0f));
  return Require(o.clip_norm() >= 0 && std::isfinite(o.clip_norm()), "optimizer.clip_norm",
                 "a number >= 0 (0: no clipping)", o.clip_norm());
}

absl::Status ValidateTraining(const v1::TrainingSpec& t) {
  RETURN_IF_ERROR(RequireBetween<int64_t>("training.steps", t.steps(), 1, 1000000000));
  RETURN_IF_ERROR(Require(t.eval_interval() >= 1, "training.eval_interval", "at least 1",
                          t.eval_interval()));
  RETURN_IF_ERROR(
      RequireBetween("training.eval_micro_batches", t.eval_micro_batches(), 1, 10000));
  return RequireBetween("training.max_nonfinite_steps", t.max_nonfinite_steps(), 1, 1000000);
}

absl::Status ValidateData(const v1::DataSpec& d) {
  const bool text = !d.corpus_path().empty();
  if (text == !d.dataset().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.corpus_path: exactly one of data.corpus_path (a UTF-8 text) and data.dataset (a "
        "folder made by pacictl prepare-data) must be set, got ",
        text ? "both" : "neither"));
  }
  const std::string& tokenizer = d.tokenizer();
  RETURN_IF_ERROR(Require(tokenizer.empty() || tokenizer == "char" || tokenizer == "sentencepiece",
                          "data.tokenizer", "\"char\" or \"sentencepiece\"",
                          absl::StrCat("\"", tokenizer, "\"")));
  if (text && tokenizer == "sentencepiece" && d.tokenizer_model().empty()) {
    return absl::InvalidArgumentError(
        "data.tokenizer_model: must name a SentencePiece .model file when data.tokenizer is "
        "\"sentencepiece\", got \"\"");
  }
  if (!d.tokenizer_model().empty() && !(text && tokenizer == "sentencepiece")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.tokenizer_model: only with data.corpus_path and data.tokenizer \"sentencepiece\" "
        "(a dataset carries its own tokenizer), got \"", d.tokenizer_model(), "\""));
  }
  RETURN_IF_ERROR(Require(d.validation_shards() >= 0 && (!text || d.validation_shards() == 0),
                          "data.validation_shards", "at least 0, and 0 without data.dataset",
                          d.validation_shards()));
  return Require(d.validation_fraction() > 0 && d.validation_fraction() <= 0.5f,
                 "data.validation_fraction", "in (0, 0.5]", d.validation_fraction());
}

absl::Status ValidateCheckpoint(const v1::CheckpointSpec& c) {
  RETURN_IF_ERROR(
      Require(c.interval() >= 0, "checkpoint.interval", "at least 0", c.interval()));
  RETURN_IF_ERROR(RequireBetween("checkpoint.keep", c.keep(), 0, 1000000));
  if (c.resume() && c.directory().empty()) {
    return absl::InvalidArgumentError(
        "checkpoint.directory: must be set when checkpoint.resume is true, got \"\"");
  }
  return absl::OkStatus();
}

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
  const auto cannot_read = [&path] {
    return absl::NotFoundError(
        absl::StrCat("cannot read spec file ", path, ": ", std::strerror(errno)));
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) return cannot_read();
  std::string text;
  char buffer[1 << 14];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) return cannot_read();
  return ParseJobSpecYaml(text);
}

absl::StatusOr<std::vector<int>> ParsePartitionBoundaries(std::string_view text_in,
                                                          int num_layers, int num_stages) {
  const absl::string_view text(text_in.data(), text_in.size());
  const int units = 2 * num_layers + 2;
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.partition: must be balanced, even or ", num_stages - 1,
        " increasing unit boundaries between 1 and ", units - 1,
        " separated by commas (units: 0 the embedding, 2b+1 and 2b+2 the halves of block b, ",
        units - 1, " the head), got \"", text, "\": ", why));
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

// The accumulation a drift limit asks for (pipeline.max_drift in job.proto). A
// schedule that does not parse is left for the validator to name.
void ApplyDriftLimitDefaults(v1::PipelineSpec* pipeline) {
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline->schedule());
  if (!kind.ok()) return;
  if (*kind == ScheduleKind::kAsyncOneFOneB && pipeline->accumulation() == 0) {
    pipeline->set_accumulation(1);
  }
  if (*kind == ScheduleKind::kPaci && pipeline->accumulation() == 0 && pipeline->has_max_drift()) {
    pipeline->set_accumulation(
        AccumulationForDriftLimit(pipeline->num_stages(), pipeline->max_drift()));
  }
}

int DefaultFfnHiddenSize(std::string_view architecture, int d_model) {
  if (architecture != "llama") return 4 * d_model;
  const int64_t hidden = (int64_t{8} * d_model + 2) / 3;
  return static_cast<int>((hidden + 7) / 8 * 8);
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
  if (pipeline->drift_correction().empty()) pipeline->set_drift_correction("none");
  if (!pipeline->has_data_parallel()) pipeline->set_data_parallel(1);
  ApplyDriftLimitDefaults(pipeline);

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
  if (runtime->precision().empty()) runtime->set_precision("fp32");

  if (spec->has_checkpoint() && !spec->checkpoint().has_keep()) {
    spec->mutable_checkpoint()->set_keep(3);
  }

  v1::RunPolicy* policy = spec->mutable_run_policy();
  if (!policy->has_backoff_limit()) policy->set_backoff_limit(3);
}

static absl::Status ValidateRuntimeDevices(const v1::RuntimeSpec& runtime, int num_stages,
                                           int num_replicas) {
  RETURN_IF_ERROR(Require(runtime.device().empty() || IsValidDevice(runtime.device()), "runtime.device",
                          "\"cpu\", \"cuda\" or \"cuda:N\"",
                          absl::StrCat("\"", runtime.device(), "\"")));
  if (runtime.stage_devices_size() > 0) {
    const int workers = num_stages * std::max(1, num_replicas);
    RETURN_IF_ERROR(Require(
        runtime.stage_devices_size() == num_stages || runtime.stage_devices_size() == workers,
        "runtime.stage_devices",
        workers == num_stages
            ? absl::StrCat("one device per stage (", num_stages, ")")
            : absl::StrCat("one device per stage (", num_stages, ") or per stage of each replica (",
                           workers, ")"),
        absl::StrCat(runtime.stage_devices_size(), " devices")));
    for (int s = 0; s < runtime.stage_devices_size(); ++s) {
      RETURN_IF_ERROR(Require(IsValidDevice(runtime.stage_devices(s)),
                              absl::StrCat("runtime.stage_devices[", s, "]"),
                              "\"cpu\", \"cuda\" or \"cuda:N\"",
                              absl::StrCat("\"", runtime.stage_devices(s), "\"")));
    }
  }
  const std::string& precision = runtime.precision();
  return Require(precision.empty() || precision == "fp32" || precision == "bf16-autocast" ||
                     precision == "bf16-weights",
                 "runtime.precision", "\"fp32\", \"bf16-autocast\" or \"bf16-weights\"",
                 absl::StrCat("\"", precision, "\""));
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  const std::string& name = spec.name();
  if (name.empty()) return absl::InvalidArgumentError("name: must not be empty");
  RETURN_IF_ERROR(
      Require(name.size() <= 63, "name", "at most 63 characters", absl::StrCat(name.size())));
  RETURN_IF_ERROR(Require(IsValidName(name), "name",
                          "lowercase letters, digits and '-', starting and ending with a "
                          "letter or digit",
                          absl::StrCat("\"", name, "\"")));
  RETURN_IF_ERROR(ValidateModel(spec.model()));
  RETURN_IF_ERROR(ValidatePipeline(spec.pipeline(), spec.model().num_layers()));
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  RETURN_IF_ERROR(ValidateTraining(spec.training()));
  RETURN_IF_ERROR(ValidateData(spec.data()));
  RETURN_IF_ERROR(ValidateCheckpoint(spec.checkpoint()));
  RETURN_IF_ERROR(
      RequireBetween("runtime.threads_per_stage", spec.runtime().threads_per_stage(), 1, 256));
  // ~100 bytes a span, kept by the worker and the coordinator: 1,000,000 is
  // ~100 MB per stage.
  RETURN_IF_ERROR(
      RequireBetween("runtime.trace_max_spans", spec.runtime().trace_max_spans(), 0, 1000000));
  RETURN_IF_ERROR(ValidateRuntimeDevices(spec.runtime(), spec.pipeline().num_stages(),
                                         spec.pipeline().data_parallel()));
  const v1::RunPolicy& policy = spec.run_policy();
  RETURN_IF_ERROR(RequireBetween("run_policy.backoff_limit", policy.backoff_limit(), 0, 1000));
  RETURN_IF_ERROR(RequireBetween<int64_t>("run_policy.active_deadline_seconds",
                                          policy.active_deadline_seconds(), 0, 365LL * 86400));
  RETURN_IF_ERROR(RequireBetween("run_policy.priority", policy.priority(), -1000, 1000));
  RETURN_IF_ERROR(RequireBetween<int64_t>("run_policy.ttl_seconds_after_finished",
                                          policy.ttl_seconds_after_finished(), 0,
                                          10LL * 365 * 86400));
  RETURN_IF_ERROR(Require(policy.worker_selector_size() <= 32, "run_policy.worker_selector",
                          "at most 32 labels", absl::StrCat(policy.worker_selector_size())));
  for (const auto& [key, value] : policy.worker_selector()) {
    RETURN_IF_ERROR(Require(!key.empty() && key.size() <= 253 && value.size() <= 253,
                            "run_policy.worker_selector", "keys of 1 to 253 characters, values "
                            "of at most 253", absl::StrCat("\"", key, "\"")));
  }
  return absl::OkStatus();
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
  ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile(path));
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

std::string StageName(const v1::PipelineSpec& pipeline, int stage, int replica) {
  if (pipeline.data_parallel() <= 1) return absl::StrCat("stage ", stage);
  return absl::StrCat("stage ", stage, " replica ", replica);
}

int64_t DriftLimit(const v1::PipelineSpec& pipeline) {
  if (pipeline.has_max_drift()) return pipeline.max_drift();
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(pipeline.schedule());
  if (!kind.ok()) return 0;
  return DriftBound(*kind, pipeline.num_stages(), 0, pipeline.accumulation());
}

}  // namespace paci
