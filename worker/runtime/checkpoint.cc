#include "worker/runtime/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "worker/model/gpt_config.h"
#include "worker/runtime/checkpoint_layout.h"
#include "worker/runtime/pickle_memo.h"

namespace paci {
namespace {

constexpr char kFormat[] = "paci-stage-shard-v1";

// LibTorch's archive does not verify its CRCs on read, so a shard is the
// archive followed by a footer: magic, archive length and CRC-32 of the archive.
constexpr char kFooterMagic[8] = {'P', 'A', 'C', 'I', 'C', 'K', 'P', '1'};
constexpr size_t kFooterSize = 8 + 8 + 4;

uint32_t Crc32(const std::string& bytes) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

std::string Footer(const std::string& archive) {
  std::string footer(kFooterMagic, sizeof(kFooterMagic));
  const uint64_t size = archive.size();
  const uint32_t crc = Crc32(archive);
  footer.append(reinterpret_cast<const char*>(&size), sizeof(size));
  footer.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  return footer;
}

// The archive bytes of a shard file, after checking its footer.
absl::StatusOr<std::string> ReadVerified(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read checkpoint ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string bytes = buffer.str();
  if (bytes.size() < kFooterSize ||
      std::memcmp(bytes.data() + bytes.size() - kFooterSize, kFooterMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path,
                                            " is truncated or not a paci shard (no footer)"));
  }
  uint64_t size;
  uint32_t crc;
  std::memcpy(&size, bytes.data() + bytes.size() - kFooterSize + 8, sizeof(size));
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, sizeof(crc));
  bytes.resize(bytes.size() - kFooterSize);
  if (size != bytes.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " is truncated: ", bytes.size(),
                                            " bytes, the footer says ", size));
  }
  if (Crc32(bytes) != crc) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " is corrupt: its CRC-32 does not match"));
  }
  return bytes;
}

// Archive keys are attribute names: keep them free of '.' and '/'.
std::string Key(const std::string& prefix, const std::string& name) {
  return absl::StrCat(prefix, "__", absl::StrReplaceAll(name, {{".", "__"}, {"/", "__"}}));
}

std::string FirstLine(const std::string& text) {
  return std::string(text.substr(0, text.find('\n')));
}

// The model config's int archive entries, in the order written. Shards
// written before the llama architecture lack the ones after seq_len and the
// float and string entries (WriteConfigAndTokenizer): they are gpt2's.
constexpr const char* kConfigKeys[] = {"vocab_size", "num_layers",   "d_model",        "num_heads",
                                       "seq_len",    "num_kv_heads", "ffn_hidden_size"};

std::vector<int*> ConfigFields(GptConfig& c) {
  return {&c.vocab_size, &c.num_layers,   &c.d_model,        &c.num_heads,
          &c.seq_len,    &c.num_kv_heads, &c.ffn_hidden_size};
}

void WriteConfigAndTokenizer(const GptConfig& config, const std::string& tokenizer,
                             torch::serialize::OutputArchive& archive) {
  GptConfig copy = config;
  copy.num_kv_heads = config.kv_heads();
  copy.ffn_hidden_size = config.ffn();
  const std::vector<int*> fields = ConfigFields(copy);
  for (size_t i = 0; i < fields.size(); ++i) {
    archive.write(kConfigKeys[i], c10::IValue(static_cast<int64_t>(*fields[i])));
  }
  archive.write("architecture", c10::IValue(std::string(ArchitectureName(config.architecture))));
  archive.write("rope_theta", c10::IValue(config.rope_theta));
  archive.write("norm_eps", c10::IValue(config.norm_eps));
  if (!tokenizer.empty()) {
    // As bytes in a tensor: a SentencePiece model is binary, not a string.
    archive.write("tokenizer",
                  torch::from_blob(const_cast<char*>(tokenizer.data()),
                                   {static_cast<int64_t>(tokenizer.size())}, torch::kUInt8)
                      .clone());
  }
}

// The archive's bytes for LibTorch's zip reader, which may ask for bytes past
// the end of a forged one (LibTorch's own MemoryReadAdapter copies them
// anyway: found by fuzz/checkpoint_fuzz.cc): it gets what there is.
class BytesReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// Runs `read` on the archive of the shard at `path`, after checking its
// footer. LibTorch's exceptions become DataLoss naming the file: c10::Error
// mostly; its unpickler also throws std::out_of_range and others on an
// archive whose CRC matches but whose contents were forged (found by
// fuzz/checkpoint_fuzz.cc).
absl::Status ReadArchive(const std::string& path,
                         const std::function<absl::Status(torch::serialize::InputArchive&)>& read) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadVerified(path));
  try {
    // Each pickle's memo ids first: LibTorch allocates what they say.
    caffe2::serialize::PyTorchStreamReader records(std::make_shared<BytesReader>(bytes));
    for (const std::string name : {"data.pkl", "constants.pkl"}) {  // the pickles a module has
      if (!records.hasRecord(name)) continue;
      const auto [data, size] = records.getRecord(name);
      const absl::Status memo =
          CheckPickleMemoIds(std::string_view(static_cast<const char*>(data.get()), size));
      if (!memo.ok()) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", path, " is corrupt: ", name, ": ", memo.message()));
      }
    }
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    return read(archive);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " is corrupt or unreadable: ",
                                            FirstLine(e.what())));
  }
}

// The metadata entries of an archive; may throw (inside ReadArchive).
absl::StatusOr<ShardMeta> ReadMeta(const std::string& path,
                                   torch::serialize::InputArchive& archive) {
  ShardMeta meta;
  c10::IValue value;
  if (!archive.try_read("format", value) || !value.isString() || value.toStringRef() != kFormat) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " is not a paci stage shard (", kFormat, ")"));
  }
  archive.read("job_name", value);
  meta.job_name = value.toStringRef();
  archive.read("stage", value);
  meta.stage = static_cast<int>(value.toInt());
  archive.read("num_stages", value);
  meta.num_stages = static_cast<int>(value.toInt());
  archive.read("model", value);
  meta.model_fingerprint = value.toStringRef();
  archive.read("step", value);
  meta.step = value.toInt();
  archive.read("next_micro_batch", value);
  meta.next_micro_batch = static_cast<uint64_t>(value.toInt());
  if (archive.try_read(kConfigKeys[0], value)) {  // shards before the config have none
    meta.config.emplace();
    GptConfig& config = *meta.config;
    const std::vector<int*> fields = ConfigFields(config);
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i >= 5 && !archive.try_read(kConfigKeys[i], value)) break;  // gpt2's defaults
      if (i < 5) archive.read(kConfigKeys[i], value);
      *fields[i] = static_cast<int>(value.toInt());
    }
    if (archive.try_read("architecture", value)) {
      if (!value.isString() || (value.toStringRef() != "gpt2" && value.toStringRef() != "llama")) {
        return absl::DataLossError(absl::StrCat("checkpoint ", path,
                                                " names no architecture paci knows (gpt2, llama)"));
      }
      config.architecture =
          value.toStringRef() == "llama" ? Architecture::kLlama : Architecture::kGpt2;
    }
    if (archive.try_read("rope_theta", value)) config.rope_theta = value.toDouble();
    if (archive.try_read("norm_eps", value)) config.norm_eps = value.toDouble();
  }
  torch::Tensor tokenizer;
  if (archive.try_read("tokenizer", tokenizer)) {
    tokenizer = tokenizer.to(torch::kUInt8).contiguous();
    meta.tokenizer.assign(reinterpret_cast<const char*>(tokenizer.data_ptr<uint8_t>()),
                          static_cast<size_t>(tokenizer.numel()));
  }
  return meta;
}


// Makes `folder` and every missing folder above it, then syncs the parent of
// each one it made, so that the whole chain of new names is on disk before a
// shard is (the shard's own rename syncs only the step folder). A folder
// another stage made at the same moment is synced too: no harm.
absl::Status MakeFolders(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::vector<fs::path> missing;  // the deepest first
  for (fs::path p = folder; !p.empty(); p = p.parent_path()) {
    std::error_code absent;
    if (fs::exists(p, absent)) break;
    missing.push_back(p);
    if (p == p.parent_path()) break;  // the root
  }
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("checkpoint.directory: cannot create ",
                                               folder.string(), ": ", ec.message()));
  }
  for (auto made = missing.rbegin(); made != missing.rend(); ++made) {  // the topmost first
    const fs::path parent = made->parent_path();
    RETURN_IF_ERROR(SyncFolder(parent.empty() ? std::string(".") : parent.string()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyShard(const std::string& path) { return ReadVerified(path).status(); }

absl::StatusOr<ShardMeta> ReadShardMeta(const std::string& path) {
  ShardMeta meta;
  const auto read = [&](torch::serialize::InputArchive& archive) -> absl::Status {
    ASSIGN_OR_RETURN(meta, ReadMeta(path, archive));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ReadArchive(path, read));
  return meta;
}

absl::Status MergeShardTensor(const std::string& path, const std::string& name,
                              torch::Tensor tensor, std::map<std::string, torch::Tensor>& whole) {
  auto [it, inserted] = whole.emplace(name, tensor);
  if (inserted) return absl::OkStatus();
  if (IsHeadWeight(name) && it->second.dim() == 2 && tensor.dim() == 2 &&
      it->second.size(1) == tensor.size(1)) {
    it->second = torch::cat({it->second, tensor});  // the next rows of a split head
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", path, " holds ", name, ", which an earlier stage holds too"));
}

absl::Status CheckShardAgrees(const std::string& path, const ShardMeta& meta,
                              const ShardMeta& first, int stage, int num_stages, int64_t step) {
  if (meta.stage != stage || meta.num_stages != num_stages || meta.step != step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " says it is stage ", meta.stage, " of ", meta.num_stages,
        " at step ", meta.step, "; its name says stage ", stage, " of ", num_stages, " at step ",
        step));
  }
  if (meta.job_name != first.job_name) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " is of job \"",
                                                      meta.job_name, "\", stage 0's of job \"",
                                                      first.job_name, "\""));
  }
  if (first.config && meta.config) {
    if (auto difference = ShapeDifference(*first.config, *meta.config)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " holds another model than stage 0's shard (there: this shard; ",
          "here: stage 0's): ", *difference));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStep(const std::string& directory, int64_t step, int num_stages) {
  ShardMeta first;
  for (int stage = 0; stage < num_stages; ++stage) {
    const std::string path = ShardPath(directory, step, stage, num_stages);
    ASSIGN_OR_RETURN(const ShardMeta meta, ReadShardMeta(path));
    if (stage == 0) first = meta;
    RETURN_IF_ERROR(CheckShardAgrees(path, meta, first, stage, num_stages, step));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> LatestSoundStep(const std::string& directory,
                                                       int num_stages,
                                                       std::vector<std::string>* passed_over) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, CompleteSteps(directory, num_stages));
  std::vector<std::string> unusable;
  bool corrupt = false;  // some step is broken, not only mixed
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    const absl::Status whole = CheckStep(directory, *step, num_stages);
    if (whole.ok()) {
      passed_over->insert(passed_over->end(), unusable.begin(), unusable.end());
      return std::optional<int64_t>(*step);
    }
    if (whole.code() != absl::StatusCode::kFailedPrecondition) corrupt = true;
    unusable.push_back(absl::StrCat("step ", *step, ": ", whole.message()));
  }
  if (unusable.empty()) return std::optional<int64_t>();
  const std::string message = absl::StrCat("checkpoint.directory: ", directory,
                                           " holds no step whose shards are all whole: ",
                                           absl::StrJoin(unusable, "; "));
  return corrupt ? absl::DataLossError(message) : absl::FailedPreconditionError(message);
}

absl::StatusOr<std::vector<int64_t>> PruneSteps(const std::string& directory, int num_stages,
                                                int keep, std::set<int64_t>* whole) {
  if (keep <= 0) return std::vector<int64_t>();
  ASSIGN_OR_RETURN(const std::vector<int64_t> complete, CompleteSteps(directory, num_stages));
  if (static_cast<int>(complete.size()) <= keep) return std::vector<int64_t>();
  std::set<int64_t> found;
  if (whole == nullptr) whole = &found;
  // The newest `keep` whole steps stay, and what is newer than the oldest of
  // them (a step being written, or one a resume would pass over).
  int kept = 0;
  for (auto step = complete.rbegin(); step != complete.rend(); ++step) {
    if (whole->count(*step) == 0) {
      if (!CheckStep(directory, *step, num_stages).ok()) continue;
      whole->insert(*step);
    }
    if (++kept < keep) continue;
    whole->erase(whole->begin(), whole->lower_bound(*step));  // going now
    return RemoveStepsBefore(directory, num_stages, *step);
  }
  return std::vector<int64_t>();  // fewer than `keep` whole steps: every step stays
}

absl::Status SaveShard(const std::string& path, const ShardMeta& meta, GptStage& model,
                       AdamW& optimizer) {
  namespace fs = std::filesystem;
  // A new step folder's name, and the checkpoint directory's when it is new
  // too, are on disk before its shard is (the shard's own rename syncs the
  // step folder).
  RETURN_IF_ERROR(MakeFolders(fs::path(path).parent_path()));
  std::string bytes;
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(std::string(kFormat)));
    archive.write("job_name", c10::IValue(meta.job_name));
    archive.write("stage", c10::IValue(static_cast<int64_t>(meta.stage)));
    archive.write("num_stages", c10::IValue(static_cast<int64_t>(meta.num_stages)));
    archive.write("model", c10::IValue(meta.model_fingerprint));
    archive.write("step", c10::IValue(meta.step));
    archive.write("next_micro_batch", c10::IValue(static_cast<int64_t>(meta.next_micro_batch)));
    archive.write("optimizer_steps", c10::IValue(optimizer.steps()));
    WriteConfigAndTokenizer(model->config(), meta.tokenizer, archive);
    c10::List<std::string> names;
    for (const auto& [name, p] : optimizer.parameters()) {
      archive.write(Key("param", name), p.detach().to(torch::kCPU));
      names.push_back(name);
    }
    archive.write("parameter_names", c10::IValue(names));
    for (const auto& [name, t] : optimizer.State()) {
      archive.write(Key("optim", name), t.to(torch::kCPU));
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot write checkpoint ", path, ": ", FirstLine(e.what())));
  }
  return WriteFileAtomically(path, [&bytes](std::ostream& file) {
    file << bytes << Footer(bytes);
    return absl::OkStatus();
  });
}

absl::StatusOr<ShardMeta> LoadShard(const std::string& path, const ShardMeta& expected,
                                    GptStage& model, AdamW& optimizer) {
  ShardMeta meta;
  std::map<std::string, torch::Tensor> params, state;
  int64_t optimizer_steps = 0;
  const auto read = [&](torch::serialize::InputArchive& archive) -> absl::Status {
    ASSIGN_OR_RETURN(meta, ReadMeta(path, archive));
    c10::IValue value;
    archive.read("optimizer_steps", value);
    optimizer_steps = value.toInt();

    if (meta.stage != expected.stage || meta.num_stages != expected.num_stages) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " was written by stage ", meta.stage, " of ", meta.num_stages,
          "; this worker is stage ", expected.stage, " of ", expected.num_stages));
    }
    if (meta.model_fingerprint != expected.model_fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " holds a different model slice: it has \"",
          meta.model_fingerprint, "\", this stage is \"", expected.model_fingerprint, "\""));
    }
    for (const auto& [name, p] : optimizer.parameters()) {
      torch::Tensor t;
      if (!archive.try_read(Key("param", name), t)) {
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint ", path, " lacks parameter ", name));
      }
      if (t.sizes() != p.sizes()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", path, ": parameter ", name, " has shape ", c10::str(t.sizes()),
            ", the model has ", c10::str(p.sizes())));
      }
      params[name] = t;
    }
    // The LM head had a bias before both architectures dropped it: a shard of
    // then is not this model, though its fingerprint matches.
    torch::Tensor head_bias;
    if (params.count("head.weight") > 0 && params.count("head.bias") == 0 &&
        archive.try_read(Key("param", "head.bias"), head_bias)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " holds parameter head.bias: it was written by a paci whose LM "
          "head had a bias, which this one's has not (resume it with the paci that wrote it)"));
    }
    for (const auto& [name, t] : optimizer.State()) {
      torch::Tensor saved;
      if (!archive.try_read(Key("optim", name), saved) || saved.sizes() != t.sizes()) {
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint ", path, " lacks optimizer state ", name));
      }
      state[name] = saved;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ReadArchive(path, read));
  // Everything is read and checked: now change the model.
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : optimizer.parameters()) p.data().copy_(params.at(name));
  optimizer.SetState(optimizer_steps,
                     std::vector<std::pair<std::string, torch::Tensor>>(state.begin(), state.end()));
  return meta;
}

absl::StatusOr<ShardParameters> ReadShard(const std::string& path, bool with_optimizer) {
  ShardParameters shard;
  const auto read = [&](torch::serialize::InputArchive& archive) -> absl::Status {
    ASSIGN_OR_RETURN(shard.meta, ReadMeta(path, archive));
    c10::IValue names;
    if (!shard.meta.config || !archive.try_read("parameter_names", names)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", path,
                       " records no model config or parameter names (written by an older paci)"));
    }
    for (const c10::IValue& name : names.toListRef()) {
      torch::Tensor t;
      if (!archive.try_read(Key("param", name.toStringRef()), t)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", path, " lacks parameter ", name.toStringRef()));
      }
      shard.parameters[name.toStringRef()] = t;
      if (!with_optimizer) continue;
      for (const char* kind : {"exp_avg/", "exp_avg_sq/", "master/"}) {
        const std::string key = kind + name.toStringRef();
        torch::Tensor saved;  // a new one: try_read sets a defined tensor's storage
        if (archive.try_read(Key("optim", key), saved)) shard.optimizer_state[key] = saved;
      }
    }
    if (with_optimizer) {
      c10::IValue steps;
      archive.read("optimizer_steps", steps);
      shard.optimizer_steps = steps.toInt();
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ReadArchive(path, read));
  return shard;
}

}  // namespace paci
