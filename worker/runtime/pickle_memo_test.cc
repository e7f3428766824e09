#include "worker/runtime/pickle_memo.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// A list of 1 and a 5-byte string, as protocol 2 writes it, its memo
// numbered from 0: the 'r' and 0xff bytes inside the string are no instruction.
const std::string kList = Bytes({0x80, 2, ']', 'q', 0, '(', 'K', 1, 'X', 5, 0, 0, 0}) +
                          "r\xff\xff\xff\xff" + Bytes({'q', 1, 'e', '.'});

TEST(PickleMemoTest, APickleAsWrittenPasses) {
  EXPECT_TRUE(CheckPickleMemoIds(kList).ok());
  EXPECT_TRUE(CheckPickleMemoIds("").ok());
}

TEST(PickleMemoTest, AMemoIdPastThePicklesSizeIsRefusedNamingItsOffset) {
  // LONG_BINPUT 1596876899 (a forged checkpoint's, found by fuzz/checkpoint_fuzz.cc).
  const std::string forged =
      Bytes({0x80, 2, ']', 'r', 0x63, 0x68, 0x2e, 0x5f, '.'});
  const absl::Status status = CheckPickleMemoIds(forged);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("memo entry 1596876899 at byte 3, past its 9 bytes"));
  // The text protocol's PUT too.
  EXPECT_THAT(CheckPickleMemoIds("(lp99999\n.").message(), HasSubstr("memo entry 99999 at byte 2"));
  // An id within the pickle's size is one LibTorch could have written.
  EXPECT_TRUE(CheckPickleMemoIds(Bytes({0x80, 2, ']', 'r', 4, 0, 0, 0, '.'})).ok());
}

TEST(PickleMemoTest, AnInstructionAfterStopOrPastTheEndIsNotReadAsOne) {
  // After STOP, and inside a truncated string: left to the unpickler.
  EXPECT_TRUE(CheckPickleMemoIds(Bytes({'N', '.', 'r', 0xff, 0xff, 0xff, 0x7f})).ok());
  EXPECT_TRUE(CheckPickleMemoIds(Bytes({'X', 0xff, 0, 0, 0, 'r', 0xff, 0xff, 0xff, 0x7f})).ok());
  // An unknown opcode ends the walk: the unpickler refuses it there.
  EXPECT_TRUE(CheckPickleMemoIds(Bytes({0xfe, 'r', 0xff, 0xff, 0xff, 0x7f})).ok());
}

}  // namespace
}  // namespace paci
