#include "worker/model/hf_format.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/data/char_tokenizer.h"
#include "worker/data/hf_tokenizer.h"
#include "worker/model/safetensors.h"

namespace paci {
namespace {

using ::nlohmann::json;

// One parameter's way between the two namings: the paci name, and the
// Hugging Face tensors it is made of (concatenated along dim 0 of paci's
// tensor, each of `rows` rows; rows 0: the whole tensor), and whether
// Hugging Face stores it transposed (GPT-2's Conv1D).
struct Piece {
  std::string hf;
  int64_t rows = 0;
};
struct Mapping {
  std::string paci;
  std::vector<Piece> pieces;
  bool transposed = false;
};

std::vector<Mapping> Mappings(const GptConfig& c) {
  std::vector<Mapping> m;
  const auto one = [&](std::string paci, std::string hf, bool transposed = false) {
    m.push_back(Mapping{std::move(paci), {Piece{std::move(hf), 0}}, transposed});
  };
  if (!c.llama()) {
    one("wte.weight", "transformer.wte.weight");
    one("wpe.weight", "transformer.wpe.weight");
    for (int b = 0; b < c.num_layers; ++b) {
      const std::string h = absl::StrCat("h", b, ".");
      const std::string t = absl::StrCat("transformer.h.", b, ".");
      for (const char* n : {"weight", "bias"}) {
        one(h + "ln1." + n, t + "ln_1." + n);
        one(h + "ln2." + n, t + "ln_2." + n);
      }
      one(h + "attn.qkv.weight", t + "attn.c_attn.weight", true);
      one(h + "attn.qkv.bias", t + "attn.c_attn.bias");
      one(h + "attn.proj.weight", t + "attn.c_proj.weight", true);
      one(h + "attn.proj.bias", t + "attn.c_proj.bias");
      one(h + "fc.weight", t + "mlp.c_fc.weight", true);
      one(h + "fc.bias", t + "mlp.c_fc.bias");
      one(h + "proj.weight", t + "mlp.c_proj.weight", true);
      one(h + "proj.bias", t + "mlp.c_proj.bias");
    }
    one("ln_f.weight", "transformer.ln_f.weight");
    one("ln_f.bias", "transformer.ln_f.bias");
  } else {
    const int64_t q_rows = c.d_model, kv_rows = int64_t{c.kv_heads()} * c.head_size();
    one("wte.weight", "model.embed_tokens.weight");
    for (int b = 0; b < c.num_layers; ++b) {
      const std::string h = absl::StrCat("h", b, ".");
      const std::string l = absl::StrCat("model.layers.", b, ".");
      one(h + "ln1.weight", l + "input_layernorm.weight");
      m.push_back(Mapping{h + "attn.qkv.weight",
                          {Piece{l + "self_attn.q_proj.weight", q_rows},
                           Piece{l + "self_attn.k_proj.weight", kv_rows},
                           Piece{l + "self_attn.v_proj.weight", kv_rows}}});
      one(h + "attn.proj.weight", l + "self_attn.o_proj.weight");
      one(h + "ln2.weight", l + "post_attention_layernorm.weight");
      m.push_back(Mapping{h + "fc.weight",
                          {Piece{l + "mlp.gate_proj.weight", c.ffn()},
                           Piece{l + "mlp.up_proj.weight", c.ffn()}}});
      one(h + "proj.weight", l + "mlp.down_proj.weight");
    }
    one("ln_f.weight", "model.norm.weight");
  }
  one("head.weight", "lm_head.weight");
  return m;
}

absl::Status WriteJson(const std::string& path, const json& value) {
  return WriteFileAtomically(path, value.dump(2) + "\n");
}

// A character tokenizer as tokenizers' tokenizer.json: BPE whose vocabulary
// is the characters in id order and which has no merges, so each character
// is its own token; no normalizer or pre-tokenizer (the text is one word) and
// the Fuse decoder (tokens joined without spaces).
json CharTokenizerJson(const CharTokenizer& tokenizer) {
  json vocab = json::object();
  for (int id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string utf8 = tokenizer.Decode({id});
    vocab[utf8] = id;
  }
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", {{"type", "Fuse"}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", json::array()}}}};
}

absl::Status WriteTokenizer(const Tokenizer& tokenizer, const GptConfig& config,
                            const std::string& folder) {
  json tokenizer_config = {{"model_max_length", config.seq_len},
                           {"clean_up_tokenization_spaces", false}};
  const std::string serialized = tokenizer.Serialize();
  const std::string body = serialized.substr(serialized.find('\n') + 1);
  if (const auto* chars = dynamic_cast<const CharTokenizer*>(&tokenizer)) {
    RETURN_IF_ERROR(WriteJson(folder + "/tokenizer.json", CharTokenizerJson(*chars)));
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast";
  } else if (const auto* hf = dynamic_cast<const HfTokenizer*>(&tokenizer)) {
    // The tokenizer.json prepare-data was given, byte for byte.
    RETURN_IF_ERROR(WriteFileAtomically(folder + "/tokenizer.json", hf->json()));
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast";
  } else {
    RETURN_IF_ERROR(WriteFileAtomically(folder + "/tokenizer.model", body));
    tokenizer_config["tokenizer_class"] = "LlamaTokenizer";
    // paci's SentencePiece models add no "▁" before the text (prepare-data's
    // chunks then join as the whole): neither may transformers' Metaspace.
    tokenizer_config["add_prefix_space"] = false;
    tokenizer_config["add_bos_token"] = false;
    tokenizer_config["add_eos_token"] = false;
    tokenizer_config["legacy"] = false;
  }
  return WriteJson(folder + "/tokenizer_config.json", tokenizer_config);
}

absl::Status Refuse(const std::string& what, const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", key, " ", why));
}

absl::StatusOr<int> IntField(const json& config, const char* key, const std::string& what,
                             std::optional<int> fallback = std::nullopt) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    if (fallback) return *fallback;
    return Refuse(what, key, "is missing");
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 30)) {
    return Refuse(what, key, "is not a positive integer");
  }
  return it->get<int>();
}

absl::StatusOr<double> NumberField(const json& config, const char* key, const std::string& what,
                                   double fallback) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() > 0)) return Refuse(what, key, "is not a positive number");
  return it->get<double>();
}

bool FlagField(const json& config, const char* key, bool fallback) {
  const auto it = config.find(key);
  return it == config.end() || !it->is_boolean() ? fallback : it->get<bool>();
}

}  // namespace

std::string HfConfigJson(const GptConfig& c) {
  json config;
  if (!c.llama()) {
    config = {{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", c.vocab_size},
              {"n_positions", c.seq_len},
              {"n_embd", c.d_model},
              {"n_layer", c.num_layers},
              {"n_head", c.num_heads},
              {"n_inner", c.ffn()},
              {"activation_function", "gelu"},  // exact, as torch::gelu; GPT-2's own is gelu_new
              {"layer_norm_epsilon", c.norm_eps},
              {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0},
              {"attn_pdrop", 0.0},
              {"scale_attn_weights", true},
              {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false}};
  } else {
    config = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.d_model},
              {"intermediate_size", c.ffn()},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.kv_heads()},
              {"head_dim", c.head_size()},
              {"max_position_embeddings", c.seq_len},
              {"hidden_act", "silu"},
              {"rms_norm_eps", c.norm_eps},
              {"rope_theta", c.rope_theta},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
              {"attention_bias", false},
              {"mlp_bias", false},
              {"attention_dropout", 0.0},
              {"pretraining_tp", 1}};
  }
  // paci's head is its own parameter, never the embedding's; no special tokens.
  config["tie_word_embeddings"] = false;
  config["bos_token_id"] = nullptr;
  config["eos_token_id"] = nullptr;
  config["torch_dtype"] = "float32";
  return config.dump(2) + "\n";
}

absl::StatusOr<GptConfig> GptConfigFromHfConfig(const std::string& text, const std::string& what) {
  const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  const auto type = config.find("model_type");
  if (type == config.end() || !type->is_string()) return Refuse(what, "model_type", "is missing");
  GptConfig c;
  if (*type == "gpt2") {
    c.architecture = Architecture::kGpt2;
    ASSIGN_OR_RETURN(c.vocab_size, IntField(config, "vocab_size", what, 50257));
    ASSIGN_OR_RETURN(c.seq_len, IntField(config, "n_positions", what, 1024));
    ASSIGN_OR_RETURN(c.d_model, IntField(config, "n_embd", what, 768));
    ASSIGN_OR_RETURN(c.num_layers, IntField(config, "n_layer", what, 12));
    ASSIGN_OR_RETURN(c.num_heads, IntField(config, "n_head", what, 12));
    ASSIGN_OR_RETURN(c.ffn_hidden_size, IntField(config, "n_inner", what, 4 * c.d_model));
    ASSIGN_OR_RETURN(c.norm_eps, NumberField(config, "layer_norm_epsilon", what, 1e-5));
    const auto act = config.find("activation_function");
    if (act != config.end() && *act != "gelu") {
      return Refuse(what, "activation_function",
                    "is not \"gelu\" (paci's GPT uses the exact GELU; GPT-2's own gelu_new "
                    "is the tanh approximation)");
    }
    if (FlagField(config, "scale_attn_by_inverse_layer_idx", false) ||
        FlagField(config, "reorder_and_upcast_attn", false) ||
        !FlagField(config, "scale_attn_weights", true)) {
      return Refuse(what, "scale_attn_*", "asks for an attention scaling paci does not compute");
    }
  } else if (*type == "llama") {
    c.architecture = Architecture::kLlama;
    ASSIGN_OR_RETURN(c.vocab_size, IntField(config, "vocab_size", what, 32000));
    ASSIGN_OR_RETURN(c.d_model, IntField(config, "hidden_size", what, 4096));
    ASSIGN_OR_RETURN(c.ffn_hidden_size, IntField(config, "intermediate_size", what, 11008));
    ASSIGN_OR_RETURN(c.num_layers, IntField(config, "num_hidden_layers", what, 32));
    ASSIGN_OR_RETURN(c.num_heads, IntField(config, "num_attention_heads", what, 32));
    ASSIGN_OR_RETURN(c.num_kv_heads, IntField(config, "num_key_value_heads", what, c.num_heads));
    ASSIGN_OR_RETURN(c.seq_len, IntField(config, "max_position_embeddings", what, 2048));
    ASSIGN_OR_RETURN(c.norm_eps, NumberField(config, "rms_norm_eps", what, 1e-6));
    double theta = 10000;
    const auto rope = config.find("rope_parameters");
    if (rope != config.end() && rope->is_object()) {
      const auto rope_type = rope->find("rope_type");
      if (rope_type != rope->end() && *rope_type != "default") {
        return Refuse(what, "rope_parameters.rope_type",
                      "is not \"default\" (paci computes unscaled rotary positions)");
      }
      ASSIGN_OR_RETURN(theta, NumberField(*rope, "rope_theta", what, theta));
    } else {
      const auto scaling = config.find("rope_scaling");
      if (scaling != config.end() && !scaling->is_null()) {
        return Refuse(what, "rope_scaling", "is set (paci computes unscaled rotary positions)");
      }
      ASSIGN_OR_RETURN(theta, NumberField(config, "rope_theta", what, theta));
    }
    c.rope_theta = theta;
    const auto act = config.find("hidden_act");
    if (act != config.end() && *act != "silu") return Refuse(what, "hidden_act", "is not \"silu\"");
    if (FlagField(config, "attention_bias", false) || FlagField(config, "mlp_bias", false)) {
      return Refuse(what, "attention_bias/mlp_bias", "is true (paci's llama has no biases)");
    }
  } else {
    return Refuse(what, "model_type",
                  absl::StrCat("is \"", type->dump(), "\"; paci reads gpt2 and llama"));
  }
  if (c.d_model % c.num_heads != 0 || c.num_heads % c.kv_heads() != 0) {
    return Refuse(what, "num_attention_heads", "does not divide the width, or its key/value heads it");
  }
  const auto head_dim = config.find("head_dim");
  if (head_dim != config.end() && !head_dim->is_null() && *head_dim != c.head_size()) {
    return Refuse(what, "head_dim", "is not hidden_size / num_attention_heads, which paci requires");
  }
  return c;
}

absl::StatusOr<NamedWeights> ToHfWeights(const GptConfig& config, const NamedWeights& weights) {
  NamedWeights hf;
  for (const Mapping& m : Mappings(config)) {
    const auto it = weights.find(m.paci);
    if (it == weights.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the model lacks ", m.paci, ", which a ", ArchitectureName(config.architecture),
                       " of this shape has"));
    }
    torch::Tensor t = it->second.detach().to(torch::kCPU, torch::kFloat);
    int64_t row = 0;
    for (const Piece& piece : m.pieces) {
      torch::Tensor part = piece.rows == 0 ? t : t.narrow(0, row, piece.rows);
      row += piece.rows;
      if (m.transposed) part = part.t();
      hf[piece.hf] = part.contiguous();
    }
  }
  return hf;
}

absl::StatusOr<NamedWeights> FromHfWeights(const GptConfig& config, const NamedWeights& hf,
                                           const std::string& what) {
  NamedWeights weights;
  for (const Mapping& m : Mappings(config)) {
    std::vector<torch::Tensor> parts;
    std::string pieces;
    for (const Piece& piece : m.pieces) {
      auto it = hf.find(piece.hf);
      if (it == hf.end() && piece.hf == "lm_head.weight") {  // tied to the embedding
        it = hf.find(config.llama() ? "model.embed_tokens.weight" : "transformer.wte.weight");
      }
      if (it == hf.end()) {
        return absl::FailedPreconditionError(absl::StrCat(what, " lacks the tensor ", piece.hf));
      }
      const torch::Tensor& tensor = it->second;
      if ((m.transposed && tensor.dim() != 2) ||
          (piece.rows > 0 && (tensor.dim() != 2 || tensor.size(0) != piece.rows))) {
        return absl::FailedPreconditionError(
            absl::StrCat(what, ": the tensor ", piece.hf, " has shape ",
                         c10::str(tensor.sizes()), ", which does not fit config.json"));
      }
      parts.push_back(m.transposed ? tensor.t() : tensor);
      absl::StrAppend(&pieces, pieces.empty() ? "" : ", ", piece.hf);
    }
    try {
      torch::Tensor t = parts.size() == 1 ? parts[0].contiguous() : torch::cat(parts, 0);
      weights[m.paci] = t.to(torch::kFloat).clone();
    } catch (const c10::Error& e) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the tensors ", pieces, " do not fit config.json: ", e.what_without_backtrace()));
    }
  }
  return weights;
}

absl::Status WriteHfFolder(const GptConfig& config, const NamedWeights& weights,
                           const Tokenizer& tokenizer, const std::string& folder,
                           const HfExportOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot create ", folder, ": ", error.message()));
  }
  ASSIGN_OR_RETURN(const NamedWeights hf, ToHfWeights(config, weights));
  // Shards in name order, each up to max_shard_bytes.
  std::vector<std::map<std::string, SafeTensor>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& [name, tensor] : hf) {
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    if (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back()[name] = SafeTensor{
        "F32", tensor.sizes().vec(),
        std::string_view(static_cast<const char*>(tensor.data_ptr()), static_cast<size_t>(bytes))};
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    ASSIGN_OR_RETURN(const std::string bytes, SerializeSafetensors(shards[0], metadata));
    RETURN_IF_ERROR(WriteFileAtomically(folder + "/model.safetensors", bytes));
    std::filesystem::remove(folder + "/model.safetensors.index.json", error);
  } else {
    json weight_map = json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string file =
          absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1, shards.size());
      ASSIGN_OR_RETURN(const std::string bytes, SerializeSafetensors(shards[k], metadata));
      RETURN_IF_ERROR(WriteFileAtomically(folder + "/" + file, bytes));
      for (const auto& [name, tensor] : shards[k]) weight_map[name] = file;
    }
    RETURN_IF_ERROR(WriteJson(folder + "/model.safetensors.index.json",
                              {{"metadata", {{"total_size", total_bytes}}},
                               {"weight_map", weight_map}}));
    std::filesystem::remove(folder + "/model.safetensors", error);
  }
  RETURN_IF_ERROR(WriteFileAtomically(folder + "/config.json", HfConfigJson(config)));
  RETURN_IF_ERROR(WriteJson(folder + "/generation_config.json",
                            {{"do_sample", true}, {"max_length", config.seq_len}}));
  return WriteTokenizer(tokenizer, config, folder);
}

bool IsHfFolder(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(std::filesystem::path(path) / "config.json", error);
}

absl::StatusOr<HfModel> ReadHfFolder(const std::string& folder) {
  const std::string config_path = folder + "/config.json";
  ASSIGN_OR_RETURN(const std::string config_text, ReadFileToString(config_path));
  HfModel model;
  ASSIGN_OR_RETURN(model.config, GptConfigFromHfConfig(config_text, config_path));
  std::vector<std::string> files;
  const std::string index_path = folder + "/model.safetensors.index.json";
  std::error_code error;
  if (std::filesystem::exists(index_path, error)) {
    ASSIGN_OR_RETURN(const std::string index_text, ReadFileToString(index_path));
    const json index = json::parse(index_text, nullptr, /*allow_exceptions=*/false);
    const auto map = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || map == index.end() || !map->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": has no weight_map object"));
    }
    std::set<std::string> unique;
    for (const auto& [name, file] : map->items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": the file of ", name, " is not a file name in the folder"));
      }
      unique.insert(file.get<std::string>());
    }
    files.assign(unique.begin(), unique.end());
  } else {
    files.push_back("model.safetensors");
  }
  NamedWeights hf;
  for (const std::string& file : files) {
    const std::string path = folder + "/" + file;
    ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
    ASSIGN_OR_RETURN(const SafetensorsFile parsed, ParseSafetensors(bytes, path));
    for (const auto& [name, tensor] : parsed.tensors) {
      torch::ScalarType type;
      if (tensor.dtype == "F32") {
        type = torch::kFloat;
      } else if (tensor.dtype == "BF16") {
        type = torch::kBFloat16;
      } else if (tensor.dtype == "F16") {
        type = torch::kHalf;
      } else if (tensor.dtype == "F64") {
        type = torch::kDouble;
      } else {
        continue;  // integer buffers; FromHfWeights names any paci needs
      }
      hf[name] = torch::from_blob(const_cast<char*>(tensor.data.data()), tensor.shape,
                                  torch::dtype(type))
                     .to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
    }
  }
  ASSIGN_OR_RETURN(model.weights, FromHfWeights(model.config, hf, folder));
  return model;
}

}  // namespace paci
