#pragma once

// The safetensors format (Hugging Face's): an 8-byte little-endian header
// length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "<name>": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces, then the tensors' raw little-endian bytes, offsets
// relative to the end of the header. What transformers, vLLM and llama.cpp's
// converters read. Pure: no Torch, so a fuzzer runs it without LibTorch.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace paci {

// One tensor: its dtype as safetensors spells it ("F32", "BF16", "F16",
// "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"), its shape, and its bytes
// (numel * the dtype's size, row-major).
struct SafeTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string_view data;
};

// The bytes of one element of `dtype`, or 0 for a dtype this reader does not know.
int SafetensorsDtypeSize(std::string_view dtype);

// A parsed file: tensors by name (their data views into the bytes parsed,
// which must outlive it) and the string metadata.
struct SafetensorsFile {
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses `bytes`, checking everything a hostile file could get wrong: the
// header's length against the size, its JSON, each entry's dtype, shape
// (non-negative, no overflow) and offsets (inside the data, the size that
// dtype and shape give, no two tensors overlapping, no bytes left unindexed).
// InvalidArgument naming `what` (the file) and the tensor at fault.
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& what);

// The file's bytes for `tensors` (in name order, the header padded so that
// the data starts 8-byte aligned, as the format's own writer pads it) and
// `metadata`. InvalidArgument naming a
// tensor whose bytes do not match its dtype and shape.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::map<std::string, SafeTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace paci
