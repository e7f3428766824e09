#pragma once

// What turns text into token ids and back: the character tokenizer
// (char_tokenizer.h), SentencePiece (sentencepiece_tokenizer.h) or a Hugging
// Face tokenizer.json (hf_tokenizer.h). No Torch: pacictl prepare-data links
// it too.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace paci {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "char", "sentencepiece" (the DataSpec.tokenizer values) or
  // "tokenizer_json" (only from a dataset prepare-data made).
  virtual std::string kind() const = 0;
  // Ids are 0 .. vocab_size() - 1.
  virtual int vocab_size() const = 0;
  // The ids of `text`. SentencePiece never fails on valid UTF-8 (byte
  // fallback); the character tokenizer names a character it does not know.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  // Everything needed to rebuild it with ParseTokenizer: a header line
  // "paci-tokenizer <kind>\n" and the kind's own bytes.
  virtual std::string Serialize() const = 0;
  // Where a text may be cut into pieces that are encoded one by one: their
  // ids joined are the ids of the whole. The first such cut at a newline at
  // or after text[from] (the end of the first piece, past the newline or in
  // the whitespace after it), or npos when `text` holds none (more text after
  // it may). This one: past any newline.
  virtual size_t NextCut(std::string_view text, size_t from) const;

  // A 64-bit FNV-1a hash of Serialize(), in 16 hex digits: what a token shard
  // and a checkpoint record of the tokenizer that made them.
  std::string Id() const;
};

// The first line of Serialize() for `kind`: "paci-tokenizer <kind>\n".
std::string TokenizerHeader(std::string_view kind);

// Rebuilds a tokenizer from Serialize()'s bytes. InvalidArgument naming
// `what` (a file, a shard) when the bytes are not a tokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> ParseTokenizer(std::string_view serialized,
                                                          std::string_view what);

// Decodes the UTF-8 code point that starts at text[pos] (pos < text.size()).
// Returns its length in bytes, or 0 when the bytes there are not well-formed
// UTF-8: overlong forms, surrogates, truncated sequences, stray continuation
// bytes and code points above U+10FFFF are not.
int DecodeUtf8(std::string_view text, size_t pos, char32_t* code_point);

// The offset of the first byte of `text` that does not start a well-formed
// code point, or text.size() when all of `text` is valid UTF-8.
size_t FindInvalidUtf8(std::string_view text);

// Where a tokenizer may cut a text into separately encoded chunks: just past
// the first newline at or after begin + target_bytes, or text.size(). Both the
// corpus and prepare-data cut there, every kTokenizeChunkBytes, so a text gives
// the same tokens however many threads encode it.
size_t ChunkEnd(std::string_view text, size_t begin, size_t target_bytes);
inline constexpr size_t kTokenizeChunkBytes = size_t{1} << 20;

}  // namespace paci
