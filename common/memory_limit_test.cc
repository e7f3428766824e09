#include "common/memory_limit.h"

#include <gtest/gtest.h>

namespace paci {
namespace {

TEST(MemoryLimitTest, CgroupLimitsOfBothVersionsAndTheirUnlimitedForms) {
  EXPECT_EQ(ParseCgroupMemoryLimit("8589934592\n"), uint64_t{8} << 30);  // v2 or v1, 8 GiB
  EXPECT_EQ(ParseCgroupMemoryLimit("max\n"), std::nullopt);                // v2: none
  EXPECT_EQ(ParseCgroupMemoryLimit("9223372036854771712\n"), std::nullopt);  // v1: none
  EXPECT_EQ(ParseCgroupMemoryLimit(""), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("lots"), std::nullopt);
}

TEST(MemoryLimitTest, MemTotalIsReadInBytes) {
  EXPECT_EQ(ParseMemTotal("MemTotal:       24580084 kB\nMemFree:         1000 kB\n"),
            uint64_t{24580084} * 1024);
  EXPECT_EQ(ParseMemTotal("MemFree:         1000 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemTotal("MemTotal: many kB\n"), std::nullopt);
}

TEST(MemoryLimitTest, ThisProcessHasALimitNoLargerThanTheMachine) {
  const MemoryLimit limit = MemoryLimitOfThisProcess();
  ASSERT_GT(limit.bytes, 0u) << "neither /proc/meminfo nor a cgroup limit could be read";
  EXPECT_FALSE(limit.source.empty());
}

}  // namespace
}  // namespace paci
