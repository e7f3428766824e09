#pragma once

// Text from an inference module (inference_model.h): the prompt through the
// tokenizer, then one token at a time with the key/value cache.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace paci {

struct SampleOptions {
  int max_tokens = 200;      // tokens to generate, >= 0
  double temperature = 1.0;  // >= 0; 0: always the most likely token (greedy)
  int top_k = 0;             // >= 0; draw among the k most likely tokens only; 0: all
  uint64_t seed = 1;         // the draws' generator: the same seed gives the same text
};

// Called with each piece of new text as it is generated.
using TextCallback = std::function<void(std::string_view)>;

// Generates options.max_tokens tokens after `prompt` and returns their text.
// When the context reaches the module's seq_len it keeps the last seq_len - 1
// tokens and rebuilds the cache. `on_text` (may be null) receives the text as
// it grows: after each token, what decoding everything so far adds (so a
// character of several byte tokens comes whole, once complete).
// InvalidArgument naming the option out of range, for an empty prompt, or with
// the tokenizer's reason (a character a char tokenizer does not know);
// Internal for a torch error. Blocks while it computes.
absl::StatusOr<std::string> Sample(torch::jit::Module& module, const Tokenizer& tokenizer,
                                   std::string_view prompt, const SampleOptions& options,
                                   const TextCallback& on_text);

}  // namespace paci
