#include "worker/runtime/checkpoint_layout.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace paci {
namespace fs = std::filesystem;

std::string StepDirectory(const std::string& directory, int64_t step) {
  return (fs::path(directory) / absl::StrFormat("step-%08d", step)).string();
}

std::string ShardPath(const std::string& directory, int64_t step, int stage, int num_stages) {
  return (fs::path(StepDirectory(directory, step)) /
          absl::StrCat("stage-", stage, "-of-", num_stages, ".pt"))
      .string();
}

absl::StatusOr<std::vector<int64_t>> CompleteSteps(const std::string& directory, int num_stages) {
  std::error_code ec;
  std::vector<int64_t> steps;
  if (!fs::is_directory(directory, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    bool complete = true;
    for (int s = 0; s < num_stages && complete; ++s) {
      // A shard not (yet) written is an incomplete step, not an error: its
      // own error code, so it does not fail the listing (libstdc++ sets ENOENT).
      std::error_code missing;
      complete = fs::is_regular_file(ShardPath(directory, step, s, num_stages), missing);
    }
    if (complete) steps.push_back(step);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint.directory: cannot list ", directory, ": ", ec.message()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::optional<int64_t>> LatestCompleteStep(const std::string& directory,
                                                          int num_stages) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, CompleteSteps(directory, num_stages));
  if (steps.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(steps.back());
}

absl::StatusOr<std::vector<int64_t>> RemoveStepsBefore(const std::string& directory,
                                                       int num_stages, int64_t oldest_kept) {
  std::vector<int64_t> pruned;
  std::error_code ec;
  std::vector<int64_t> older;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (absl::StartsWith(name, "step-") && absl::SimpleAtoi(name.substr(5), &step) &&
        step < oldest_kept) {
      older.push_back(step);
    }
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint.directory: cannot list ", directory, ": ", ec.message()));
  }
  std::sort(older.begin(), older.end());
  // This stage count's shards, "stage-S-of-P.pt" and "stage-S-of-P.pt.tmp.*".
  const std::string ours = absl::StrCat("-of-", num_stages, ".pt");
  for (int64_t step : older) {
    const std::string folder = StepDirectory(directory, step);
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      const std::string name = entry.path().filename().string();
      if (absl::StartsWith(name, "stage-") && absl::StrContains(name, ours)) {
        files.push_back(entry.path());
      }
    }
    ec.clear();
    for (const fs::path& file : files) {
      std::error_code gone;  // another stage pruning at once may have removed it: not an error
      fs::remove(file, gone);
      if (gone) {
        return absl::UnavailableError(absl::StrCat("checkpoint.keep: cannot remove ",
                                                   file.string(), ": ", gone.message()));
      }
    }
    std::error_code not_empty;  // files of another stage count stay, and their folder
    fs::remove(folder, not_empty);
    if (!files.empty()) pruned.push_back(step);
  }
  return pruned;
}

bool HoldsCheckpoints(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return false;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    if (absl::StartsWith(entry.path().filename().string(), "step-")) return true;
  }
  return false;
}

namespace {

// P of a shard name "stage-S-of-P.pt", nullopt for any other name.
std::optional<int> StageCountOf(const std::string& name) {
  if (!absl::StartsWith(name, "stage-") || !absl::EndsWith(name, ".pt")) return std::nullopt;
  const std::vector<std::string> parts =
      absl::StrSplit(name.substr(6, name.size() - 9), "-of-");
  int stage, num_stages;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &stage) ||
      !absl::SimpleAtoi(parts[1], &num_stages) || num_stages < 1) {
    return std::nullopt;
  }
  return num_stages;
}

// The stage counts of the shards in each step-* folder, by step.
absl::StatusOr<std::map<int64_t, std::set<int>>> StageCountsByStep(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", directory, " does not exist"));
  }
  std::map<int64_t, std::set<int>> counts;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    std::set<int>& seen = counts[step];
    std::error_code inner;
    for (const auto& shard : fs::directory_iterator(entry.path(), inner)) {
      if (auto p = StageCountOf(shard.path().filename().string())) seen.insert(*p);
    }
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint ", directory, ": cannot list it: ", ec.message()));
  }
  if (counts.empty()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", directory, " holds no checkpoint (no step-* folder)"));
  }
  return counts;
}

}  // namespace

absl::StatusOr<std::set<int>> StageCounts(const std::string& directory) {
  absl::StatusOr<std::map<int64_t, std::set<int>>> counts = StageCountsByStep(directory);
  if (absl::IsNotFound(counts.status())) return std::set<int>();
  if (!counts.ok()) return counts.status();
  std::set<int> all;
  for (const auto& [step, stage_counts] : *counts) all.insert(stage_counts.begin(), stage_counts.end());
  return all;
}

absl::StatusOr<CheckpointStep> FindLatestCheckpoint(const std::string& directory) {
  ASSIGN_OR_RETURN(const auto counts, StageCountsByStep(directory));
  std::set<int> all_counts;
  for (const auto& [step, stage_counts] : counts) {
    all_counts.insert(stage_counts.begin(), stage_counts.end());
  }
  std::optional<CheckpointStep> latest;
  for (int p : all_counts) {
    ASSIGN_OR_RETURN(std::optional<int64_t> complete, LatestCompleteStep(directory, p));
    if (!complete || (latest && *complete < latest->step)) continue;
    if (latest && *complete == latest->step) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", StepDirectory(directory, *complete), " holds complete checkpoints of ",
          latest->num_stages, " and of ", p, " stages: keep one"));
    }
    latest = CheckpointStep{*complete, p};
  }
  if (latest) return *latest;
  // No step is complete: name what the latest one lacks.
  const auto& [step, stage_counts] = *counts.rbegin();
  const int p = stage_counts.empty() ? 1 : *stage_counts.rbegin();
  for (int s = 0; s < p; ++s) {
    const std::string path = ShardPath(directory, step, s, p);
    std::error_code missing;
    if (!fs::is_regular_file(path, missing)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", directory, " has no complete step: shard ", path, " is missing"));
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("checkpoint ", directory, " has no complete step"));
}

}  // namespace paci
