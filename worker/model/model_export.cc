#include "worker/model/model_export.h"

#include <algorithm>
#include <ostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"

namespace paci {
namespace {

std::string ConfigJson(const GptConfig& c) {
  return absl::StrCat("{\"vocab_size\": ", c.vocab_size, ", \"num_layers\": ", c.num_layers,
                      ", \"d_model\": ", c.d_model, ", \"num_heads\": ", c.num_heads,
                      ", \"seq_len\": ", c.seq_len, "}\n");
}

// A few token ids spread over the vocabulary and the reference's logits for them.
std::string CheckJson(GptStage& reference) {
  const GptConfig& c = reference->config();
  const int64_t length = std::min(c.seq_len, 8);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back((1 + 37 * i) % c.vocab_size);
  torch::NoGradGuard no_grad;
  reference->eval();
  const torch::Tensor logits =
      reference(torch::tensor(ids, torch::kLong).unsqueeze(0)).to(torch::kFloat).contiguous();
  const auto values = logits.accessor<float, 3>();
  std::vector<std::string> rows;
  for (int64_t t = 0; t < length; ++t) {
    std::vector<std::string> row;
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      row.push_back(absl::StrFormat("%.9g", values[0][t][v]));
    }
    rows.push_back(absl::StrCat("[", absl::StrJoin(row, ", "), "]"));
  }
  return absl::StrCat("{\"tokens\": [[", absl::StrJoin(ids, ", "), "]],\n \"logits\": [[\n  ",
                      absl::StrJoin(rows, ",\n  "), "]]}\n");
}

}  // namespace

absl::Status ExportModel(GptStage& reference, const torch::jit::Module& module,
                         const Tokenizer& tokenizer, const std::string& path) {
  const torch::jit::ExtraFilesMap extra_files = {
      {"config.json", ConfigJson(reference->config())},
      {"tokenizer", tokenizer.Serialize()},
      {"check.json", CheckJson(reference)}};
  return WriteFileAtomically(path, [&](std::ostream& out) {
    try {
      module.save(out, extra_files);
    } catch (const c10::Error& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot write ", path, ": ", e.what_without_backtrace()));
    }
    return absl::OkStatus();
  });
}

}  // namespace paci
