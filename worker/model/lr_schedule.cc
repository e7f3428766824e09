#include "worker/model/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace paci {

double LearningRateAt(const LrScheduleOptions& o, int64_t step) {
  const int64_t warmup = static_cast<int64_t>(std::ceil(o.warmup_fraction * o.total_steps));
  if (step < warmup) return o.peak_lr * static_cast<double>(step + 1) / warmup;
  const double span = std::max<int64_t>(1, o.total_steps - warmup);
  const double progress = std::min(1.0, (step - warmup) / span);
  const double min_lr = o.peak_lr * o.min_lr_ratio;
  return min_lr + (o.peak_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace paci
