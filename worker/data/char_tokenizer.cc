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

// Decodes the code point that starts at text[pos]. Returns its length in
// bytes, or 0 when the bytes there are not well-formed UTF-8. The bounds on
// the second byte follow Table 3-7 of the Unicode standard, which is what
// excludes overlong forms, surrogates and code points above U+10FFFF.
int DecodeCodePoint(std::string_view text, size_t pos, char32_t* code_point) {
  const auto byte_at = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte_at(pos);
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  size_t length;
  char32_t value;
  uint8_t low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() - pos < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    const uint8_t next = byte_at(pos + i);
    if (next < low || next > high) return 0;
    low = 0x80;
    high = 0xBF;
    value = (value << 6) | (next & 0x3F);
  }
  *code_point = value;
  return static_cast<int>(length);
}

// Calls visit(code_point, byte_offset) for each code point of `text`, stopping
// at the first error visit returns. InvalidArgument
// "<what> is not valid UTF-8 at byte <offset>" on malformed input.
template <typename Visitor>
absl::Status ForEachCodePoint(std::string_view text, const char* what,
                              Visitor visit) {
  for (size_t pos = 0; pos < text.size();) {
    char32_t code_point;
    const int length = DecodeCodePoint(text, pos, &code_point);
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

}  // namespace paci
