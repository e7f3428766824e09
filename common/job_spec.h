#pragma once

// Reading and checking a JobSpec: the one place that knows what a valid job
// is. Used by pacictl, the worker and (later) the coordinator and operator.
// ValidateJobSpec and its per-section checks live in job_spec_validation.cc;
// reading, defaults and the rest in job_spec.cc.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/schedule_kind.h"
#include "paci/v1/job.pb.h"

namespace paci {

// Parses a spec written in YAML (or JSON, which is YAML) through the proto3
// JSON mapping: keys are field names in snake_case or lowerCamelCase. An
// unknown key, a wrong type or a YAML syntax error is InvalidArgument naming
// the key or the line. Does not apply defaults nor validate.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(std::string_view text);

// Reads `path` and parses it; NotFound names the path when it cannot be read.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

// Fills every unset optional field with its documented default (see
// job.proto) and an empty schedule with "paci". Idempotent.
void ApplyJobSpecDefaults(v1::JobSpec* spec);
// model.ffn_hidden_size's default: 4 * d_model for "gpt2" (or ""), 8/3 *
// d_model rounded up to a multiple of 8 for "llama" (its MLP has three
// matrices, so both hold about the same parameters).
int DefaultFfnHiddenSize(std::string_view architecture, int d_model);

// Checks a spec after defaults: InvalidArgument whose message starts with the
// field path and gives the allowed range, e.g.
//   "pipeline.num_stages: must be between 1 and 64, got 0".
// Checks ranges and cross-field rules (num_stages <= model.num_layers,
// d_model % num_heads == 0, async-1f1b with accumulation 1, ...), and the
// sizes below: each string at most kMaxSpecStringBytes ("checkpoint.directory:
// must be at most 4096 bytes (PATH_MAX), got 5000 bytes"), the worker selector's
// entries, and the whole spec at most kMaxJobSpecBytes serialized ("spec:
// ..."). It does not touch the file system.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// What one job may hold, so that no submission costs the coordinator (which
// keeps every job in memory and in its store, and reloads them on a restart)
// more than this. ValidateJobSpec enforces the spec's; ValidateJobLabels a
// submission's labels.
//
// A spec serializes to at most this many bytes: a real one takes well under
// 2 KiB; this leaves room for every path at its limit and a full worker
// selector, or a runtime.stage_devices of one entry per worker for some 5,000
// workers, and refuses a spec padded out (with unknown fields, say) to the
// size of a gRPC message.
inline constexpr size_t kMaxJobSpecBytes = 64 * 1024;
// A path or other string of a spec: at most PATH_MAX bytes.
inline constexpr size_t kMaxSpecStringBytes = 4096;
// Labels, and run_policy.worker_selector: at most this many, keys of 1 to 253
// characters (a Kubernetes label key: a DNS subdomain prefix and a name).
inline constexpr int kMaxLabels = 64;
inline constexpr size_t kMaxLabelKeyBytes = 253;
// A job's label values are at most a Kubernetes label value's 63 characters;
// a worker selector's at most a worker label's 253 (it selects worker labels,
// such as "<namespace>.<name>" and a 64-digit token digest).
inline constexpr size_t kMaxLabelValueBytes = 63;
inline constexpr size_t kMaxSelectorValueBytes = 253;

// Checks a submission's labels (or a list's label selector), `field` naming
// them in the message: InvalidArgument past kMaxLabels, or for a key of none
// or more than kMaxLabelKeyBytes characters, or a value of more than
// kMaxLabelValueBytes.
absl::Status ValidateJobLabels(const google::protobuf::Map<std::string, std::string>& labels,
                               std::string_view field);

// pipeline.partition's explicit form: num_stages - 1 strictly increasing unit
// boundaries between 1 and 2 * num_layers + 1, comma-separated ("3,7"); the
// units are those of worker/model/partition.h. Returns all num_stages + 1
// boundaries, 0 first and 2 * num_layers + 2 last. InvalidArgument naming
// pipeline.partition.
// A "/R" after the boundaries ("9/9216") is the head's split by vocabulary
// (ParsePartitionHeadSplit); the boundaries ignore it.
absl::StatusOr<std::vector<int>> ParsePartitionBoundaries(std::string_view text, int num_layers,
                                                          int num_stages);
// The explicit form's "/R": the stage before the last computes the head's
// rows [0, R) of the vocabulary, the last stage the rest
// (worker/model/partition.h). 0 without one; InvalidArgument naming
// pipeline.partition for R outside [1, vocab_size) or a single stage.
absl::StatusOr<int64_t> ParsePartitionHeadSplit(std::string_view text, int num_layers,
                                                int num_stages, int64_t vocab_size);

// The most micro-batches the stage before the last may hold between forward
// and backward when the head is split by vocabulary: the last stage waits for
// that stage's part on the stream its activations come by, and the worker's
// inbox holds 64 frames of it (StageHost), so a stage further ahead could fill
// it and leave the part unread. PACI, async-1f1b and the flush hold 2 there;
// gpipe holds the accumulation.
inline constexpr int kHeadSplitMaxInFlight = 32;
// Whether `pipeline`'s schedule keeps the stage before the last within
// kHeadSplitMaxInFlight (false for a schedule that does not parse).
bool HeadSplitFitsSchedule(const v1::PipelineSpec& pipeline);

// The device stage `stage` of replica `replica` runs on: from
// runtime.stage_devices when given (entry replica * P + stage when it has one
// per stage of each replica, else entry `stage`, which every replica shares),
// else runtime.device ("cpu" when empty).
std::string StageDevice(const v1::JobSpec& spec, int stage, int replica = 0);

// Parse, apply defaults, validate; also checks that data.corpus_path and
// data.tokenizer_model name readable files and data.dataset a folder with a
// readable `tokenizer` file (NotFound naming the field). Relative data and
// checkpoint paths are made absolute against the current directory, so the
// spec can be handed to workers that run elsewhere.
absl::StatusOr<v1::JobSpec> LoadAndValidateJobSpec(const std::string& path);
// The same with `edit` applied to the spec as written, before the defaults:
// what they derive (the warm-up from training.steps, the accumulation from the
// global batch) follows the edited values.
absl::StatusOr<v1::JobSpec> LoadAndValidateJobSpec(
    const std::string& path, const std::function<void(v1::JobSpec*)>& edit);

// The workers a job runs on: P x R (pipeline.num_stages x data_parallel).
// Worker w runs stage w % P of replica w / P.
int WorkersOf(const v1::PipelineSpec& pipeline);

// The largest message a stage link of this job carries: a hidden state (or
// its gradient) of [micro_batch_size, seq_len, d_model] in float32, and 64 KiB
// for the frame around it. A worker made for one job (the operator's) caps its
// link server's messages at this, instead of 1 GiB.
int64_t LargestLinkMessageBytes(const v1::JobSpec& spec);

// How messages name a stage's worker: "stage 1", or "stage 1 replica 0" when
// the pipeline has replicas.
std::string StageName(const v1::PipelineSpec& pipeline, int stage, int replica);

// The numbers of `pipeline` that its schedule's row of the schedule table
// reads (ScheduleTraits in common/schedule_kind.h): P, a (0 when left out) and
// max_drift when given.
PipelineShape PipelineShapeOf(const v1::PipelineSpec& pipeline);

// The job's drift limit D: pipeline.max_drift when given, else what its
// schedule and accumulation give (ceil((P-1)/a) for paci, P-1 for async-1f1b,
// 0 for the flushes). The status, the summary and the alert show this.
int64_t DriftLimit(const v1::PipelineSpec& pipeline);

// The job's global batch, sequences per optimizer step over every replica:
// pipeline.global_batch when given, else R x accumulation x micro_batch_size
// (what a valid spec's global_batch equals).
int64_t GlobalBatch(const v1::PipelineSpec& pipeline);

}  // namespace paci
