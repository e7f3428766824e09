#pragma once

// A model written for use outside paci: TorchScript that torch.jit.load (Python)
// or torch::jit::load (C++) runs without paci.

#include <string>

#include <torch/script.h>

#include "absl/status/status.h"
#include "worker/data/tokenizer.h"
#include "worker/model/gpt.h"

namespace paci {

// Writes `module` (BuildInferenceModule of `reference`) to `path` with
// torch::jit::Module::save and three extra files:
//   config.json  {"vocab_size": V, "num_layers": L, "d_model": D, "num_heads": H, "seq_len": T}
//   tokenizer    the tokenizer's Serialize() bytes (ParseTokenizer reads them)
//   check.json   {"tokens": [[ids]], "logits": [[[...]]]}: a few token ids and the
//                logits that `reference`, paci's training model, gives them, so
//                anyone can check that the export computes the same.
// Written with WriteFileAtomically: nothing half-written stays at `path`, and
// a file there is replaced only by a whole export. Unavailable naming the path
// when it cannot be written. Blocks.
absl::Status ExportModel(GptStage& reference, const torch::jit::Module& module,
                         const Tokenizer& tokenizer, const std::string& path);

}  // namespace paci
