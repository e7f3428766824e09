#include "tools/chrome_trace.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/text_formats.h"

namespace paci {

std::string SpanKindName(v1::Span::Kind kind) {
  switch (kind) {
    case v1::Span::FORWARD: return "forward";
    case v1::Span::BACKWARD: return "backward";
    case v1::Span::OPTIMIZER_STEP: return "optimizer_step";
    case v1::Span::SEND: return "send";
    case v1::Span::IDLE: return "idle";
    case v1::Span::EVAL: return "eval";
    case v1::Span::CHECKPOINT: return "checkpoint";
    case v1::Span::ALL_REDUCE: return "all_reduce";
    default: return "unspecified";
  }
}

std::string ChromeTraceJson(const std::string& job_name,
                            const std::vector<std::vector<v1::Span>>& spans_by_stage,
                            const std::vector<int64_t>& dropped_by_stage,
                            const std::vector<std::string>& thread_names) {
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& spans : spans_by_stage) {
    for (const v1::Span& span : spans) origin = std::min(origin, span.start_unix_micros());
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;

  std::string out;
  absl::StrAppend(&out, "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"job\": ",
                  JsonString(job_name), ", \"origin_unix_micros\": ", origin,
                  ", \"spans_dropped\": [");
  for (size_t s = 0; s < dropped_by_stage.size(); ++s) {
    absl::StrAppend(&out, s > 0 ? ", " : "", dropped_by_stage[s]);
  }
  absl::StrAppend(&out, "]},\n\"traceEvents\": [\n");
  absl::StrAppend(&out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
                        "\"args\": {\"name\": ",
                  JsonString(absl::StrCat("job ", job_name)), "}}");
  for (size_t s = 0; s < spans_by_stage.size(); ++s) {
    const std::string name =
        s < thread_names.size() ? thread_names[s] : absl::StrCat("stage ", s);
    absl::StrAppendFormat(&out,
                          ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
                          "\"args\": {\"name\": %s}}",
                          s, JsonString(name));
    absl::StrAppendFormat(&out,
                          ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, "
                          "\"tid\": %d, \"args\": {\"sort_index\": %d}}",
                          s, s);
  }
  for (size_t s = 0; s < spans_by_stage.size(); ++s) {
    for (const v1::Span& span : spans_by_stage[s]) {
      const std::string name = SpanKindName(span.kind());
      const int64_t dur = std::max<int64_t>(span.end_unix_micros() - span.start_unix_micros(), 0);
      absl::StrAppend(&out, ",\n{\"name\": \"", name, "\", \"cat\": \"", name,
                      "\", \"ph\": \"X\", \"pid\": 1, \"tid\": ", s,
                      ", \"ts\": ", span.start_unix_micros() - origin, ", \"dur\": ", dur,
                      ", \"args\": {");
      if (span.has_micro_batch_id()) absl::StrAppend(&out, "\"micro_batch\": ", span.micro_batch_id());
      if (span.has_step()) {
        absl::StrAppend(&out, span.has_micro_batch_id() ? ", " : "", "\"step\": ", span.step());
      }
      absl::StrAppend(&out, "}}");
    }
  }
  absl::StrAppend(&out, "\n]}\n");
  return out;
}

absl::Status WriteChromeTrace(const std::string& path, const std::string& job_name,
                              const std::vector<std::vector<v1::Span>>& spans_by_stage,
                              const std::vector<int64_t>& dropped_by_stage,
                              const std::vector<std::string>& thread_names) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  std::ofstream file(path, std::ios::trunc);
  file << ChromeTraceJson(job_name, spans_by_stage, dropped_by_stage, thread_names);
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write the trace to ", path));
  return absl::OkStatus();
}

}  // namespace paci
