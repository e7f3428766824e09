#include "worker/data/dataset_record.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paci::dataset_internal {
namespace {

namespace fs = std::filesystem;

// The first field of two requests that differs, as "KEY: THERE there, HERE here".
std::string FirstDifference(const nlohmann::json& there, const nlohmann::json& here) {
  const auto shown = [](const nlohmann::json& value) {
    std::string text = value.dump();
    return text.size() > 160 ? text.substr(0, 157) + "..." : text;
  };
  for (auto it = here.begin(); it != here.end(); ++it) {
    const nlohmann::json& before = there.contains(it.key()) ? there[it.key()] : nlohmann::json();
    if (before == it.value()) continue;
    if (it.key() == "inputs" && before.is_array()) {
      for (size_t i = 0; i < std::max(before.size(), it.value().size()); ++i) {
        const nlohmann::json a = i < before.size() ? before[i] : nlohmann::json();
        const nlohmann::json b = i < it.value().size() ? it.value()[i] : nlohmann::json();
        if (a != b) return absl::StrCat("input ", i + 1, ": ", shown(a), " there, ", shown(b), " here");
      }
    }
    return absl::StrCat(it.key(), ": ", shown(before), " there, ", shown(it.value()), " here");
  }
  return "the record differs";
}

}  // namespace

nlohmann::json DatasetRequest(const DatasetOptions& options,
                              const std::vector<std::string>& files) {
  std::error_code error;
  const auto file = [&](const std::string& path) {
    return nlohmann::json::array(
        {fs::absolute(path).lexically_normal().string(),
         static_cast<int64_t>(fs::file_size(path, error))});
  };
  nlohmann::json inputs = nlohmann::json::array();
  for (const std::string& path : files) inputs.push_back(file(path));
  return {{"inputs", inputs},
          {"text_field", options.text_field},
          {"skip_bad_lines", options.skip_bad_lines},
          {"tokenizer", options.tokenizer.empty() ? "char" : options.tokenizer},
          {"tokenizer_model",
           options.tokenizer_model.empty() ? nlohmann::json() : file(options.tokenizer_model)},
          {"tokenizer_json",
           options.tokenizer_json.empty() ? nlohmann::json() : file(options.tokenizer_json)},
          {"vocab_size", options.vocab_size},
          {"shard_tokens", options.shard_tokens}};
}

nlohmann::json SummaryJson(const DatasetSummary& s) {
  return {{"tokenizer_kind", s.tokenizer_kind}, {"vocab_size", s.vocab_size},
          {"shards", s.shards},                 {"tokens", s.tokens},
          {"bytes", s.bytes},                   {"skipped_lines", s.skipped_lines}};
}

absl::StatusOr<std::optional<DatasetSummary>> KeptDataset(const std::string& out,
                                                         const nlohmann::json& request) {
  std::error_code error;
  if (!fs::exists(out, error) || (fs::is_directory(out, error) && fs::is_empty(out, error))) {
    return std::nullopt;
  }
  const auto refuse = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--out: ", out, " ", why, "; remove it or choose another --out; nothing was written"));
  };
  std::ifstream in(fs::path(out) / kDatasetRecordFile);
  if (!in) {
    return refuse(absl::StrCat("exists and holds no ", kDatasetRecordFile,
                               " (not a dataset, or one made before datasets recorded how)"));
  }
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("request") || !record.contains("summary") ||
      !record["summary"].is_object()) {
    return refuse(absl::StrCat("holds a ", kDatasetRecordFile, " that is not a dataset record"));
  }
  if (record["request"] != request) {
    return refuse(absl::StrCat("holds a dataset made from another request (",
                               FirstDifference(record["request"], request), ")"));
  }
  const nlohmann::json& s = record["summary"];
  DatasetSummary summary;
  summary.tokenizer_kind = s.value("tokenizer_kind", "");
  summary.vocab_size = s.value("vocab_size", 0);
  summary.shards = s.value("shards", int64_t{0});
  summary.tokens = s.value("tokens", int64_t{0});
  summary.bytes = s.value("bytes", int64_t{0});
  summary.skipped_lines = s.value("skipped_lines", int64_t{0});
  summary.reused = true;
  return summary;
}

}  // namespace paci::dataset_internal
