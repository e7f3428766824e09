#include "worker/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace paci {
namespace {

using ::nlohmann::json;

// A header larger than this is refused before it is parsed (the format's own
// reader refuses 100 MB too).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

absl::Status Bad(const std::string& what, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file ", what, ": ", problem));
}

// numel * element size of `shape`, or nullopt-like -1 on a negative
// dimension or an overflow past int64.
int64_t ByteSize(const std::vector<int64_t>& shape, int element_size) {
  int64_t bytes = element_size;
  for (int64_t dim : shape) {
    if (dim < 0) return -1;
    if (dim != 0 && bytes > std::numeric_limits<int64_t>::max() / dim) return -1;
    bytes *= dim;
  }
  return bytes;
}

}  // namespace

int SafetensorsDtypeSize(std::string_view dtype) {
  static const std::pair<std::string_view, int> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8}};
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return 0;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& what) {
  if (bytes.size() < 8) {
    return Bad(what, absl::StrCat("is ", bytes.size(), " bytes, shorter than its 8-byte header length"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_size > kMaxHeaderBytes || header_size > bytes.size() - 8) {
    return Bad(what, absl::StrCat("its header length ", header_size, " exceeds ",
                                  header_size > kMaxHeaderBytes ? "the 100 MB limit"
                                                                : "the file"));
  }
  const std::string_view header = bytes.substr(8, header_size);
  const std::string_view data = bytes.substr(8 + header_size);
  const json parsed = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return Bad(what, "its header is not a JSON object");

  SafetensorsFile file;
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> extents;
  for (const auto& [name, entry] : parsed.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Bad(what, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return Bad(what, absl::StrCat("__metadata__ ", key, " is not a string"));
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string tensor_name = name;  // a structured binding cannot be captured before C++20
    const auto fail = [&](const std::string& problem) {
      return Bad(what, absl::StrCat("tensor \"", tensor_name, "\" ", problem));
    };
    if (!entry.is_object()) return fail("is not an object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) return fail("has no dtype string");
    SafeTensor tensor;
    tensor.dtype = dtype->get<std::string>();
    const int element_size = SafetensorsDtypeSize(tensor.dtype);
    if (element_size == 0) return fail(absl::StrCat("has dtype ", tensor.dtype, ", which paci does not read"));
    if (shape == entry.end() || !shape->is_array()) return fail("has no shape array");
    for (const json& dim : *shape) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < 0) return fail("has a shape entry that is not a non-negative integer");
      tensor.shape.push_back(dim.get<int64_t>());
    }
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return fail("has no data_offsets [begin, end] of non-negative integers");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > data.size()) {
      return fail(absl::StrCat("has data_offsets [", begin, ", ", end, "] outside the ",
                               data.size(), " data bytes"));
    }
    const int64_t expected = ByteSize(tensor.shape, element_size);
    if (expected < 0 || static_cast<uint64_t>(expected) != end - begin) {
      return fail(absl::StrCat("has ", end - begin, " bytes, its dtype ", tensor.dtype,
                               " and shape [", absl::StrJoin(tensor.shape, ", "), "] make ",
                               expected < 0 ? std::string("too many") : absl::StrCat(expected)));
    }
    tensor.data = data.substr(begin, end - begin);
    extents.push_back({{static_cast<int64_t>(begin), static_cast<int64_t>(end)}, name});
    file.tensors.emplace(name, std::move(tensor));
  }
  std::sort(extents.begin(), extents.end());
  int64_t covered = 0;
  for (const auto& [extent, name] : extents) {
    if (extent.first < covered) {
      return Bad(what, absl::StrCat("tensor \"", name, "\" overlaps another tensor's bytes"));
    }
    if (extent.first > covered) {
      return Bad(what, absl::StrCat("bytes [", covered, ", ", extent.first,
                                    ") before tensor \"", name, "\" belong to no tensor"));
    }
    covered = extent.second;
  }
  if (static_cast<uint64_t>(covered) != data.size()) {
    return Bad(what, absl::StrCat("bytes [", covered, ", ", data.size(), ") belong to no tensor"));
  }
  return file;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::map<std::string, SafeTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const int element_size = SafetensorsDtypeSize(tensor.dtype);
    const int64_t expected = element_size == 0 ? -1 : ByteSize(tensor.shape, element_size);
    if (expected < 0 || static_cast<uint64_t>(expected) != tensor.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor \"", name, "\" has ", tensor.data.size(), " bytes, not what dtype ",
          tensor.dtype, " and shape [", absl::StrJoin(tensor.shape, ", "), "] make"));
    }
    header[name] = {{"dtype", tensor.dtype},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + tensor.data.size()}}};
    offset += tensor.data.size();
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff));
  out += text;
  for (const auto& [name, tensor] : tensors) out.append(tensor.data);
  return out;
}

}  // namespace paci
