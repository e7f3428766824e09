#include "worker/data/hf_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/data/hf_tokenizer_shim.h"

namespace paci {
namespace {

// A buffer of the library's, released when it goes out of scope.
template <typename T>
struct ShimBuffer {
  T* data = nullptr;
  ShimBuffer() = default;
  ShimBuffer(const ShimBuffer&) = delete;
  ShimBuffer& operator=(const ShimBuffer&) = delete;
  ~ShimBuffer() { paci_hf_tokenizer_free(data); }
};

// Whether a byte is a printable ASCII character other than space: no
// pre-tokenizer's whitespace rule applies to it, and it is a whole character.
bool IsGraphic(char c) { return c > ' ' && c < 0x7F; }
bool IsSpaceOrNewline(char c) { return c == ' ' || c == '\n'; }

// A text cut where NextCut cuts, into the pieces encoded apart: after a lone
// newline between letters, digits, punctuation and quotes; before the last of
// the spaces that start a line (Genesis' "\n  2 And"), after blank lines and
// a space at a line's end too; a contraction ("'s") at the start of a piece.
constexpr std::string_view kCutProbe[] = {
    "In the beginning God created the heaven and the earth.\n ",
    " 2 And the earth was without form, and void;\n",
    "'s darkness 3\n",
    "4 was upon the face of the deep \n\n ",
    " (and the Spirit) moved?\n",
    "\"upon the waters\"\n",
    " x \n  ",
    " y",
};

}  // namespace

HfTokenizer::HfTokenizer(void* tokenizer, std::string json)
    : tokenizer_(tokenizer), json_(std::move(json)) {}

HfTokenizer::HfTokenizer(HfTokenizer&& other) noexcept
    : tokenizer_(std::exchange(other.tokenizer_, nullptr)),
      json_(std::move(other.json_)),
      vocab_size_(other.vocab_size_),
      cuts_at_lines_(other.cuts_at_lines_) {}

HfTokenizer& HfTokenizer::operator=(HfTokenizer&& other) noexcept {
  if (this != &other) {
    paci_hf_tokenizer_destroy(tokenizer_);
    tokenizer_ = std::exchange(other.tokenizer_, nullptr);
    json_ = std::move(other.json_);
    vocab_size_ = other.vocab_size_;
    cuts_at_lines_ = other.cuts_at_lines_;
  }
  return *this;
}

HfTokenizer::~HfTokenizer() { paci_hf_tokenizer_destroy(tokenizer_); }

absl::StatusOr<HfTokenizer> HfTokenizer::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (!in || !(bytes << in.rdbuf()) || in.bad()) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<HfTokenizer> tokenizer = FromJson(bytes.str());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<HfTokenizer> HfTokenizer::FromJson(std::string_view json) {
  ShimBuffer<char> error;
  void* loaded = paci_hf_tokenizer_load(json.data(), json.size(), &error.data);
  if (loaded == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a tokenizer.json: ", error.data != nullptr ? error.data : "tokenizers refused it"));
  }
  HfTokenizer tokenizer(loaded, std::string(json));
  const int64_t vocab_size = paci_hf_tokenizer_vocab_size(loaded);
  if (vocab_size < 1 || vocab_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tokenizer.json with ", vocab_size, " ids: must have between 1 and 2^31 - 1"));
  }
  tokenizer.vocab_size_ = static_cast<int>(vocab_size);
  // Whether the pieces of a text cut where NextCut cuts encode to the ids of
  // the whole, as they do for pre-tokenizers that split at whitespace and
  // punctuation and add nothing to each text.
  // (A tokenizer that cannot encode the probe is never cut.)
  std::string whole;
  std::vector<int32_t> joined;
  bool encoded = true;
  for (const std::string_view piece : kCutProbe) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(piece);
    encoded = encoded && ids.ok();
    if (ids.ok()) joined.insert(joined.end(), ids->begin(), ids->end());
    whole += piece;
  }
  const absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(whole);
  tokenizer.cuts_at_lines_ = encoded && ids.ok() && *ids == joined;
  return tokenizer;
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text) const {
  if (const size_t bad = FindInvalidUtf8(text); bad != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  }
  ShimBuffer<uint32_t> ids;
  ShimBuffer<char> error;
  const int64_t count =
      paci_hf_tokenizer_encode(tokenizer_, text.data(), text.size(), &ids.data, &error.data);
  if (count < 0) {
    return absl::InternalError(
        absl::StrCat("tokenizers: ", error.data != nullptr ? error.data : "encode failed"));
  }
  return std::vector<int32_t>(ids.data, ids.data + count);
}

std::string HfTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<uint32_t> known;
  known.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id >= 0 && id < vocab_size_) known.push_back(static_cast<uint32_t>(id));
  }
  size_t size = 0;
  ShimBuffer<char> text, error;
  text.data = paci_hf_tokenizer_decode(tokenizer_, known.data(), known.size(), &size, &error.data);
  return text.data != nullptr ? std::string(text.data, size) : std::string();
}

std::string HfTokenizer::Serialize() const { return TokenizerHeader(kind()) + json_; }

// The cuts are where GPT-2's and Llama 3's pre-tokenizers split whatever
// follows: a run of whitespace followed by a printable character is one piece
// (or several ending in its newlines) and then its last space joined to the
// character (" 2", " And"), whether or not the text goes on.
size_t HfTokenizer::NextCut(std::string_view text, size_t from) const {
  constexpr size_t npos = std::string_view::npos;
  if (!cuts_at_lines_) return npos;
  for (size_t newline = text.find('\n', from); newline != npos;) {
    // The run of spaces and newlines around this newline: [begin, end).
    size_t begin = newline, end = newline;
    while (begin > 0 && IsSpaceOrNewline(text[begin - 1])) --begin;
    while (end < text.size() && IsSpaceOrNewline(text[end])) ++end;
    if (end == text.size()) return npos;  // what follows decides
    if (begin > 0 && IsGraphic(text[begin - 1]) && IsGraphic(text[end])) {
      if (text[end - 1] == ' ') return end - 1;  // spaces after the last newline
      if (end - begin == 1) return end;          // a lone newline
    }
    newline = text.find('\n', end);
  }
  return npos;
}

std::optional<int32_t> HfTokenizer::TokenId(std::string_view token) const {
  const int64_t id = paci_hf_tokenizer_token_to_id(tokenizer_, token.data(), token.size());
  if (id < 0) return std::nullopt;
  return static_cast<int32_t>(id);
}

}  // namespace paci
