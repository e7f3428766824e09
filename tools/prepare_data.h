#pragma once

// `pacictl prepare-data`: WriteDataset (worker/data/dataset_writer.h) with a
// progress bar and a closing line.

#include <ostream>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/data/dataset_writer.h"

namespace paci {

struct PrepareDataOptions : DatasetOptions {
  // The progress bar and the final line; nullptr: silent.
  std::ostream* progress = nullptr;
  bool redraw_in_place = false;  // redraw the bar with '\r' (a terminal)
  absl::Duration progress_interval = absl::Seconds(5);  // otherwise a line this often
  // When set, the closing lines, or the error, are written to this file too:
  // a pod's terminationMessagePath, where its status shows them.
  std::string message_file;
};
using PrepareDataResult = DatasetSummary;

// Writes the dataset, drawing its progress on options.progress; errors as
// WriteDataset's (or Unavailable when a dataset was made but message_file could not be written).
absl::StatusOr<PrepareDataResult> PrepareData(const PrepareDataOptions& options);

}  // namespace paci
