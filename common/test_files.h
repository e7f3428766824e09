#pragma once

// Files in tests: a whole file read, a file written with given bytes. No
// error handling: a test asserts on what it reads back.

#include <string>

namespace paci {

// The bytes of the file at `path`; empty when it cannot be read.
std::string ReadText(const std::string& path);

// Writes `bytes` to `path` (replacing it) and returns `path`.
std::string WriteFile(const std::string& path, const std::string& bytes);

}  // namespace paci
