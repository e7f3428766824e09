#pragma once

#include <cstdint>

namespace paci {

struct LrScheduleOptions {
  double peak_lr = 3e-4;
  int64_t total_steps = 1;
  double warmup_fraction = 0.01;  // linear warm-up over this share of the steps
  double min_lr_ratio = 0.1;      // cosine decay ends at peak_lr * min_lr_ratio
};

// The learning rate for the optimizer step with 0-based index `step`: linear
// warm-up, then cosine decay. Every stage advances it per local step, so all
// stages follow the same sequence. Pure function.
double LearningRateAt(const LrScheduleOptions& options, int64_t step);

}  // namespace paci
