#pragma once

// The C interface of libpaci_sentencepiece, a small shared library around
// Debian's libsentencepiece that SentencePieceTokenizer loads with dlmopen.
//
// Why: libsentencepiece carries its own protobuf-lite (3.14) and exports it.
// In a process that also links libprotobuf (3.21: gRPC, the protos, LibTorch)
// one copy replaces the other's symbols whichever is loaded first, and the
// process aborts as it starts. Loaded with dlmopen(LM_ID_NEWLM) it lives in a
// link-map namespace of its own, with its own libc and libstdc++, so only
// plain C types cross this interface, and memory the shim allocates is
// released by the shim (free_buffer): each namespace has its own heap.

#include <stddef.h>
#include <stdint.h>

extern "C" {

// Every buffer and error string the functions return is malloc'ed; the caller
// releases it with free_buffer. An error is a NUL-terminated message.
struct PaciSentencePieceApi {
  int version;  // kPaciSentencePieceApiVersion
  // A processor for the serialized ModelProto, or null with *error set.
  void* (*load)(const char* proto, size_t size, char** error);
  void (*destroy)(void* processor);
  int (*piece_size)(const void* processor);
  int (*unk_id)(const void* processor);
  // Whether the model has byte fallback: "<0x00>" is a byte piece.
  int (*byte_fallback)(const void* processor);
  // The ids of text in *ids (count returned), or -1 with *error set.
  int64_t (*encode)(const void* processor, const char* text, size_t size, int32_t** ids,
                    char** error);
  char* (*decode)(const void* processor, const int32_t* ids, size_t count, size_t* size);
  char* (*serialize)(const void* processor, size_t* size);
  // Trains a model with SentencePieceTrainer::Train(keys = values) on the
  // lines next(context, &line, &size) gives: 1 a line, 0 the end, -1 an
  // error (training stops). The serialized ModelProto, or null with *error.
  char* (*train)(const char* const* keys, const char* const* values, size_t count,
                 int (*next)(void* context, const char** line, size_t* size), void* context,
                 unsigned int seed, size_t* proto_size, char** error);
  void (*free_buffer)(void* buffer);
};

#define PACI_SENTENCEPIECE_API_VERSION 1

// The one exported symbol.
const PaciSentencePieceApi* paci_sentencepiece_api(void);

}  // extern "C"
