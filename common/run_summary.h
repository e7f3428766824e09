#pragma once

// A coordinator job as the run summary says it (paci.v1.RunSummary): its
// settings (schedule, shape, method, global batch, steps), whether it
// succeeded, its losses and throughput. Pure; the per-stage part and the
// partition are tools/job_view.h's (SummaryOfJob, which builds on this).

#include "paci/v1/coordinator.pb.h"
#include "paci/v1/summary.pb.h"

namespace paci {

v1::RunSummary RunSummaryOfJob(const v1::Job& job);

}  // namespace paci
