#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "paci/v1/job.pb.h"
#include "worker/data/tokenizer.h"
#include "worker/runtime/checkpoint_layout.h"
#include "worker/runtime/checkpoint_reader.h"
#include "worker/runtime/stage_model.h"

namespace paci {

// Where a stage starts and what it leaves: its job's own checkpoints
// (checkpoint.directory, resume) and checkpoint.init_from. Files only: no
// schedule, no links.
//
// Used by one thread, the stage's compute thread.
class StageCheckpointer {
 public:
  // `tokenizer` (stage 0's, may be null) goes into stage 0's shards.
  StageCheckpointer(const v1::JobSpec& spec, int stage, const Tokenizer* tokenizer);

  // checkpoint.init_from's latest step, read whole, unless the job resumes
  // from a checkpoint of its own (that one wins): the weights to build the
  // model from. nullopt without init_from. Errors name checkpoint.init_from:
  // ReadCheckpoint's, and FailedPrecondition for a model of another shape
  // (the first field that differs).
  struct Source {
    ModelCheckpoint checkpoint;
    std::string name;  // how errors name it: "checkpoint.init_from: DIR (step N)"
  };
  absl::StatusOr<std::optional<Source>> InitialWeights() const;

  // Where training resumes: the step and the samples every replica consumed.
  struct Start {
    int64_t step = 0;
    uint64_t samples = 0;
  };
  // checkpoint.resume with a complete step in the directory: loads this
  // stage's shard of the newest whole step (CheckStep: every stage's shard
  // verifies and records that step and one job) into `model` (weights,
  // AdamW); newer torn or mixed steps are logged, naming the shard and why,
  // and passed over. The whole step may be of a job of another name (the
  // operator runs an evicted job again under a new name), and of another
  // number of stages (a job resumed at another shape): then every shard of
  // it is read and re-cut to this stage (LoadRecut), so the weights, AdamW's
  // moments and step count, the step and the data position all carry over.
  // Without
  // resume, a directory that holds checkpoints is refused
  // (FailedPrecondition, nothing overwritten). LoadShard's errors name the file.
  absl::StatusOr<Start> Restore(StageModel& model) const;

  // Writes this stage's shard of `step`, whose samples (every replica's) end
  // at `samples`, then removes its shards of steps past checkpoint.keep
  // (PruneSteps: only whole steps count); returns its path. Errors name the
  // file.
  absl::StatusOr<std::string> Save(int64_t step, uint64_t samples, StageModel& model) const;

 private:
  // The step this job's own checkpoint resumes from and the stage count that
  // wrote it (LatestSoundCheckpoint; the torn steps it passed over logged),
  // nullopt when there is none. Found once: InitialWeights and Restore both
  // ask, and it reads every shard.
  absl::StatusOr<std::optional<CheckpointStep>> ResumeStep() const;
  mutable std::optional<absl::StatusOr<std::optional<CheckpointStep>>> resume_step_;
  // The steps found whole (resume, PruneSteps), so that each save does not
  // read them again.
  mutable std::set<int64_t> whole_steps_;

  const v1::JobSpec& spec_;
  const int stage_, num_stages_;
  const Tokenizer* const tokenizer_;
};

}  // namespace paci
