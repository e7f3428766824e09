// ValidateJobSpec (declared in common/job_spec.h) and its checks of each
// section of a JobSpec. Pure: it touches neither the spec nor the file system.

#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/dns_label.h"
#include "common/elastic_shape.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"

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

// "<field>: must be at most <limit> bytes, got <size> bytes" unless it is.
absl::Status RequireStringSize(absl::string_view field, const std::string& value) {
  return Require(value.size() <= kMaxSpecStringBytes, field,
                 absl::StrCat("at most ", kMaxSpecStringBytes, " bytes (PATH_MAX)"),
                 absl::StrCat(value.size(), " bytes"));
}

// Every string of `message` and the messages in it (paths, names, devices,
// the partition) at most kMaxSpecStringBytes, each named by its path from
// `prefix`: by reflection, so a string field added later is bounded too.
// Maps (run_policy.worker_selector) are ValidateLabelMap's.
absl::Status ValidateStringSizes(const google::protobuf::Message& message,
                                 const std::string& prefix) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);  // the fields set: an empty string costs nothing
  for (const FieldDescriptor* field : fields) {
    if (field->is_map()) continue;
    const std::string path = absl::StrCat(prefix, prefix.empty() ? "" : ".", field->name());
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!field->is_repeated()) {
        RETURN_IF_ERROR(ValidateStringSizes(reflection.GetMessage(message, field), path));
        continue;
      }
      for (int i = 0; i < reflection.FieldSize(message, field); ++i) {
        RETURN_IF_ERROR(ValidateStringSizes(reflection.GetRepeatedMessage(message, field, i),
                                            absl::StrCat(path, "[", i, "]")));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      std::string scratch;
      if (!field->is_repeated()) {
        RETURN_IF_ERROR(
            RequireStringSize(path, reflection.GetStringReference(message, field, &scratch)));
        continue;
      }
      for (int i = 0; i < reflection.FieldSize(message, field); ++i) {
        RETURN_IF_ERROR(RequireStringSize(
            absl::StrCat(path, "[", i, "]"),
            reflection.GetRepeatedStringReference(message, field, i, &scratch)));
      }
    }
  }
  return absl::OkStatus();
}

// Labels or a selector: at most kMaxLabels, keys of 1 to kMaxLabelKeyBytes
// characters, values of at most `max_value`. A key is quoted only once it has
// passed its own check, so a message stays short.
absl::Status ValidateLabelMap(const google::protobuf::Map<std::string, std::string>& labels,
                              absl::string_view field, size_t max_value) {
  if (labels.size() > static_cast<size_t>(kMaxLabels)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be at most ", kMaxLabels, " labels, got ", labels.size()));
  }
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > kMaxLabelKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": keys must be 1 to ", kMaxLabelKeyBytes, " characters, got one of ",
          key.size()));
    }
    if (value.size() > max_value) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", key, "]: must be at most ",
                                                     max_value, " characters, got ",
                                                     value.size()));
    }
  }
  return absl::OkStatus();
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

// pipeline.max_drift against the schedule and the accumulation: the range
// here, the rest the schedule's row (check_drift_limit) says, from its drift
// bound at stage 0.
absl::Status ValidateDriftLimit(const v1::PipelineSpec& p, const ScheduleTraits& schedule) {
  if (!p.has_max_drift()) return absl::OkStatus();
  RETURN_IF_ERROR(RequireBetween("pipeline.max_drift", p.max_drift(), 0, 4096));
  return schedule.check_drift_limit(PipelineShapeOf(p),
                                    schedule.drift_bound(p.num_stages(), 0, p.accumulation()));
}

// pipeline.drift_correction: one of the table's, and one its schedule takes.
absl::Status ValidateDriftCorrection(const v1::PipelineSpec& p, ScheduleKind kind) {
  const std::string quoted = absl::StrCat("\"", p.drift_correction(), "\"");
  const DriftCorrectionTraits* correction = FindDriftCorrection(p.drift_correction());
  RETURN_IF_ERROR(Require(correction != nullptr, "pipeline.drift_correction",
                          DriftCorrectionNames(), quoted));
  return Require(DriftCorrectionAllowed(*correction, kind), "pipeline.drift_correction",
                 absl::StrCat(DriftCorrections().front().name, " unless schedule is ",
                              ScheduleNames(correction->schedules, " or ")),
                 quoted);
}

// pipeline.global_batch and pipeline.accumulation: one of them given, and
// R x a x micro_batch_size = global batch. A drift limit never chooses them.
absl::Status ValidateGlobalBatch(const v1::PipelineSpec& p) {
  const int64_t per_accumulation = int64_t{p.micro_batch_size()} * p.data_parallel();
  if (p.accumulation() == 0 && !p.has_global_batch()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.accumulation: required (or pipeline.global_batch, from which it is derived)",
        p.has_max_drift() ? "; max_drift does not choose the batch, the sequences per optimizer "
                            "step are yours"
                          : ""));
  }
  if (!p.has_global_batch()) return absl::OkStatus();
  RETURN_IF_ERROR(RequireBetween("pipeline.global_batch", p.global_batch(), 1, 1 << 30));
  const std::string split =
      absl::StrCat("micro_batch_size x data_parallel (", p.micro_batch_size(), " x ",
                   p.data_parallel(), " = ", per_accumulation, ")");
  RETURN_IF_ERROR(Require(p.global_batch() % per_accumulation == 0, "pipeline.global_batch",
                          absl::StrCat("a multiple of ", split), p.global_batch()));
  RETURN_IF_ERROR(Require(p.global_batch() / per_accumulation <= 4096, "pipeline.global_batch",
                          absl::StrCat("at most 4096 (the largest accumulation) x ", split),
                          p.global_batch()));
  return Require(int64_t{p.accumulation()} * per_accumulation == p.global_batch(),
                 "pipeline.global_batch",
                 absl::StrCat("accumulation x ", split, ": ", p.accumulation(), " x ",
                              per_accumulation, " = ", int64_t{p.accumulation()} * per_accumulation,
                              "; give one of global_batch and accumulation, or both in agreement"),
                 p.global_batch());
}

}  // namespace

bool HeadSplitFitsSchedule(const v1::PipelineSpec& p) {
  const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(p.schedule());
  if (!kind.ok() || p.num_stages() < 2) return false;
  const ScheduleTraits& schedule = ScheduleTraitsOf(*kind);
  return schedule.in_flight_limit(p.num_stages(), p.num_stages() - 2,
                                  schedule.effective_accumulation(p.accumulation())) <=
         kHeadSplitMaxInFlight;
}

namespace {

absl::Status ValidatePipeline(const v1::PipelineSpec& p, int num_layers, int64_t vocab_size) {
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
  const ScheduleTraits& schedule = ScheduleTraitsOf(*kind);
  RETURN_IF_ERROR(RequireBetween("pipeline.micro_batch_size", p.micro_batch_size(), 1, 65536));
  RETURN_IF_ERROR(RequireBetween("pipeline.data_parallel", p.data_parallel(), 1, 256));
  RETURN_IF_ERROR(ValidateGlobalBatch(p));
  RETURN_IF_ERROR(RequireBetween("pipeline.accumulation", p.accumulation(), 1, 4096));
  RETURN_IF_ERROR(schedule.check_accumulation(PipelineShapeOf(p)));
  RETURN_IF_ERROR(ValidateDriftLimit(p, schedule));
  RETURN_IF_ERROR(ValidateDriftCorrection(p, *kind));
  if (!p.partition().empty() && p.partition() != "balanced" && p.partition() != "even") {
    RETURN_IF_ERROR(ParsePartitionBoundaries(p.partition(), num_layers, p.num_stages()).status());
    ASSIGN_OR_RETURN(const int64_t head_split,
                     ParsePartitionHeadSplit(p.partition(), num_layers, p.num_stages(), vocab_size));
    if (head_split > 0 && !HeadSplitFitsSchedule(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.partition: the head split \"/", head_split,
          "\" needs the stage before the last to hold at most ", kHeadSplitMaxInFlight,
          " micro-batches in flight; schedule ", p.schedule(), " holds more there at "
          "pipeline.accumulation ", p.accumulation(),
          ": lower the accumulation, use another schedule, or leave the head whole"));
    }
  }
  return absl::OkStatus();
}

// pipeline.warmup_steps: within the run, and only where there is drift to
// release (a schedule that flushes drains at every step already). After
// ValidatePipeline and ValidateTraining.
absl::Status ValidateWarmup(const v1::JobSpec& spec) {
  const int64_t warmup = spec.pipeline().warmup_steps();
  if (warmup == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Require(warmup >= 0, "pipeline.warmup_steps", "at least 0", warmup));
  RETURN_IF_ERROR(Require(warmup <= spec.training().steps(), "pipeline.warmup_steps",
                          absl::StrCat("at most training.steps (", spec.training().steps(),
                                       "): a warm-up longer than the run is the flush"),
                          warmup));
  const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(spec.pipeline().schedule());
  if (!kind.ok()) return kind.status();
  return Require(!ScheduleTraitsOf(*kind).flushes, "pipeline.warmup_steps",
                 absl::StrCat("0 with schedule ", ScheduleKindName(*kind),
                              ", which drains the pipe at every step already"),
                 warmup);
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

absl::Status ValidateRuntimeDevices(const v1::RuntimeSpec& runtime, int num_stages,
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
  return Require(precision.empty() || precision == "auto" || precision == "fp32" ||
                     precision == "bf16-autocast" || precision == "bf16-weights",
                 "runtime.precision", "\"auto\", \"fp32\", \"bf16-autocast\" or \"bf16-weights\"",
                 absl::StrCat("\"", precision, "\""));
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  const std::string& name = spec.name();
  if (name.empty()) return absl::InvalidArgumentError("name: must not be empty");
  RETURN_IF_ERROR(
      Require(name.size() <= 63, "name", "at most 63 characters", absl::StrCat(name.size())));
  RETURN_IF_ERROR(Require(IsDnsLabel(name), "name",
                          "lowercase letters, digits and '-', starting and ending with a "
                          "letter or digit",
                          absl::StrCat("\"", name, "\"")));
  // What one job costs the coordinator, which keeps it in memory and in its
  // store: each string, the selector, then the whole spec (unknown fields
  // included), before anything reads them further.
  RETURN_IF_ERROR(ValidateStringSizes(spec, ""));
  RETURN_IF_ERROR(ValidateLabelMap(spec.run_policy().worker_selector(),
                                   "run_policy.worker_selector", kMaxSelectorValueBytes));
  const size_t bytes = spec.ByteSizeLong();
  RETURN_IF_ERROR(Require(bytes <= kMaxJobSpecBytes, "spec",
                          absl::StrCat("at most ", kMaxJobSpecBytes, " bytes serialized"),
                          absl::StrCat(bytes, " bytes")));
  RETURN_IF_ERROR(ValidateModel(spec.model()));
  RETURN_IF_ERROR(
      ValidatePipeline(spec.pipeline(), spec.model().num_layers(), spec.model().vocab_size()));
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  RETURN_IF_ERROR(ValidateTraining(spec.training()));
  RETURN_IF_ERROR(ValidateWarmup(spec));
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
  RETURN_IF_ERROR(ValidateElastic(spec));
  const v1::RunPolicy& policy = spec.run_policy();
  RETURN_IF_ERROR(RequireBetween("run_policy.backoff_limit", policy.backoff_limit(), 0, 1000));
  RETURN_IF_ERROR(RequireBetween<int64_t>("run_policy.active_deadline_seconds",
                                          policy.active_deadline_seconds(), 0, 365LL * 86400));
  RETURN_IF_ERROR(RequireBetween("run_policy.priority", policy.priority(), -1000, 1000));
  RETURN_IF_ERROR(RequireBetween<int64_t>("run_policy.ttl_seconds_after_finished",
                                          policy.ttl_seconds_after_finished(), 0,
                                          10LL * 365 * 86400));
  // run_policy.worker_selector is checked with the sizes, above.
  return absl::OkStatus();
}

absl::Status ValidateJobLabels(const google::protobuf::Map<std::string, std::string>& labels,
                               std::string_view field) {
  return ValidateLabelMap(labels, absl::string_view(field.data(), field.size()),
                          kMaxLabelValueBytes);
}

}  // namespace paci
