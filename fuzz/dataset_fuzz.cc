// A dataset folder as a job finds it: any bytes as its one token shard, beside
// the character tokenizer of the alphabet, through Corpus::Load (the shard's
// header, size, CRC and ids checked, then memory-mapped) and the windows of a
// few micro-batches. Also any bytes after "paci-tokenizer char\n" through
// ParseTokenizer. Either may refuse, with a status; neither may crash, and a
// corpus that loads hands out only ids of its vocabulary.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "common/temp_dir.h"
#include "worker/data/char_tokenizer.h"
#include "worker/data/corpus.h"
#include "worker/data/token_shards.h"
#include "worker/data/tokenizer.h"

namespace {

const paci::TempDir& Folder() {
  static const auto* dir = new paci::TempDir("dataset-fuzz");
  return *dir;
}

void Write(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

void LoadShard(std::string_view bytes) {
  static const auto* tokenizer =
      new paci::CharTokenizer(*paci::CharTokenizer::FromText("abcdefghijklmnopqrstuvwxyz .\n"));
  Write(Folder().path() + "/" + paci::kDatasetTokenizerFile, tokenizer->Serialize());
  Write(paci::TokenShardPath(Folder().path(), 0), bytes);
  paci::CorpusOptions options;
  options.dataset = Folder().path();
  options.seq_len = 4;
  options.micro_batch_size = 2;
  options.validation_fraction = 0.25;
  absl::StatusOr<paci::Corpus> corpus = paci::Corpus::Load(options);
  if (!corpus.ok()) return;
  for (uint64_t id = 0; id < 4; ++id) {
    for (const auto& windows : {corpus->TrainingWindows(id), corpus->ValidationWindows(id)}) {
      for (int32_t token : windows) {
        if (token < 0 || token >= tokenizer->vocab_size()) std::abort();
      }
    }
  }
}

void ParseCharTokenizer(std::string_view bytes) {
  const std::string serialized = paci::TokenizerHeader("char") + std::string(bytes);
  absl::StatusOr<std::unique_ptr<paci::Tokenizer>> tokenizer =
      paci::ParseTokenizer(serialized, "fuzz");
  if (!tokenizer.ok()) return;
  if ((*tokenizer)->Serialize() != serialized) std::abort();  // it reads what it writes
  // Its own characters encode, and decode back.
  const std::string text = std::string(bytes);
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
  if (ids.ok() && (*tokenizer)->Decode(*ids) != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    LoadShard(bytes);
  } else {
    ParseCharTokenizer(bytes);
  }
  return 0;
}
