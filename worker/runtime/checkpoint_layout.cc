#include "worker/runtime/checkpoint_layout.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"

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

absl::StatusOr<std::optional<int64_t>> LatestCompleteStep(const std::string& directory,
                                                          int num_stages) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return std::optional<int64_t>();
  std::optional<int64_t> latest;
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
    if (complete && (!latest || step > *latest)) latest = step;
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("checkpoint.directory: cannot list ", directory, ": ", ec.message()));
  }
  return latest;
}

bool HoldsCheckpoints(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return false;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    if (absl::StartsWith(entry.path().filename().string(), "step-")) return true;
  }
  return false;
}

}  // namespace paci
