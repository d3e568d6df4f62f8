#include "core/checksum.h"

#include <fmt/format.h>
#include <xxhash.h>

namespace sinkq {

std::string checksum(std::span<const std::byte> bytes, uint64_t seed) {
  return fmt::format("{:016x}", uint64_t(XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed)));
}

uint64_t checksum_seed(std::string_view label) { return uint64_t(XXH3_64bits(label.data(), label.size())); }

}  // namespace sinkq
