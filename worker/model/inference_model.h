#pragma once

// The GPT for inference as a TorchScript module: what `paci_model` samples
// with and what it exports, so an export runs in any LibTorch or PyTorch
// (torch.jit.load) without paci. Includes Torch: worker/ code only.
//
// The module's methods (TorchScript, written in inference_model.cc):
//
//   forward(idx: Tensor[B, T] int64) -> Tensor[B, T, vocab]
//       the logits at every position, the same math as GptStage in eval mode;
//   decode(idx: Tensor[B, T], k_cache: List[Tensor], v_cache: List[Tensor])
//       -> (Tensor[B, vocab], List[Tensor], List[Tensor])
//       the logits of the last position of idx and the caches with idx's
//       keys and values appended: one [B, kv_heads, positions, d_model/heads]
//       tensor per layer, or empty lists to start. idx's positions follow the
//       cached ones; more than seq_len positions in all is an error.
//
// Its parameters keep GptStage's global names ("h3.attn.qkv.weight") and its
// int attributes vocab_size, num_layers, d_model, num_heads, num_kv_heads,
// ffn_hidden_size and seq_len, float attributes norm_eps and rope_theta and
// the string attribute architecture ("gpt2" or "llama") say its shape.

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "worker/model/gpt.h"

namespace paci {

// The inference module of `model`, which must hold the whole GPT (one stage
// of one; InvalidArgument otherwise). Its parameters share `model`'s
// storage (detached: no gradients). InvalidArgument with TorchScript's reason
// if the methods do not compile (a bug, not an input error).
absl::StatusOr<torch::jit::Module> BuildInferenceModule(GptStage& model);

// Calls the module's decode method: the logits of the last position [B, vocab],
// with `k_cache` and `v_cache` replaced by the extended caches. Throws a
// std::exception for bad input (c10::Error, or TorchScript's exception for
// caches of the wrong length or more than seq_len positions).
torch::Tensor Decode(torch::jit::Module& module, const torch::Tensor& idx,
                     c10::List<torch::Tensor>& k_cache, c10::List<torch::Tensor>& v_cache);

}  // namespace paci
