// sinkq/core/checksum.h — the one checksum sinkq writes and verifies: XXH3-64 (libxxhash), as 16
// lowercase hex digits. It detects corruption and hand edits of an artifact (a flipped byte, a
// relabelled dtype, an edited recipe); it is not a signature — whoever edits a file on purpose can
// recompute it. Chosen for speed (~10+ GB/s, so verifying every tensor at load costs little next
// to reading it) over a cryptographic hash, which would add nothing against that threat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace sinkq {

// XXH3-64 of `bytes` with `seed`, as 16 lowercase hex digits.
std::string checksum(std::span<const std::byte> bytes, uint64_t seed = 0);
inline std::string checksum(std::string_view s, uint64_t seed = 0) {
  return checksum(std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size()), seed);
}
// The seed that binds a checksum to a label (a tensor's dtype and shape): XXH3-64 of the label.
uint64_t checksum_seed(std::string_view label);

}  // namespace sinkq
