#pragma once

// Unpredictable values from the kernel's random source (getrandom), the one
// source of every secret and instance id: a placement's link secret, the
// coordinator's instance in page tokens and replica-group names.

#include <cstddef>
#include <cstdint>
#include <string>

namespace paci {

// `count` random bytes. Aborts if the kernel cannot give them (it blocks
// only until its pool is first seeded, at boot).
std::string RandomBytes(size_t count);
// `count` random bytes in lowercase hex (2 x count characters).
std::string RandomHex(size_t count);
uint64_t RandomUint64();

}  // namespace paci
