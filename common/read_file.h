#pragma once

// Reading a whole file, the one way every component does it: specs,
// kubeconfigs and the files they name, TLS material, corpora, tokenizers and
// Hugging Face configs. Writing one is common/atomic_file.h's.

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"

namespace paci {

// The bytes of the regular file `path`, at most `max_bytes`. NotFound
// "cannot read <path>: <reason>" (a directory too: "Is a directory");
// FailedPrecondition "<path> is a FIFO, not a regular file" for a device,
// FIFO or socket (/dev/zero would never end, a FIFO with no writer would
// hang); ResourceExhausted "<path> is larger than <max_bytes> bytes", also
// for a file that grows past it while read. Retries reads that a signal
// interrupts. Callers put their field in front of the message. A pipe is
// refused too (`pacictl train <(...)` is not a spec file).
absl::StatusOr<std::string> ReadFileToString(
    const std::string& path, uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace paci
