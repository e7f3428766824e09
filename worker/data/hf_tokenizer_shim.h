#pragma once

// The C interface of libpaci_hf_tokenizer: Hugging Face's tokenizers crate
// (Rust, worker/data/hf_tokenizer_shim/) as a static library that HfTokenizer
// links. Only plain C types cross it; no Rust panic does (each function
// catches them and reports an error). Every buffer and error message a
// function returns is malloc'ed by the library and released by the caller
// with paci_hf_tokenizer_free; an error is a NUL-terminated message.
//
// A tokenizer is immutable once loaded: encode, decode, vocab_size and
// token_to_id may be called from any number of threads at once.

#include <stddef.h>
#include <stdint.h>

extern "C" {

// A tokenizer from the bytes of a tokenizer.json, or null with *error set to
// tokenizers' reason (e.g. "expected value at line 1 column 1").
void* paci_hf_tokenizer_load(const char* json, size_t size, char** error);
void paci_hf_tokenizer_destroy(void* tokenizer);

// One more than the largest id, added (special) tokens included.
int64_t paci_hf_tokenizer_vocab_size(const void* tokenizer);

// The id of a token (its exact string, as in the vocabulary), or -1.
int64_t paci_hf_tokenizer_token_to_id(const void* tokenizer, const char* token, size_t size);

// The ids of UTF-8 text, no special tokens added (tokenizers'
// encode(text, add_special_tokens=false)): their count with the ids in *ids
// (null when there are none), or -1 with *error set (text not UTF-8).
int64_t paci_hf_tokenizer_encode(const void* tokenizer, const char* text, size_t size,
                                 uint32_t** ids, char** error);

// The text of ids (tokenizers' decode(ids, skip_special_tokens=false); an id
// the tokenizer does not know is left out), NUL-terminated, its length in
// *size; null with *error set on failure.
char* paci_hf_tokenizer_decode(const void* tokenizer, const uint32_t* ids, size_t count,
                               size_t* size, char** error);

void paci_hf_tokenizer_free(void* buffer);

}  // extern "C"
