#include "worker/runtime/stage_checkpointer.h"

#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/model/hf_format.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/checkpoint_layout.h"

namespace paci {
namespace {

// A Hugging Face model folder as a checkpoint of step 0 without a tokenizer
// (the job's data brings its own, and must encode to the model's ids).
absl::StatusOr<ModelCheckpoint> ReadHfAsCheckpoint(const std::string& folder) {
  ASSIGN_OR_RETURN(HfModel model, ReadHfFolder(folder));
  ModelCheckpoint checkpoint;
  checkpoint.directory = folder;
  checkpoint.num_stages = 1;
  checkpoint.job_name = "huggingface";
  checkpoint.config = model.config;
  checkpoint.parameters = std::move(model.weights);
  return checkpoint;
}

}  // namespace

StageCheckpointer::StageCheckpointer(const v1::JobSpec& spec, int stage,
                                     const Tokenizer* tokenizer)
    : spec_(spec), stage_(stage), num_stages_(spec.pipeline().num_stages()), tokenizer_(tokenizer) {}

absl::StatusOr<std::optional<StageCheckpointer::Source>> StageCheckpointer::InitialWeights() const {
  const auto& ckpt = spec_.checkpoint();
  if (ckpt.init_from().empty()) return std::nullopt;
  if (ckpt.resume() && !ckpt.directory().empty()) {  // this job's own checkpoint wins
    ASSIGN_OR_RETURN(std::optional<CheckpointStep> latest, ResumeStep());
    if (latest) return std::nullopt;
  }
  // Fine-tuning: the weights by name from a checkpoint of any cut, or from a
  // Hugging Face model folder; the optimizer stays fresh and the job starts
  // at step 0.
  absl::StatusOr<ModelCheckpoint> source = IsHfFolder(ckpt.init_from())
                                               ? ReadHfAsCheckpoint(ckpt.init_from())
                                               : ReadCheckpoint(ckpt.init_from());
  if (!source.ok()) {
    return absl::Status(source.status().code(),
                        absl::StrCat("checkpoint.init_from: ", source.status().message()));
  }
  const std::string where =
      absl::StrCat("checkpoint.init_from: ", ckpt.init_from(), " (step ", source->step, ")");
  if (auto difference = ShapeDifference(GptConfigFromSpec(spec_.model()), source->config)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " holds a model of another shape: ", *difference));
  }
  if (tokenizer_ != nullptr && source->tokenizer != nullptr &&
      source->tokenizer->Id() != tokenizer_->Id()) {
    LOG(WARNING) << where << " was trained with another tokenizer than this job's data: "
                 << "its token ids mean other text";
  }
  LOG(INFO) << "stage " << stage_ << " starts from the weights of " << where;
  return std::optional<Source>(Source{*std::move(source), where});
}

absl::StatusOr<StageCheckpointer::Start> StageCheckpointer::Restore(StageModel& model) const {
  const auto& ckpt = spec_.checkpoint();
  if (ckpt.directory().empty()) return Start{};
  std::optional<CheckpointStep> latest;
  if (ckpt.resume()) {
    ASSIGN_OR_RETURN(latest, ResumeStep());
  }
  // Resumed at another shape, or at this one cut elsewhere (another
  // pipeline.partition, or a cost model that moved the balanced cut).
  bool recut = latest && latest->num_stages != num_stages_;
  if (latest && !recut) {
    ASSIGN_OR_RETURN(const ShardMeta own, ReadShardMeta(ShardPath(ckpt.directory(), latest->step,
                                                                  stage_, num_stages_)));
    // The same model (else LoadShard names the difference), another cut.
    recut = own.model_fingerprint != model.module()->Fingerprint() && own.config &&
            !ShapeDifference(model.module()->config(), *own.config);
  }
  if (recut) {
    ASSIGN_OR_RETURN(ShardMeta meta, LoadRecut(ckpt.directory(), latest->step, latest->num_stages,
                                               model.module(), model.optimizer()));
    LOG(INFO) << "stage " << stage_ << " of " << num_stages_ << " resumed from step " << meta.step
              << " of " << ckpt.directory() << ", written by " << latest->num_stages
              << " stages cut otherwise: re-cut to this stage's parameters and AdamW state";
    return Start{meta.step, meta.next_micro_batch};
  }
  if (latest) {  // this job's own checkpoint wins over init_from
    ShardMeta expected;
    expected.stage = stage_;
    expected.num_stages = num_stages_;
    expected.model_fingerprint = model.module()->Fingerprint();
    const std::string path = ShardPath(ckpt.directory(), latest->step, stage_, num_stages_);
    ASSIGN_OR_RETURN(ShardMeta meta, LoadShard(path, expected, model.module(), model.optimizer()));
    if (meta.step != latest->step) {  // CheckStep read it as that step: it changed since
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", path, " says it is at step ", meta.step,
                       "; its folder says step ", latest->step,
                       " (it was replaced while resuming)"));
    }
    LOG(INFO) << "stage " << stage_ << " resumed from " << path << " at step " << meta.step;
    if (meta.job_name != spec_.name()) {  // a job the operator runs again after an eviction
      LOG(INFO) << "job=" << spec_.name() << " stage " << stage_
                << ": the checkpoint resumed was written by job " << meta.job_name;
    }
    return Start{meta.step, meta.next_micro_batch};
  }
  if (!ckpt.resume() && HoldsCheckpoints(ckpt.directory())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.directory: ", ckpt.directory(),
        " already holds checkpoints; set checkpoint.resume: true to continue from the latest, "
        "or choose another directory (nothing was overwritten)"));
  }
  return Start{};
}

absl::StatusOr<std::optional<CheckpointStep>> StageCheckpointer::ResumeStep() const {
  if (resume_step_) return *resume_step_;
  std::vector<std::string> passed_over;
  const absl::StatusOr<std::optional<CheckpointStep>>& found = resume_step_.emplace(
      LatestSoundCheckpoint(spec_.checkpoint().directory(), num_stages_, &passed_over));
  for (const std::string& torn : passed_over) {  // only when a sound step was found
    LOG(WARNING) << "job=" << spec_.name() << " stage " << stage_ << ": checkpoint " << torn
                 << "; resuming from step " << (*found)->step << " instead";
  }
  if (found.ok() && found->has_value() && (*found)->num_stages == num_stages_) {
    whole_steps_.insert((*found)->step);
  }
  return found;
}

absl::StatusOr<std::string> StageCheckpointer::Save(int64_t step, uint64_t samples,
                                                    StageModel& model) const {
  ShardMeta meta;
  meta.job_name = spec_.name();
  meta.stage = stage_;
  meta.num_stages = num_stages_;
  meta.model_fingerprint = model.module()->Fingerprint();
  meta.step = step;
  meta.next_micro_batch = samples;
  // Stage 0's shard says how to turn text into the model's tokens and back.
  if (tokenizer_ != nullptr) meta.tokenizer = tokenizer_->Serialize();
  const std::string path = ShardPath(spec_.checkpoint().directory(), step, stage_, num_stages_);
  RETURN_IF_ERROR(SaveShard(path, meta, model.module(), model.optimizer()));
  // The step is saved; a failure to prune only leaves older steps behind.
  absl::StatusOr<std::vector<int64_t>> pruned =
      PruneSteps(spec_.checkpoint().directory(), num_stages_, spec_.checkpoint().keep(),
                 &whole_steps_);
  if (!pruned.ok()) {
    LOG(WARNING) << "job=" << spec_.name() << " stage " << stage_ << ": " << pruned.status();
  } else if (!pruned->empty()) {
    LOG(INFO) << "job=" << spec_.name() << " stage " << stage_ << ": removed steps "
              << absl::StrJoin(*pruned, ", ") << " (checkpoint.keep "
              << spec_.checkpoint().keep() << ")";
  }
  // Steps of a shape the job ran at before (an elastic resize) go too, once
  // this shape has its own.
  absl::StatusOr<std::vector<int64_t>> others = PruneOtherStageCounts(
      spec_.checkpoint().directory(), num_stages_, spec_.checkpoint().keep(), whole_steps_);
  if (!others.ok()) {
    LOG(WARNING) << "job=" << spec_.name() << " stage " << stage_ << ": " << others.status();
  } else if (!others->empty()) {
    LOG(INFO) << "job=" << spec_.name() << " stage " << stage_ << ": removed steps "
              << absl::StrJoin(*others, ", ") << " of other stage counts (checkpoint.keep "
              << spec_.checkpoint().keep() << " steps of " << num_stages_ << " stages are whole)";
  }
  return path;
}

}  // namespace paci
