// libpaci_sentencepiece: sentencepiece_shim.h's functions over
// libsentencepiece. No Abseil and no protobuf of ours here: see the header.

#include "worker/data/sentencepiece_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

// Exported by libsentencepiece, not declared in its headers.
namespace sentencepiece::logging {
void SetMinLogLevel(int level);
}  // namespace sentencepiece::logging

namespace {

using sentencepiece::SentencePieceProcessor;

// SentencePiece logs its progress and warnings to std::cerr, lines that would
// interleave with pacictl's progress bar; its errors also come back as a
// status. Only fatal messages (which abort in any case) are left on.
constexpr int kLogFatalOnly = 3;

char* Copy(const std::string& bytes, size_t* size) {
  char* buffer = static_cast<char*>(std::malloc(bytes.size() + 1));
  std::memcpy(buffer, bytes.data(), bytes.size());
  buffer[bytes.size()] = '\0';
  if (size != nullptr) *size = bytes.size();
  return buffer;
}

const SentencePieceProcessor& Of(const void* processor) {
  return *static_cast<const SentencePieceProcessor*>(processor);
}

void* Load(const char* proto, size_t size, char** error) {
  auto processor = std::make_unique<SentencePieceProcessor>();
  const sentencepiece::util::Status loaded =
      processor->LoadFromSerializedProto(std::string_view(proto, size));
  if (!loaded.ok()) {
    *error = Copy(loaded.message(), nullptr);
    return nullptr;
  }
  return processor.release();
}

void Destroy(void* processor) { delete static_cast<SentencePieceProcessor*>(processor); }
int PieceSize(const void* processor) { return Of(processor).GetPieceSize(); }
int UnkId(const void* processor) { return Of(processor).unk_id(); }
int ByteFallback(const void* processor) {
  return Of(processor).IsByte(Of(processor).PieceToId("<0x00>")) ? 1 : 0;
}

int64_t Encode(const void* processor, const char* text, size_t size, int32_t** ids,
               char** error) {
  std::vector<int> encoded;
  const sentencepiece::util::Status status =
      Of(processor).Encode(std::string_view(text, size), &encoded);
  if (!status.ok()) {
    *error = Copy(status.message(), nullptr);
    return -1;
  }
  *ids = static_cast<int32_t*>(std::malloc(encoded.size() * sizeof(int32_t) + 1));
  for (size_t i = 0; i < encoded.size(); ++i) (*ids)[i] = encoded[i];
  return static_cast<int64_t>(encoded.size());
}

char* Decode(const void* processor, const int32_t* ids, size_t count, size_t* size) {
  return Copy(Of(processor).DecodeIds(std::vector<int>(ids, ids + count)), size);
}

char* Serialize(const void* processor, size_t* size) {
  return Copy(Of(processor).serialized_model_proto(), size);
}

// The lines of Train's `next` callback as SentencePiece's iterator.
class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  CallbackIterator(int (*next)(void*, const char**, size_t*), void* context)
      : next_(next), context_(context) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override {
    const char* line = nullptr;
    size_t size = 0;
    const int more = next_(context_, &line, &size);
    done_ = more != 1;
    failed_ = more < 0;
    if (!done_) line_.assign(line, size);
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (!failed_) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument,
                                       "the input could not be read");
  }

 private:
  int (*const next_)(void*, const char**, size_t*);
  void* const context_;
  std::string line_;
  bool done_ = false;
  bool failed_ = false;
};

char* Train(const char* const* keys, const char* const* values, size_t count,
            int (*next)(void*, const char**, size_t*), void* context, unsigned int seed,
            size_t* proto_size, char** error) {
  std::unordered_map<std::string, std::string> args;
  for (size_t i = 0; i < count; ++i) args[keys[i]] = values[i];
  sentencepiece::SetRandomGeneratorSeed(seed);
  CallbackIterator lines(next, context);
  std::string proto;
  const sentencepiece::util::Status trained =
      sentencepiece::SentencePieceTrainer::Train(args, &lines, &proto);
  if (!trained.ok()) {
    *error = Copy(trained.message(), nullptr);
    return nullptr;
  }
  return Copy(proto, proto_size);
}

void FreeBuffer(void* buffer) { std::free(buffer); }

constexpr PaciSentencePieceApi kApi = {
    PACI_SENTENCEPIECE_API_VERSION, Load, Destroy, PieceSize, UnkId, ByteFallback, Encode,
    Decode, Serialize, Train, FreeBuffer,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const PaciSentencePieceApi*
paci_sentencepiece_api(void) {
  sentencepiece::logging::SetMinLogLevel(kLogFatalOnly);
  return &kApi;
}
