#pragma once

// Internal to the dataset writer (dataset_writer.h): the record a dataset
// folder keeps in kDatasetRecordFile, {"request": ..., "summary": ...}, and
// the check --reuse makes of an existing folder's record.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/data/dataset_writer.h"

namespace paci::dataset_internal {

// What shapes a dataset's tokens: the input files (absolute, with their
// sizes), the tokenizer's options and the shard size.
nlohmann::json DatasetRequest(const DatasetOptions& options,
                              const std::vector<std::string>& files);

// The summary as the record holds it.
nlohmann::json SummaryJson(const DatasetSummary& s);

// With reuse: the summary of the dataset `out` already holds when it was
// made from `request`; nullopt when there is none to keep (no such folder, or
// an empty one); FailedPrecondition for any other folder.
absl::StatusOr<std::optional<DatasetSummary>> KeptDataset(const std::string& out,
                                                         const nlohmann::json& request);

}  // namespace paci::dataset_internal
