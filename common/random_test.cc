#include "common/random.h"

#include <set>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"

namespace paci {
namespace {

TEST(RandomTest, GivesTheBytesAskedForAndNeverTheSameTwice) {
  EXPECT_EQ(RandomBytes(0), "");
  EXPECT_EQ(RandomBytes(1000).size(), 1000u);
  const std::string hex = RandomHex(16);
  ASSERT_EQ(hex.size(), 32u);
  for (char c : hex) EXPECT_TRUE(absl::ascii_isxdigit(c) && !absl::ascii_isupper(c)) << hex;
  std::set<std::string> secrets;
  std::set<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) {
    secrets.insert(RandomHex(16));
    ids.insert(RandomUint64());
  }
  EXPECT_EQ(secrets.size(), 1000u);  // 128 bits: a repeat would be a broken source
  EXPECT_EQ(ids.size(), 1000u);
}

}  // namespace
}  // namespace paci
