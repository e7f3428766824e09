#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace paci {

// A character-level tokenizer: maps each distinct Unicode code point of a text
// to an id, ids sorted by code point (so the same text always gives the same
// vocabulary). Immutable after FromText; thread-safe; cheap to move.
class CharTokenizer : public Tokenizer {
 public:
  // Builds the vocabulary of `text`. InvalidArgument
  // "corpus is not valid UTF-8 at byte <offset>" when `text` is not
  // well-formed UTF-8 (overlong forms, surrogates, truncated sequences, stray
  // continuation bytes, code points above U+10FFFF).
  static absl::StatusOr<CharTokenizer> FromText(std::string_view text);

  // The tokenizer of these code points (any order, repeats allowed), e.g. the
  // union of several texts' vocabularies. InvalidArgument naming one that is
  // a surrogate or above U+10FFFF.
  static absl::StatusOr<CharTokenizer> FromCodePoints(std::vector<char32_t> code_points);

  // Rebuilds the tokenizer from what Serialize() wrote after its header line:
  // the code points in increasing order, as UTF-8. InvalidArgument when the
  // bytes are not valid UTF-8 or not strictly increasing.
  static absl::StatusOr<CharTokenizer> Parse(std::string_view code_points_utf8);

  std::string kind() const override { return "char"; }

  // The number of distinct code points; ids are 0 .. vocab_size() - 1.
  int vocab_size() const override { return static_cast<int>(code_points_.size()); }
  // The code points in id order (increasing).
  const std::vector<char32_t>& code_points() const { return code_points_; }

  // One id per code point of `text`. InvalidArgument naming the character
  // (as U+XXXX) and its byte offset when it is not in the vocabulary, or the
  // byte offset when `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;

  // The UTF-8 text of `ids`; an id outside [0, vocab_size()) decodes to
  // U+FFFD REPLACEMENT CHARACTER.
  std::string Decode(const std::vector<int32_t>& ids) const override;

  // "paci-tokenizer char\n", then the code points in id order as UTF-8.
  std::string Serialize() const override;

 private:
  explicit CharTokenizer(std::vector<char32_t> code_points)
      : code_points_(std::move(code_points)) {}

  std::vector<char32_t> code_points_;  // sorted, distinct; index is the id
};

}  // namespace paci
