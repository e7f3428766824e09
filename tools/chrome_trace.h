#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "paci/v1/stage.pb.h"

namespace paci {

// "forward", "backward", "optimizer_step", "send", "idle", "eval",
// "checkpoint", "all_reduce"; "unspecified" otherwise.
std::string SpanKindName(v1::Span::Kind kind);

// The timeline of a run as a Chrome trace (the JSON object format that
// ui.perfetto.dev, chrome://tracing and speedscope open): one complete event
// (ph "X") per span with pid 1 (the job, named by a process_name event),
// tid = the index in spans_by_stage (named by thread_name events "stage S",
// or thread_names[tid] when given, e.g. "stage 1 replica 0"; sorted by tid),
// name = the span kind, ts and dur in microseconds since the earliest span of
// any stage, and the micro-batch id or step in args. otherData holds the job
// name, the Unix time of ts = 0 and the spans each stage dropped.
//
// `spans_by_stage[s]` are stage s's spans in the order recorded; spans with
// end before start are written with dur 0. Pure.
std::string ChromeTraceJson(const std::string& job_name,
                            const std::vector<std::vector<v1::Span>>& spans_by_stage,
                            const std::vector<int64_t>& dropped_by_stage = {},
                            const std::vector<std::string>& thread_names = {});

// Writes ChromeTraceJson to `path` (creating its folder). Unavailable naming
// the path when it cannot be written.
absl::Status WriteChromeTrace(const std::string& path, const std::string& job_name,
                              const std::vector<std::vector<v1::Span>>& spans_by_stage,
                              const std::vector<int64_t>& dropped_by_stage = {},
                              const std::vector<std::string>& thread_names = {});

}  // namespace paci
