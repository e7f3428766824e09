#include "worker/data/tokenizer.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/data/char_tokenizer.h"
#include "worker/data/hf_tokenizer.h"
#include "worker/data/sentencepiece_tokenizer.h"

namespace paci {
namespace {

constexpr char kHeaderPrefix[] = "paci-tokenizer ";
constexpr size_t kHeaderPrefixBytes = sizeof(kHeaderPrefix) - 1;

// Up-casts a tokenizer of one kind, or passes its error through.
template <typename T>
absl::StatusOr<std::unique_ptr<Tokenizer>> AsTokenizer(absl::StatusOr<T> tokenizer) {
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<Tokenizer>(std::make_unique<T>(*std::move(tokenizer)));
}

}  // namespace

std::string Tokenizer::Id() const {
  const std::string bytes = Serialize();
  uint64_t hash = 0xCBF29CE484222325ULL;  // FNV-1a 64 offset basis and prime
  for (const char c : bytes) {
    hash = (hash ^ static_cast<uint8_t>(c)) * 0x100000001B3ULL;
  }
  return absl::StrFormat("%016x", hash);
}

size_t Tokenizer::NextCut(std::string_view text, size_t from) const {
  const size_t newline = text.find('\n', from);
  return newline == std::string_view::npos ? newline : newline + 1;
}

std::string TokenizerHeader(std::string_view kind) {
  return absl::StrCat(kHeaderPrefix, std::string(kind), "\n");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> ParseTokenizer(std::string_view serialized,
                                                          std::string_view what) {
  const std::string source(what);
  const size_t newline = serialized.find('\n');
  if (serialized.substr(0, kHeaderPrefixBytes) != kHeaderPrefix ||
      newline == std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a tokenizer: it does not start with a line \"", kHeaderPrefix, "<kind>\""));
  }
  const std::string kind(serialized.substr(kHeaderPrefixBytes, newline - kHeaderPrefixBytes));
  const std::string_view body = serialized.substr(newline + 1);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer;
  if (kind == "char") {
    tokenizer = AsTokenizer(CharTokenizer::Parse(body));
  } else if (kind == "sentencepiece") {
    tokenizer = AsTokenizer(SentencePieceTokenizer::FromSerializedProto(body));
  } else if (kind == "tokenizer_json") {
    tokenizer = AsTokenizer(HfTokenizer::FromJson(body));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unknown tokenizer kind \"", kind,
                     "\" (\"char\", \"sentencepiece\" or \"tokenizer_json\")"));
  }
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

// The bounds on the second byte follow Table 3-7 of the Unicode standard,
// which is what excludes overlong forms, surrogates and code points above
// U+10FFFF.
int DecodeUtf8(std::string_view text, size_t pos, char32_t* code_point) {
  const auto byte_at = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte_at(pos);
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  size_t length;
  char32_t value;
  uint8_t low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() - pos < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    const uint8_t next = byte_at(pos + i);
    if (next < low || next > high) return 0;
    low = 0x80;
    high = 0xBF;
    value = (value << 6) | (next & 0x3F);
  }
  *code_point = value;
  return static_cast<int>(length);
}

size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII, the common case, eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, text.data() + pos, 8);
      if (word & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos == text.size()) break;
    char32_t code_point;
    const int length = DecodeUtf8(text, pos, &code_point);
    if (length == 0) return pos;
    pos += length;
  }
  return text.size();
}

size_t ChunkEnd(std::string_view text, size_t begin, size_t target_bytes) {
  if (text.size() - begin <= target_bytes) return text.size();
  const size_t newline = text.find('\n', begin + target_bytes);
  return newline == std::string_view::npos ? text.size() : newline + 1;
}

}  // namespace paci
