#include "worker/data/sentencepiece_tokenizer.h"

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/sentencepiece_shim.h"

namespace paci {
namespace {

// Training samples its sentences with SentencePiece's global generator.
constexpr unsigned int kTrainingSeed = 1;
constexpr char kShimName[] = "libpaci_sentencepiece.so";

// Where libpaci_sentencepiece may be: installed beside the program, then where
// this build made it.
std::vector<std::string> ShimCandidates() {
  std::vector<std::string> candidates;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    candidates.push_back((self.parent_path().parent_path() / "lib/paci" / kShimName).string());
  }
#ifdef PACI_SENTENCEPIECE_SHIM
  candidates.push_back(PACI_SENTENCEPIECE_SHIM);
#endif
  return candidates;
}

absl::StatusOr<const PaciSentencePieceApi*> LoadShim() {
  std::string reasons;
  for (const std::string& path : ShimCandidates()) {
    // A link-map namespace of its own (with its own libc and libstdc++): the
    // protobuf-lite inside libsentencepiece never meets the process' libprotobuf.
    // Unlike RTLD_DEEPBIND, this works under the sanitizers too.
    void* library = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      absl::StrAppend(&reasons, "; ", dlerror());
      continue;
    }
    // Never closed: tokenizers may live until the process ends.
    const auto api_of = reinterpret_cast<const PaciSentencePieceApi* (*)()>(
        dlsym(library, "paci_sentencepiece_api"));
    if (api_of != nullptr && api_of()->version == PACI_SENTENCEPIECE_API_VERSION) {
      return api_of();
    }
    absl::StrAppend(&reasons, "; ", path, " is of another version");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load SentencePiece (", kShimName, ")", reasons));
}

absl::StatusOr<const PaciSentencePieceApi*> Shim() {
  static const absl::StatusOr<const PaciSentencePieceApi*> api = LoadShim();
  return api;
}

// A buffer of the shim's, released when it goes out of scope.
template <typename T>
struct ShimBuffer {
  const PaciSentencePieceApi* api;
  T* data = nullptr;
  ~ShimBuffer() {
    if (data != nullptr) api->free_buffer(data);
  }
};

// The lines of some files, in order, for SentencePiece's trainer. A line that
// is not valid UTF-8 ends them with an error naming file and offset.
class LineReader {
 public:
  explicit LineReader(const std::vector<std::string>& files) : files_(files) {}

  // The shim's `next`: 1 and the line, 0 at the end, -1 on an error.
  static int Next(void* context, const char** line, size_t* size) {
    auto* reader = static_cast<LineReader*>(context);
    if (!reader->NextLine()) return reader->error_.ok() ? 0 : -1;
    *line = reader->line_.data();
    *size = reader->line_.size();
    return 1;
  }

  const absl::Status& error() const { return error_; }

 private:
  bool NextLine() {
    while (error_.ok()) {
      if (in_.is_open() && std::getline(in_, line_)) {
        const size_t bad = FindInvalidUtf8(line_);
        if (bad != line_.size()) {
          error_ = absl::InvalidArgumentError(absl::StrCat(
              files_[file_ - 1], ": not valid UTF-8 at byte ", offset_ + bad));
          return false;
        }
        offset_ += line_.size() + 1;
        return true;
      }
      if (in_.is_open() && in_.bad()) {
        error_ = absl::NotFoundError(absl::StrCat("cannot read ", files_[file_ - 1]));
      } else if (file_ == files_.size()) {
        return false;
      } else {
        in_.close();
        in_.clear();
        in_.open(files_[file_++], std::ios::binary);
        offset_ = 0;
        if (!in_) {
          error_ = absl::NotFoundError(
              absl::StrCat("cannot read ", files_[file_ - 1], ": ", std::strerror(errno)));
        }
      }
    }
    return false;
  }

  const std::vector<std::string>& files_;
  size_t file_ = 0;  // the next file to open
  std::ifstream in_;
  uint64_t offset_ = 0;  // of line_ in its file
  std::string line_;
  absl::Status error_;
};

absl::Status ValidateTrainingOptions(const SentencePieceTrainingOptions& options) {
  if (options.model_type != "bpe" && options.model_type != "unigram") {
    return absl::InvalidArgumentError(absl::StrCat(
        "model_type: must be \"bpe\" or \"unigram\", got \"", options.model_type, "\""));
  }
  // Byte fallback's 256 pieces and <unk>, <s>, </s> come first.
  if (options.vocab_size < 260 || options.vocab_size > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size: must be between 260 and 1000000, got ", options.vocab_size));
  }
  if (options.num_threads < 1 || options.max_sentences < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads and max_sentences: must be at least 1, got ",
                     options.num_threads, " and ", options.max_sentences));
  }
  return absl::OkStatus();
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&& other) noexcept
    : api_(other.api_),
      processor_(std::exchange(other.processor_, nullptr)),
      lines_encode_alike_(other.lines_encode_alike_) {}

SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&& other) noexcept {
  if (this != &other) {
    if (processor_ != nullptr) api_->destroy(processor_);
    api_ = other.api_;
    processor_ = std::exchange(other.processor_, nullptr);
    lines_encode_alike_ = other.lines_encode_alike_;
  }
  return *this;
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (processor_ != nullptr) api_->destroy(processor_);
}

absl::StatusOr<SentencePieceTokenizer> SentencePieceTokenizer::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (!in || !(bytes << in.rdbuf()) || in.bad()) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<SentencePieceTokenizer> tokenizer = FromSerializedProto(bytes.str());
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<SentencePieceTokenizer> SentencePieceTokenizer::FromSerializedProto(
    std::string_view proto) {
  ASSIGN_OR_RETURN(const PaciSentencePieceApi* api, Shim());
  ShimBuffer<char> error{api};
  void* processor = api->load(proto.data(), proto.size(), &error.data);
  if (processor == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("not a SentencePiece model: ", error.data));
  }
  SentencePieceTokenizer tokenizer(api, processor);
  if (!api->byte_fallback(processor)) {
    return absl::InvalidArgumentError(
        "a SentencePiece model without byte fallback: characters it has no piece for would "
        "become <unk>");
  }
  // A probe of what could differ: leading, doubled and trailing spaces, an empty line.
  constexpr std::string_view kProbe = "In the  beginning\n God created\n\nthe heaven \nand";
  ASSIGN_OR_RETURN(const std::vector<int32_t> whole, tokenizer.EncodeSpan(kProbe));
  tokenizer.lines_encode_alike_ = true;
  ASSIGN_OR_RETURN(const std::vector<int32_t> by_line, tokenizer.Encode(kProbe));
  tokenizer.lines_encode_alike_ = whole == by_line;
  return tokenizer;
}

absl::StatusOr<SentencePieceTokenizer> SentencePieceTokenizer::Train(
    const std::vector<std::string>& text_files, const SentencePieceTrainingOptions& options) {
  RETURN_IF_ERROR(ValidateTrainingOptions(options));
  // Whitespace kept and nothing normalized, so that Decode(Encode(text)) is
  // the text, newlines included (they fall back to bytes).
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"num_threads", std::to_string(options.num_threads)},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"hard_vocab_limit", "false"},
  };
  ASSIGN_OR_RETURN(const PaciSentencePieceApi* api, Shim());
  std::vector<const char*> keys, values;
  for (const auto& [key, value] : args) {
    keys.push_back(key.c_str());
    values.push_back(value.c_str());
  }
  LineReader lines(text_files);
  ShimBuffer<char> proto{api}, error{api};
  size_t proto_size = 0;
  proto.data = api->train(keys.data(), values.data(), keys.size(), &LineReader::Next, &lines,
                          kTrainingSeed, &proto_size, &error.data);
  if (!lines.error().ok()) return lines.error();
  if (proto.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("training a SentencePiece model failed: ", error.data));
  }
  return FromSerializedProto(std::string_view(proto.data, proto_size));
}

int SentencePieceTokenizer::vocab_size() const { return api_->piece_size(processor_); }

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text) const {
  if (const size_t bad = FindInvalidUtf8(text); bad != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  }
  // Line by line where that gives the same ids: SentencePiece takes several
  // times longer for one long text than for its lines.
  if (!lines_encode_alike_) return EncodeSpan(text);
  std::vector<int32_t> all;
  for (size_t begin = 0, end; begin < text.size(); begin = end) {
    end = std::min(text.find('\n', begin), text.size() - 1) + 1;
    ASSIGN_OR_RETURN(const std::vector<int32_t> ids, EncodeSpan(text.substr(begin, end - begin)));
    all.insert(all.end(), ids.begin(), ids.end());
  }
  return all;
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodeSpan(
    std::string_view text) const {
  ShimBuffer<int32_t> ids{api_};
  ShimBuffer<char> error{api_};
  const int64_t count = api_->encode(processor_, text.data(), text.size(), &ids.data, &error.data);
  if (count < 0) return absl::InternalError(absl::StrCat("SentencePiece: ", error.data));
  return std::vector<int32_t>(ids.data, ids.data + count);
}

std::string SentencePieceTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<int32_t> known = ids;
  for (int32_t& id : known) {
    if (id < 0 || id >= vocab_size()) id = api_->unk_id(processor_);
  }
  size_t size = 0;
  ShimBuffer<char> text{api_};
  text.data = api_->decode(processor_, known.data(), known.size(), &size);
  return std::string(text.data, size);
}

std::string SentencePieceTokenizer::Serialize() const {
  return TokenizerHeader(kind()) + ModelProto();
}

std::string SentencePieceTokenizer::ModelProto() const {
  size_t size = 0;
  ShimBuffer<char> proto{api_};
  proto.data = api_->serialize(processor_, &size);
  return std::string(proto.data, size);
}

}  // namespace paci
