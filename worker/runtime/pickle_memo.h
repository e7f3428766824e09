#pragma once

// A look at a pickle's memo before LibTorch's unpickler reads it. The
// unpickler grows its memo table to the id a LONG_BINPUT names (16 bytes an
// entry, whatever the id: up to 64 GiB from a 5-byte instruction), so a
// forged checkpoint could take a worker's memory before any check of its
// contents. A pickle that LibTorch writes numbers its memo entries from 0, one
// per stored object: an id is never larger than the pickle itself. No torch.

#include <string_view>

#include "absl/status/status.h"

namespace paci {

// Walks the opcodes of `pickle` (protocols 0 to 4) and refuses, with
// InvalidArgument naming the offset, a memo id (LONG_BINPUT, PUT) larger than
// the pickle's size. A truncated or unknown instruction ends the walk with OK:
// the unpickler refuses it there, before any later instruction.
absl::Status CheckPickleMemoIds(std::string_view pickle);

}  // namespace paci
