#include "worker/runtime/pickle_memo.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace paci {
namespace {

// A little-endian unsigned integer of `bytes` bytes at `at`.
uint64_t LittleEndian(std::string_view pickle, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(pickle[at + i]);
  }
  return value;
}

}  // namespace

absl::Status CheckPickleMemoIds(std::string_view pickle) {
  const uint64_t limit = pickle.size();
  auto refuse = [&](size_t at, uint64_t id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "its pickle stores memo entry ", id, " at byte ", at, ", past its ", limit,
        " bytes (a table of that many entries would be allocated)"));
  };
  size_t at = 0;
  while (at < pickle.size()) {
    const unsigned char op = static_cast<unsigned char>(pickle[at]);
    const size_t arg = at + 1;
    size_t next;  // the offset of the next instruction
    // An argument of `n` bytes; one whose length is the `n`-byte integer first.
    auto fixed = [&](uint64_t n) { return n <= pickle.size() - arg ? arg + n : std::string::npos; };
    auto counted = [&](int n) {
      if (fixed(n) == std::string::npos) return std::string::npos;
      const uint64_t length = LittleEndian(pickle, arg, n);
      return length <= pickle.size() - arg - n ? arg + n + length : std::string::npos;
    };
    auto lines = [&](int n) {  // `n` newline-terminated arguments
      size_t end = arg;
      for (int i = 0; i < n && end != std::string::npos; ++i) {
        end = pickle.find('\n', end);
        if (end != std::string::npos) ++end;
      }
      return end;
    };
    switch (op) {
      case '(': case '.': case '0': case '1': case '2': case 'N': case 'Q': case 'R':
      case 'a': case 'b': case 'd': case '}': case 'e': case 'l': case ']': case 'o':
      case 's': case 't': case ')': case 'u': case 0x81: case 0x85: case 0x86: case 0x87:
      case 0x88: case 0x89: case 0x8f: case 0x90: case 0x91: case 0x92: case 0x93: case 0x94:
        next = arg;  // no argument (MEMOIZE numbers its entry itself)
        break;
      case 'F': case 'I': case 'L': case 'P': case 'S': case 'V': case 'g':
        next = lines(1);
        break;
      case 'p': {  // PUT: the id in decimal
        next = lines(1);
        if (next == std::string::npos) return absl::OkStatus();
        const std::string text(pickle.substr(arg, next - 1 - arg));
        char* end = nullptr;
        const unsigned long long id = std::strtoull(text.c_str(), &end, 10);
        if (end != text.c_str() && id > limit) return refuse(at, id);
        break;
      }
      case 'c': case 'i':
        next = lines(2);
        break;
      case 'K': case 'h': case 'q': case 0x80: case 0x82:
        next = fixed(1);
        break;
      case 'M': case 0x83:
        next = fixed(2);
        break;
      case 'J': case 'j': case 0x84:
        next = fixed(4);
        break;
      case 'r':  // LONG_BINPUT
        next = fixed(4);
        if (next != std::string::npos && LittleEndian(pickle, arg, 4) > limit) {
          return refuse(at, LittleEndian(pickle, arg, 4));
        }
        break;
      case 'G': case 0x95:
        next = fixed(8);
        break;
      case 'U': case 'C': case 0x8a: case 0x8c:
        next = counted(1);
        break;
      case 'T': case 'X': case 'B': case 0x8b:
        next = counted(4);
        break;
      case 0x8d: case 0x8e:
        next = counted(8);
        break;
      default:
        return absl::OkStatus();  // unknown: the unpickler refuses it here
    }
    if (next == std::string::npos) return absl::OkStatus();  // truncated: likewise
    if (op == '.') return absl::OkStatus();                   // STOP: the end
    at = next;
  }
  return absl::OkStatus();
}

}  // namespace paci
