#include "worker/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/inference_model.h"

namespace paci {
namespace {

constexpr char kReplacementCharacter[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

absl::Status Validate(const SampleOptions& o) {
  if (o.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens: must be >= 0, got ", o.max_tokens));
  }
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature: must be a number >= 0 (0: greedy), got ", o.temperature));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k: must be >= 0 (0: no limit), got ", o.top_k));
  }
  return absl::OkStatus();
}

// The next token from the logits [1, vocab] of the last position.
int32_t Pick(const torch::Tensor& logits, const SampleOptions& o, at::Generator& generator) {
  torch::Tensor scores = logits.reshape({-1}).to(torch::kDouble);
  if (o.temperature == 0) return static_cast<int32_t>(scores.argmax().item<int64_t>());
  // Shifted by the largest first, so that a tiny temperature gives -Inf, not NaN.
  scores = (scores - scores.max()) / o.temperature;
  if (o.top_k > 0 && o.top_k < scores.size(0)) {
    // Exactly k tokens keep their score, ties or not.
    const torch::Tensor kept = std::get<1>(scores.topk(o.top_k));
    scores = torch::full_like(scores, -std::numeric_limits<double>::infinity())
                 .index_copy(0, kept, scores.index_select(0, kept));
  }
  const torch::Tensor probs = torch::softmax(scores, -1);
  return static_cast<int32_t>(torch::multinomial(probs, 1, false, generator).item<int64_t>());
}

torch::Tensor AsInput(const std::vector<int32_t>& ids) {
  std::vector<int64_t> wide(ids.begin(), ids.end());
  return torch::tensor(wide, torch::kLong).unsqueeze(0);
}

// Feeds the last `keep` of `ids` from an empty cache; the logits of the last.
torch::Tensor Prefill(torch::jit::Module& module, const std::vector<int32_t>& ids, size_t keep,
                      c10::List<torch::Tensor>& k_cache, c10::List<torch::Tensor>& v_cache) {
  k_cache = c10::List<torch::Tensor>();
  v_cache = c10::List<torch::Tensor>();
  const size_t from = ids.size() > keep ? ids.size() - keep : 0;
  return Decode(module, AsInput(std::vector<int32_t>(ids.begin() + from, ids.end())), k_cache,
                v_cache);
}

// Turns the growing token list into text pieces: decodes everything and hands
// on what is new. Decoding the prompt with the rest keeps a word-initial space
// that a tokenizer drops at the start of a text; text ending in U+FFFD may be
// a character whose bytes have not all come yet, so it waits for the next.
class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::vector<int32_t> prompt, const TextCallback& on_text)
      : tokenizer_(tokenizer),
        ids_(std::move(prompt)),
        prompt_size_(ids_.size()),
        prompt_text_(tokenizer.Decode(ids_)),
        shown_(prompt_text_),
        on_text_(on_text) {}

  const std::vector<int32_t>& ids() const { return ids_; }

  void Add(int32_t id, bool last) {
    ids_.push_back(id);
    const std::string text = tokenizer_.Decode(ids_);
    if (!last && absl::EndsWith(text, kReplacementCharacter)) return;
    // Text already shown cannot change; a decoding that rewrites it shows nothing more.
    if (!absl::StartsWith(text, shown_)) return;
    if (on_text_ && text.size() > shown_.size()) {
      on_text_(std::string_view(text).substr(shown_.size()));
    }
    shown_ = text;
  }

  // All the generated text.
  std::string Generated() const {
    const std::string text = tokenizer_.Decode(ids_);
    if (absl::StartsWith(text, prompt_text_)) return text.substr(prompt_text_.size());
    return tokenizer_.Decode(std::vector<int32_t>(ids_.begin() + prompt_size_, ids_.end()));
  }

 private:
  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;  // the prompt's, then the generated ones
  const size_t prompt_size_;
  const std::string prompt_text_;
  std::string shown_;  // the prompt's text and what on_text_ has had
  const TextCallback& on_text_;
};

}  // namespace

absl::StatusOr<std::string> Sample(torch::jit::Module& module, const Tokenizer& tokenizer,
                                   std::string_view prompt, const SampleOptions& options,
                                   const TextCallback& on_text) {
  RETURN_IF_ERROR(Validate(options));
  absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(prompt);
  if (!encoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", encoded.status().message()));
  }
  if (encoded->empty()) {
    return absl::InvalidArgumentError("prompt: is empty; give at least one character");
  }
  torch::NoGradGuard no_grad;
  const size_t seq_len = static_cast<size_t>(module.attr("seq_len").toInt());
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  TextStream stream(tokenizer, *std::move(encoded), on_text);
  try {
    c10::List<torch::Tensor> k_cache, v_cache;
    torch::Tensor logits = Prefill(module, stream.ids(), seq_len, k_cache, v_cache);
    for (int i = 0; i < options.max_tokens; ++i) {
      const int32_t next = Pick(logits, options, generator);
      const bool last = i + 1 == options.max_tokens;
      stream.Add(next, last);
      if (last) break;
      if (static_cast<size_t>(k_cache.get(0).size(2)) >= seq_len) {
        logits =
            Prefill(module, stream.ids(), std::max<size_t>(seq_len - 1, 1), k_cache, v_cache);
      } else {
        logits = Decode(module, AsInput({next}), k_cache, v_cache);
      }
    }
  } catch (const std::exception& e) {  // c10::Error, or TorchScript's
    return absl::InternalError(absl::StrCat("sampling: torch error: ", e.what()));
  }
  return stream.Generated();
}

}  // namespace paci
