#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

struct PaciSentencePieceApi;  // sentencepiece_shim.h

namespace paci {

// How SentencePieceTokenizer::Train makes a model.
struct SentencePieceTrainingOptions {
  std::string model_type = "bpe";  // "bpe" or "unigram"
  int vocab_size = 8000;           // byte fallback's 256 pieces included
  // Unigram models depend on the thread count (it splits the sentences), so
  // the default is the same on every machine, whatever its number of cores.
  int num_threads = 16;
  // Training reads every line of the inputs but learns from at most this many,
  // drawn uniformly (a fixed seed, so the same input gives the same model):
  // what bounds the time and memory of training on a large corpus.
  int64_t max_sentences = 300000;
};

// A SentencePiece model (BPE or unigram) with byte fallback: text the model
// has no piece for becomes the ids of its UTF-8 bytes, so any valid UTF-8
// encodes and decodes back unchanged (for models trained here, which keep
// whitespace and do not normalize). Immutable after it is made; Encode and
// Decode are thread-safe; cheap to move.
//
// SentencePiece itself is in libpaci_sentencepiece (sentencepiece_shim.h says
// why), loaded on first use from the folder lib/paci beside the running
// program's folder, or from the build tree: FailedPrecondition from every
// factory when it cannot be loaded.
class SentencePieceTokenizer : public Tokenizer {
 public:
  // Loads a .model file (blocking file I/O). NotFound naming `path` when it
  // cannot be read; InvalidArgument naming it when it is not a SentencePiece
  // model or has no byte fallback (text it does not know would become <unk>).
  static absl::StatusOr<SentencePieceTokenizer> Load(const std::string& path);

  // The model from its serialized ModelProto (the bytes of a .model file).
  // InvalidArgument when they do not parse or the model has no byte fallback.
  static absl::StatusOr<SentencePieceTokenizer> FromSerializedProto(std::string_view proto);

  // Trains a model on the lines of `text_files` (blocking; seconds to a
  // minute). Deterministic: the same files and options give the same model.
  // Not to be called concurrently: SentencePiece's training has global state.
  // InvalidArgument naming the option for a bad model_type, vocab_size or
  // num_threads, naming the file and byte offset for text that is not valid
  // UTF-8, or with SentencePiece's reason (e.g. a vocab_size too large for a
  // small corpus); NotFound naming a file that cannot be read.
  static absl::StatusOr<SentencePieceTokenizer> Train(const std::vector<std::string>& text_files,
                                                      const SentencePieceTrainingOptions& options);

  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer() override;

  std::string kind() const override { return "sentencepiece"; }
  int vocab_size() const override;
  // InvalidArgument "text is not valid UTF-8 at byte <offset>" on malformed
  // input; never fails otherwise.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  // An id outside [0, vocab_size()) decodes as <unk> does.
  std::string Decode(const std::vector<int32_t>& ids) const override;
  // "paci-tokenizer sentencepiece\n", then the serialized ModelProto.
  std::string Serialize() const override;
  // The serialized ModelProto: what a .model file holds.
  std::string ModelProto() const;

 private:
  SentencePieceTokenizer(const PaciSentencePieceApi* api, void* processor)
      : api_(api), processor_(processor) {}

  // The ids of `text`, in one call of SentencePiece.
  absl::StatusOr<std::vector<int32_t>> EncodeSpan(std::string_view text) const;

  const PaciSentencePieceApi* api_;
  void* processor_;  // owned; null once moved from
  // Whether encoding line by line gives the ids of the whole text (models
  // trained here); false for a model that normalizes whitespace or adds a
  // dummy prefix ("▁") to each text it is given, as SentencePiece's defaults do.
  bool lines_encode_alike_ = false;
};

}  // namespace paci
