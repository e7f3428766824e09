#include "worker/data/char_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace paci {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacementCharacter = 0xFFFD;

// Calls visit(code_point, byte_offset) for each code point of `text`, stopping
// at the first error visit returns. InvalidArgument
// "<what> is not valid UTF-8 at byte <offset>" on malformed input.
template <typename Visitor>
absl::Status ForEachCodePoint(std::string_view text, const char* what,
                              Visitor visit) {
  for (size_t pos = 0; pos < text.size();) {
    char32_t code_point;
    const int length = DecodeUtf8(text, pos, &code_point);
    if (length == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is not valid UTF-8 at byte ", pos));
    }
    if (absl::Status status = visit(code_point, pos); !status.ok()) {
      return status;
    }
    pos += length;
  }
  return absl::OkStatus();
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace

absl::StatusOr<CharTokenizer> CharTokenizer::FromText(std::string_view text) {
  std::vector<bool> seen(kMaxCodePoint + 1);
  absl::Status status =
      ForEachCodePoint(text, "corpus", [&](char32_t c, size_t) {
        seen[c] = true;
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  std::vector<char32_t> code_points;
  for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
    if (seen[c]) code_points.push_back(c);
  }
  return CharTokenizer(std::move(code_points));
}

absl::StatusOr<CharTokenizer> CharTokenizer::FromCodePoints(
    std::vector<char32_t> code_points) {
  for (const char32_t c : code_points) {
    if (c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "U+%04X is not a Unicode scalar value", static_cast<uint32_t>(c)));
    }
  }
  std::sort(code_points.begin(), code_points.end());
  code_points.erase(std::unique(code_points.begin(), code_points.end()),
                    code_points.end());
  return CharTokenizer(std::move(code_points));
}

absl::StatusOr<CharTokenizer> CharTokenizer::Parse(
    std::string_view code_points_utf8) {
  std::vector<char32_t> code_points;
  absl::Status status = ForEachCodePoint(
      code_points_utf8, "the vocabulary", [&](char32_t c, size_t pos) {
        if (!code_points.empty() && c <= code_points.back()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the vocabulary is not in increasing code point order at byte ",
              pos));
        }
        code_points.push_back(c);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return CharTokenizer(std::move(code_points));
}

absl::StatusOr<std::vector<int32_t>> CharTokenizer::Encode(
    std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  absl::Status status =
      ForEachCodePoint(text, "text", [&](char32_t c, size_t pos) {
        const auto it =
            std::lower_bound(code_points_.begin(), code_points_.end(), c);
        if (it == code_points_.end() || *it != c) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "character U+%04X at byte %d is not in the vocabulary",
              static_cast<uint32_t>(c), pos));
        }
        ids.push_back(static_cast<int32_t>(it - code_points_.begin()));
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return ids;
}

std::string CharTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    AppendUtf8(
        id >= 0 && id < vocab_size() ? code_points_[id] : kReplacementCharacter,
        &text);
  }
  return text;
}

std::string CharTokenizer::Serialize() const {
  std::string bytes = TokenizerHeader(kind());
  for (const char32_t c : code_points_) AppendUtf8(c, &bytes);
  return bytes;
}

}  // namespace paci
