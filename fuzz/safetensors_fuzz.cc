// A safetensors file (a Hugging Face model's weights, checkpoint.init_from)
// through ParseSafetensors: any bytes give a parsed file whose views lie
// inside the input, or an error; never a crash or a read out of bounds.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "worker/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto file = paci::ParseSafetensors(bytes, "fuzz.safetensors");
  if (!file.ok()) return 0;
  for (const auto& [name, tensor] : file->tensors) {
    if (!tensor.data.empty() &&
        (tensor.data.data() < bytes.data() ||
         tensor.data.data() + tensor.data.size() > bytes.data() + bytes.size())) {
      std::abort();
    }
    volatile char sink = 0;
    for (char c : tensor.data) sink ^= c;  // every byte is readable
  }
  const auto again = paci::SerializeSafetensors(file->tensors, file->metadata);
  if (!again.ok()) std::abort();  // what parses serialises
  return 0;
}
