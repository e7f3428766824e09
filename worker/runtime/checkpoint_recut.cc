// A job resumed at another shape (LatestSoundCheckpoint, LoadRecut in
// checkpoint.h): the newest whole step of any stage count, re-cut to this
// stage's parameters by their global names.

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "worker/model/gpt_config.h"
#include "worker/runtime/checkpoint.h"

namespace paci {

absl::StatusOr<std::optional<CheckpointStep>> LatestSoundCheckpoint(
    const std::string& directory, int num_stages, std::vector<std::string>* passed_over) {
  ASSIGN_OR_RETURN(std::set<int> counts, StageCounts(directory));
  counts.insert(num_stages);  // its own count first among equals, and its error
  std::optional<CheckpointStep> latest;
  std::optional<absl::Status> own_error, other_error;
  // Each count's steps passed over ("step 30: ..."), newer than its own whole one.
  std::vector<std::string> passed;
  for (int p : counts) {
    absl::StatusOr<std::optional<int64_t>> step = LatestSoundStep(directory, p, &passed);
    if (!step.ok()) {
      (p == num_stages ? own_error : other_error) = step.status();
      continue;
    }
    if (!step->has_value()) continue;
    const bool newer = !latest || **step > latest->step ||
                       (**step == latest->step && p == num_stages);
    if (newer) latest = CheckpointStep{**step, p};
  }
  if (latest) {
    if (own_error && latest->num_stages != num_stages) {
      // This count's steps are all unusable: say so, not only where it resumes.
      passed_over->push_back(absl::StrCat(num_stages, " stages: ", own_error->message()));
    }
    for (const std::string& why : passed) {  // those newer than where the job resumes
      int64_t step = 0;
      std::vector<std::string> words = absl::StrSplit(why, absl::MaxSplits(absl::ByAnyChar(" :"), 2));
      if (words.size() > 1 && absl::SimpleAtoi(words[1], &step) && step > latest->step) {
        passed_over->push_back(why);
      }
    }
    return latest;
  }
  if (own_error) return *own_error;
  if (other_error) return *other_error;
  return std::optional<CheckpointStep>();
}

absl::StatusOr<std::vector<int64_t>> PruneOtherStageCounts(const std::string& directory,
                                                           int num_stages, int keep,
                                                           const std::set<int64_t>& whole) {
  std::vector<int64_t> removed;
  if (keep <= 0 || static_cast<int>(whole.size()) < keep) return removed;
  const int64_t oldest_kept = *std::prev(whole.end(), keep);
  ASSIGN_OR_RETURN(const std::set<int> counts, StageCounts(directory));
  for (int p : counts) {
    if (p == num_stages) continue;
    ASSIGN_OR_RETURN(std::vector<int64_t> steps, RemoveStepsBefore(directory, p, oldest_kept));
    removed.insert(removed.end(), steps.begin(), steps.end());
  }
  std::sort(removed.begin(), removed.end());
  removed.erase(std::unique(removed.begin(), removed.end()), removed.end());
  return removed;
}

absl::StatusOr<ShardMeta> LoadRecut(const std::string& directory, int64_t step, int from_stages,
                                    GptStage& model, AdamW& optimizer) {
  const std::string where = absl::StrCat("checkpoint ", StepDirectory(directory, step), " (",
                                         from_stages, " stages)");
  // What this stage takes, by name: only these are kept of each shard read.
  std::set<std::string> wanted;
  for (const auto& [name, p] : optimizer.parameters()) wanted.insert(name);
  std::set<std::string> wanted_state;
  for (const auto& [name, t] : optimizer.State()) wanted_state.insert(name);
  std::map<std::string, torch::Tensor> params, state;
  ShardMeta first;
  // The optimizer steps of the shards this stage takes from: a stage that
  // skipped a non-finite step took one step fewer than the others, so they
  // may differ; this stage goes on from the fewest.
  std::optional<int64_t> optimizer_steps;
  for (int s = 0; s < from_stages; ++s) {
    const std::string path = ShardPath(directory, step, s, from_stages);
    ASSIGN_OR_RETURN(ShardParameters shard, ReadShard(path, /*with_optimizer=*/true));
    if (shard.meta.step != step || shard.meta.stage != s ||
        shard.meta.num_stages != from_stages) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " says it is stage ", shard.meta.stage, " of ",
          shard.meta.num_stages, " at step ", shard.meta.step, " (it was replaced while resuming)"));
    }
    if (s == 0) first = shard.meta;
    bool supplies = false;
    for (auto& [name, t] : shard.parameters) {
      if (wanted.count(name) == 0) continue;
      RETURN_IF_ERROR(MergeShardTensor(path, name, std::move(t), params));
      supplies = true;
    }
    for (auto& [name, t] : shard.optimizer_state) {
      if (wanted_state.count(name) > 0) {
        RETURN_IF_ERROR(MergeShardTensor(path, name, std::move(t), state));
      }
    }
    if (supplies) {
      optimizer_steps = std::min(optimizer_steps.value_or(shard.optimizer_steps),
                                 shard.optimizer_steps);
    }
  }
  if (first.config) {
    if (auto difference = ShapeDifference(model->config(), *first.config)) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, " holds a model of another shape: ", *difference));
    }
  }
  const auto take = [&](const std::map<std::string, torch::Tensor>& from, const std::string& name,
                        const torch::Tensor& like, const char* what) -> absl::StatusOr<torch::Tensor> {
    auto it = from.find(name);
    if (it == from.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, " holds no ", what, " ", name, " in any shard"));
    }
    // A split head's rows of the whole (or of the rows the shards held together).
    const torch::Tensor t = StageRowsOf(*model, name, it->second);
    if (t.sizes() != like.sizes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": ", what, " ", name, " has shape ", c10::str(t.sizes()),
          ", this stage's has ", c10::str(like.sizes())));
    }
    return t;
  };
  // Everything is read and checked before anything changes.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> weights;
  for (const auto& [name, p] : optimizer.parameters()) {
    ASSIGN_OR_RETURN(torch::Tensor t, take(params, name, p, "parameter"));
    weights.emplace_back(p, t);
  }
  std::vector<std::pair<std::string, torch::Tensor>> moments;
  for (const auto& [name, t] : optimizer.State()) {
    const bool master = name.rfind("master/", 0) == 0;
    if (master && state.count(name) == 0) {  // written in float32: the weight is the master
      ASSIGN_OR_RETURN(torch::Tensor w, take(params, name.substr(7), t, "parameter"));
      moments.emplace_back(name, w.to(torch::kFloat32));
      continue;
    }
    ASSIGN_OR_RETURN(torch::Tensor saved, take(state, name, t, "optimizer state"));
    moments.emplace_back(name, saved);
  }
  torch::NoGradGuard no_grad;
  for (auto& [p, t] : weights) p.data().copy_(t);
  optimizer.SetState(optimizer_steps.value_or(0), moments);
  return first;
}

}  // namespace paci
