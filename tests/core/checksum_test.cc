// core/checksum.h: XXH3-64 with the published known answer, and the properties the artifact's
// checks rely on (a flipped byte, a different seed or a different label change the checksum).
#include "core/checksum.h"

#include <gtest/gtest.h>

#include <string>

namespace sinkq {
namespace {

TEST(Checksum, KnownAnswerAndSensitivity) {
  // XXH3_64bits("") = 0x2D06800538D394C2 (xxHash's reference value for empty input, seed 0).
  EXPECT_EQ(checksum(std::string_view{}), "2d06800538d394c2");
  std::string s(1000, 'x');
  const std::string a = checksum(s);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(checksum(s), a);  // deterministic
  for (size_t i : {size_t(0), size_t(499), size_t(999)}) {
    std::string t = s;
    t[i] ^= 1;  // one bit anywhere
    EXPECT_NE(checksum(t), a) << i;
  }
  EXPECT_NE(checksum(s, checksum_seed("F16[10,100]")), checksum(s, checksum_seed("BF16[10,100]")));
  EXPECT_NE(checksum(s, checksum_seed("F16[10,100]")), checksum(s, checksum_seed("F16[100,10]")));
}

}  // namespace
}  // namespace sinkq
