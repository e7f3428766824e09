#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace paci {

// A Hugging Face tokenizer.json (byte-level BPE as GPT-2 and Llama 3 use, or
// any other model the file describes), run by Hugging Face's tokenizers
// library itself: its Rust crate, linked as libpaci_hf_tokenizer
// (hf_tokenizer_shim.h). Encode gives tokenizers' encode(text,
// add_special_tokens=False) ids, so Python's tokenizers and transformers'
// AutoTokenizer give the same ids for the same file. Immutable after it is
// made; Encode and Decode are thread-safe; cheap to move.
class HfTokenizer : public Tokenizer {
 public:
  // Loads a tokenizer.json (blocking file I/O). NotFound naming `path` when
  // it cannot be read; InvalidArgument naming it, with tokenizers' reason,
  // when it is not a tokenizer.json tokenizers can load.
  static absl::StatusOr<HfTokenizer> Load(const std::string& path);

  // The tokenizer of these tokenizer.json bytes. InvalidArgument
  // "not a tokenizer.json: <tokenizers' reason>" when they do not load.
  static absl::StatusOr<HfTokenizer> FromJson(std::string_view json);

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer() override;

  std::string kind() const override { return "tokenizer_json"; }
  // One more than the largest id, added (special) tokens included.
  int vocab_size() const override { return vocab_size_; }
  // InvalidArgument "text is not valid UTF-8 at byte <offset>" on malformed
  // input, Internal with tokenizers' reason should it fail otherwise. Added
  // tokens written out in the text ("<|endoftext|>") become their ids, as in
  // tokenizers.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // tokenizers' decode(ids, skip_special_tokens=False): ids it does not know
  // (outside [0, vocab_size())) are left out.
  std::string Decode(const std::vector<int32_t>& ids) const override;
  // "paci-tokenizer tokenizer_json\n", then the tokenizer.json as it was given.
  std::string Serialize() const override;
  // In a run of spaces and newlines between two printable ASCII characters
  // other than space: before the run's last space when spaces follow its
  // last newline ("\n " | " 2 And"), else past the newline when the run is
  // that newline alone. There this tokenizer encodes the two sides alike: a
  // probe of such cuts checks it when the tokenizer is made (GPT-2's and
  // Llama 3's pre-tokenizers split there). npos, never a cut, for a
  // tokenizer that fails the probe (one that adds a prefix space to each
  // text, say): each text is then encoded whole.
  size_t NextCut(std::string_view text, size_t from) const override;

  // The tokenizer.json's bytes.
  const std::string& json() const { return json_; }
  // The id of a token of the vocabulary (an added token's content too).
  std::optional<int32_t> TokenId(std::string_view token) const;

 private:
  HfTokenizer(void* tokenizer, std::string json);

  void* tokenizer_;  // owned (paci_hf_tokenizer_load's); null once moved from
  std::string json_;
  int vocab_size_ = 0;
  bool cuts_at_lines_ = false;  // whether NextCut cuts
};

}  // namespace paci
