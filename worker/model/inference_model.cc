#include "worker/model/inference_model.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace paci {
namespace {

// One gpt2 block, pre-LN: x + attn(ln1(x)), then x + proj(gelu(fc(ln2(x)))), as
// BlockImpl and CausalSelfAttentionImpl compute it (the attention written out,
// the same function as their fused one up to rounding; GELU without
// approximation is torch::nn's default), with the keys and values of earlier
// positions (past_k, past_v: [B, H, P, D/H]) in front of this call's.
constexpr char kGpt2BlockSource[] = R"(
def step(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    B = x.size(0)
    T = x.size(1)
    D = x.size(2)
    H = self.num_heads
    P = past_k.size(2)
    h = torch.layer_norm(x, [D], self.ln1.weight, self.ln1.bias, self.norm_eps)
    qkv = torch.linear(h, self.attn.qkv.weight, self.attn.qkv.bias)
    qkv = qkv.view([B, T, 3, H, D // H]).permute([2, 0, 3, 1, 4])
    q = qkv[0]
    k = torch.cat([past_k, qkv[1]], 2)
    v = torch.cat([past_v, qkv[2]], 2)
    att = torch.matmul(q, k.transpose(-2, -1)) / self.head_scale
    rows = torch.arange(P, P + T, device=x.device).unsqueeze(1)
    cols = torch.arange(0, P + T, device=x.device).unsqueeze(0)
    att = torch.softmax(att.masked_fill(cols > rows, float("-inf")), -1)
    y = torch.matmul(att, v).transpose(1, 2).contiguous().view([B, T, D])
    x = x + torch.linear(y, self.attn.proj.weight, self.attn.proj.bias)
    h = torch.layer_norm(x, [D], self.ln2.weight, self.ln2.bias, self.norm_eps)
    h = torch.gelu(torch.linear(h, self.fc.weight, self.fc.bias))
    return x + torch.linear(h, self.proj.weight, self.proj.bias), k, v
)";

// One llama block: x + attn(rms1(x)) with rotary queries and keys and
// grouped-query attention, then x + proj(silu(gate) * up) with [gate; up] =
// fc(rms2(x)), as BlockImpl computes it. The caches hold the rotated keys of
// the num_kv_heads heads: [B, KV, P, D/H].
constexpr char kLlamaBlockSource[] = R"(
def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.norm_eps)
    return weight * normed.to(x.dtype)

def _rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)

def step(self, x: Tensor, past_k: Tensor, past_v: Tensor, cos: Tensor,
         sin: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    B = x.size(0)
    T = x.size(1)
    D = x.size(2)
    H = self.num_heads
    KV = self.num_kv_heads
    S = D // H
    P = past_k.size(2)
    qkv = torch.linear(self._rms(x, self.ln1.weight), self.attn.qkv.weight)
    q = qkv[:, :, : H * S].reshape([B, T, H, S]).transpose(1, 2)
    k = qkv[:, :, H * S : (H + KV) * S].reshape([B, T, KV, S]).transpose(1, 2)
    v = qkv[:, :, (H + KV) * S :].reshape([B, T, KV, S]).transpose(1, 2)
    q = self._rotate(q, cos, sin)
    k = torch.cat([past_k, self._rotate(k, cos, sin)], 2)
    v = torch.cat([past_v, v], 2)
    kk = k.repeat_interleave(H // KV, 1)
    vv = v.repeat_interleave(H // KV, 1)
    att = torch.matmul(q, kk.transpose(-2, -1)) / self.head_scale
    rows = torch.arange(P, P + T, device=x.device).unsqueeze(1)
    cols = torch.arange(0, P + T, device=x.device).unsqueeze(0)
    att = torch.softmax(att.masked_fill(cols > rows, float("-inf")), -1)
    y = torch.matmul(att, vv).transpose(1, 2).contiguous().view([B, T, D])
    x = x + torch.linear(y, self.attn.proj.weight)
    gate_up = torch.linear(self._rms(x, self.ln2.weight), self.fc.weight).chunk(2, -1)
    h = torch.silu(gate_up[0]) * gate_up[1]
    return x + torch.linear(h, self.proj.weight), k, v
)";

// The model around the blocks: {embed} makes x (and llama's rotary tables),
// {blocks} is one call per block, {final_norm} the norm before the head.
constexpr char kModelSource[] = R"(
def _run(self, idx: Tensor, k_cache: List[Tensor],
         v_cache: List[Tensor]) -> Tuple[Tensor, List[Tensor], List[Tensor]]:
    assert len(k_cache) == len(v_cache), "decode: k_cache and v_cache differ in length"
    assert len(k_cache) == 0 or len(k_cache) == self.num_layers, "decode: one cache per layer"
    start = 0
    if len(k_cache) > 0:
        start = k_cache[0].size(2)
    T = idx.size(1)
    assert start + T <= self.seq_len, "decode: more positions than seq_len"
    positions = torch.arange(start, start + T, device=idx.device)
{embed}
    past_k = k_cache
    past_v = v_cache
    if len(k_cache) == 0:
        head_size = self.d_model // self.num_heads
        empty = self.wte.weight.new_zeros([idx.size(0), self.num_kv_heads, 0, head_size])
        past_k = [empty for _ in range(self.num_layers)]
        past_v = [empty for _ in range(self.num_layers)]
    new_k: List[Tensor] = []
    new_v: List[Tensor] = []
{blocks}
    return x, new_k, new_v

def _logits(self, x: Tensor) -> Tensor:
    return torch.linear({final_norm}, self.head.weight)

def forward(self, idx: Tensor) -> Tensor:
    x, k, v = self._run(idx, [], [])
    return self._logits(x)

def decode(self, idx: Tensor, k_cache: List[Tensor],
           v_cache: List[Tensor]) -> Tuple[Tensor, List[Tensor], List[Tensor]]:
    x, k, v = self._run(idx, k_cache, v_cache)
    return self._logits(x[:, -1, :]), k, v
)";

constexpr char kGpt2Embed[] =
    "    x = torch.embedding(self.wte.weight, idx) + torch.embedding(self.wpe.weight, positions)";
constexpr char kGpt2FinalNorm[] =
    "torch.layer_norm(x, [self.d_model], self.ln_f.weight, self.ln_f.bias, self.norm_eps)";
// The rotary tables as RotaryTables (gpt.cc) makes them.
constexpr char kLlamaEmbed[] = R"(    x = torch.embedding(self.wte.weight, idx)
    S = self.d_model // self.num_heads
    exponents = torch.arange(0, S, 2, device=idx.device).float() / S
    inv_freq = 1.0 / torch.pow(self.rope_theta, exponents)
    angles = torch.outer(positions.float(), inv_freq)
    angles = torch.cat([angles, angles], -1)
    cos = angles.cos()
    sin = angles.sin())";
constexpr char kLlamaFinalNorm[] = "self.h0._rms(x, self.ln_f.weight)";

std::string BlockCalls(const GptConfig& c) {
  const char* rotary = c.llama() ? ", cos, sin" : "";
  std::string calls;
  for (int b = 0; b < c.num_layers; ++b) {
    absl::StrAppend(&calls, "    x, k, v = self.h", b, ".step(x, past_k[", b, "], past_v[", b,
                    "]", rotary, ")\n    new_k.append(k)\n    new_v.append(v)\n");
  }
  return calls;
}

// A module of its own class in `unit`, in eval mode: the "training" attribute
// that every module made by PyTorch has, so Python's train() and eval() work.
torch::jit::Module NewModule(const char* name,
                             const std::shared_ptr<torch::jit::CompilationUnit>& unit) {
  torch::jit::Module module(c10::QualifiedName(name), unit, /*shouldMangle=*/true);
  module.register_attribute("training", c10::BoolType::get(), false);
  return module;
}

// Builds the submodule tree of the dotted parameter names under `root`
// ("h3.attn.qkv.weight": modules h3, h3.attn, h3.attn.qkv, parameter weight).
void RegisterParameters(GptStage& model, torch::jit::Module& root,
                        const std::shared_ptr<torch::jit::CompilationUnit>& unit,
                        std::map<std::string, torch::jit::Module>& modules) {
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const std::vector<std::string> parts = absl::StrSplit(item.key(), '.');
    torch::jit::Module parent = root;
    std::string path;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      path = path.empty() ? parts[i] : absl::StrCat(path, ".", parts[i]);
      auto found = modules.find(path);
      if (found == modules.end()) {
        torch::jit::Module child = NewModule("__torch__.paci.GptPart", unit);
        parent.register_module(parts[i], child);
        found = modules.emplace(path, child).first;
      }
      parent = found->second;
    }
    parent.register_parameter(parts.back(), item.value().detach(), /*is_buffer=*/false);
  }
}

}  // namespace

absl::StatusOr<torch::jit::Module> BuildInferenceModule(GptStage& model) {
  const GptConfig& c = model->config();
  const StagePartition& partition = model->partition();
  if (!partition.has_embedding() || !partition.has_head()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an inference module needs the whole model, this stage holds units ",
        partition.Describe()));
  }
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module root = NewModule("__torch__.paci.Gpt", unit);
  std::map<std::string, torch::jit::Module> modules;
  RegisterParameters(model, root, unit, modules);
  const std::vector<std::pair<const char*, int>> shape = {
      {"vocab_size", c.vocab_size}, {"num_layers", c.num_layers},
      {"d_model", c.d_model},       {"num_heads", c.num_heads},
      {"num_kv_heads", c.kv_heads()}, {"ffn_hidden_size", c.ffn()},
      {"seq_len", c.seq_len}};
  for (const auto& [name, value] : shape) {
    root.register_attribute(name, c10::IntType::get(), static_cast<int64_t>(value));
  }
  root.register_attribute("architecture", c10::StringType::get(),
                          std::string(ArchitectureName(c.architecture)));
  root.register_attribute("norm_eps", c10::FloatType::get(), c.norm_eps);
  root.register_attribute("rope_theta", c10::FloatType::get(), c.rope_theta);
  try {
    for (int b = 0; b < c.num_layers; ++b) {
      torch::jit::Module& block = modules.at(absl::StrCat("h", b));
      block.register_attribute("num_heads", c10::IntType::get(), static_cast<int64_t>(c.num_heads));
      block.register_attribute("num_kv_heads", c10::IntType::get(),
                               static_cast<int64_t>(c.kv_heads()));
      block.register_attribute("norm_eps", c10::FloatType::get(), c.norm_eps);
      // The divisor of the training model's attention scores: sqrt(D / H) in double.
      block.register_attribute("head_scale", c10::FloatType::get(),
                               std::sqrt(static_cast<double>(c.head_size())));
      block.define(c.llama() ? kLlamaBlockSource : kGpt2BlockSource);
    }
    const std::string source = absl::StrReplaceAll(
        kModelSource, {{"{embed}", c.llama() ? kLlamaEmbed : kGpt2Embed},
                       {"{blocks}\n", BlockCalls(c)},
                       {"{final_norm}", c.llama() ? kLlamaFinalNorm : kGpt2FinalNorm}});
    root.define(source);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the inference module does not compile: ", e.what_without_backtrace()));
  }
  return root;
}

torch::Tensor Decode(torch::jit::Module& module, const torch::Tensor& idx,
                     c10::List<torch::Tensor>& k_cache, c10::List<torch::Tensor>& v_cache) {
  const auto result = module.get_method("decode")({idx, k_cache, v_cache}).toTuple();
  k_cache = result->elements()[1].toTensorList();
  v_cache = result->elements()[2].toTensorList();
  return result->elements()[0].toTensor();
}

}  // namespace paci
