#include "worker/model/inference_model.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace paci {
namespace {

// One block, pre-LN: x + attn(ln1(x)), then x + proj(gelu(fc(ln2(x)))), as
// BlockImpl and CausalSelfAttentionImpl compute it (the attention written out,
// the same function as their fused one up to rounding; LayerNorm's eps and GELU
// without approximation are torch::nn's defaults), with the keys and values of earlier positions
// (past_k, past_v: [B, H, P, D/H]) in front of this call's.
constexpr char kBlockSource[] = R"(
def step(self, x: Tensor, past_k: Tensor, past_v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    B = x.size(0)
    T = x.size(1)
    D = x.size(2)
    H = self.num_heads
    P = past_k.size(2)
    h = torch.layer_norm(x, [D], self.ln1.weight, self.ln1.bias, 1e-05)
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
    h = torch.layer_norm(x, [D], self.ln2.weight, self.ln2.bias, 1e-05)
    h = torch.gelu(torch.linear(h, self.fc.weight, self.fc.bias))
    return x + torch.linear(h, self.proj.weight, self.proj.bias), k, v
)";

// The model around the blocks; {blocks} is replaced by one call per block.
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
    x = torch.embedding(self.wte.weight, idx) + torch.embedding(self.wpe.weight, positions)
    past_k = k_cache
    past_v = v_cache
    if len(k_cache) == 0:
        head_size = self.d_model // self.num_heads
        empty = self.wte.weight.new_zeros([idx.size(0), self.num_heads, 0, head_size])
        past_k = [empty for _ in range(self.num_layers)]
        past_v = [empty for _ in range(self.num_layers)]
    new_k: List[Tensor] = []
    new_v: List[Tensor] = []
{blocks}
    return x, new_k, new_v

def _logits(self, x: Tensor) -> Tensor:
    x = torch.layer_norm(x, [self.d_model], self.ln_f.weight, self.ln_f.bias, 1e-05)
    return torch.linear(x, self.head.weight, self.head.bias)

def forward(self, idx: Tensor) -> Tensor:
    x, k, v = self._run(idx, [], [])
    return self._logits(x)

def decode(self, idx: Tensor, k_cache: List[Tensor],
           v_cache: List[Tensor]) -> Tuple[Tensor, List[Tensor], List[Tensor]]:
    x, k, v = self._run(idx, k_cache, v_cache)
    return self._logits(x[:, -1, :]), k, v
)";

std::string BlockCalls(int num_layers) {
  std::string calls;
  for (int b = 0; b < num_layers; ++b) {
    absl::StrAppend(&calls, "    x, k, v = self.h", b, ".step(x, past_k[", b, "], past_v[", b,
                    "])\n    new_k.append(k)\n    new_v.append(v)\n");
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
      {"vocab_size", c.vocab_size}, {"num_layers", c.num_layers}, {"d_model", c.d_model},
      {"num_heads", c.num_heads},   {"seq_len", c.seq_len}};
  for (const auto& [name, value] : shape) {
    root.register_attribute(name, c10::IntType::get(), static_cast<int64_t>(value));
  }
  try {
    for (int b = 0; b < c.num_layers; ++b) {
      torch::jit::Module& block = modules.at(absl::StrCat("h", b));
      block.register_attribute("num_heads", c10::IntType::get(), static_cast<int64_t>(c.num_heads));
      // The divisor of the training model's attention scores: sqrt(D / H) in double.
      block.register_attribute("head_scale", c10::FloatType::get(),
                               std::sqrt(static_cast<double>(c.d_model / c.num_heads)));
      block.define(kBlockSource);
    }
    std::string source = kModelSource;
    source.replace(source.find("{blocks}\n"), 9, BlockCalls(c.num_layers));
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
