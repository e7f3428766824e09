#include "worker/data/token_shards.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

constexpr char kId[] = "0123456789abcdef";
constexpr char kOtherId[] = "fedcba9876543210";

std::vector<int32_t> Ids(int n, int vocab_size) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 7919LL) % vocab_size));
  return ids;
}

absl::Status Write(const std::string& path, int vocab_size,
                   const std::vector<std::vector<int32_t>>& appends) {
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path, kId, vocab_size);
  if (!writer.ok()) return writer.status();
  for (const std::vector<int32_t>& ids : appends) {
    if (absl::Status status = writer->Append(ids); !status.ok()) return status;
  }
  return writer->Finish();
}

std::vector<int32_t> ReadAll(const TokenShard& shard) {
  std::vector<int32_t> ids(shard.size());
  shard.Copy(0, shard.size(), ids.data());
  return ids;
}

// Overwrites `bytes` at `offset` of the file.
void Patch(const std::string& path, size_t offset, const std::string& bytes) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class TokenShardsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // A finished shard of 1000 ids of a 1000-token vocabulary.
  std::string GoodShard() {
    const std::string path = Path("good.bin");
    EXPECT_TRUE(Write(path, 1000, {Ids(1000, 1000)}).ok());
    return path;
  }

  void ExpectRefused(const std::string& path, absl::StatusCode code, const std::string& what) {
    absl::StatusOr<TokenShard> shard = TokenShard::Open(path, kId, 1000);
    EXPECT_EQ(shard.status().code(), code) << shard.status();
    EXPECT_THAT(shard.status().message(), HasSubstr(path));
    EXPECT_THAT(shard.status().message(), HasSubstr(what));
  }

  TempDir dir_{"token-shards-test"};
};

TEST_F(TokenShardsTest, WrittenIdsReadBackInOrderAcrossAppends) {
  const std::vector<int32_t> first = Ids(300, 1000), second = {0, 999, 1}, third;
  ASSERT_TRUE(Write(Path("s.bin"), 1000, {first, second, third}).ok());
  absl::StatusOr<TokenShard> shard = TokenShard::Open(Path("s.bin"), kId, 1000);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<int32_t> expected = first;
  expected.insert(expected.end(), second.begin(), second.end());
  EXPECT_EQ(ReadAll(*shard), expected);
  std::vector<int32_t> middle(5);
  shard->Copy(298, 5, middle.data());
  EXPECT_EQ(middle, std::vector<int32_t>({expected.begin() + 298, expected.begin() + 303}));
}

TEST_F(TokenShardsTest, VocabulariesUpTo65536TokensTakeTwoBytesLargerOnesFour) {
  EXPECT_EQ(BytesPerToken(2), 2);
  EXPECT_EQ(BytesPerToken(65536), 2);
  EXPECT_EQ(BytesPerToken(65537), 4);
  ASSERT_TRUE(Write(Path("small.bin"), 65536, {{0, 65535, 7}}).ok());
  ASSERT_TRUE(Write(Path("large.bin"), 70000, {{0, 69999, 7}}).ok());
  EXPECT_EQ(std::filesystem::file_size(Path("small.bin")), kTokenShardHeaderBytes + 3 * 2);
  EXPECT_EQ(std::filesystem::file_size(Path("large.bin")), kTokenShardHeaderBytes + 3 * 4);
  absl::StatusOr<TokenShard> small = TokenShard::Open(Path("small.bin"), kId, 65536);
  absl::StatusOr<TokenShard> large = TokenShard::Open(Path("large.bin"), kId, 70000);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(ReadAll(*small), std::vector<int32_t>({0, 65535, 7}));
  EXPECT_EQ(ReadAll(*large), std::vector<int32_t>({0, 69999, 7}));
}

TEST_F(TokenShardsTest, AShardStaysReadableAfterItIsMoved) {
  absl::StatusOr<TokenShard> shard = TokenShard::Open(GoodShard(), kId, 1000);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<TokenShard> shards;
  shards.push_back(*std::move(shard));
  shards.reserve(10);  // moves it again
  EXPECT_EQ(ReadAll(shards[0]), Ids(1000, 1000));
}

TEST_F(TokenShardsTest, AnIdOutsideTheVocabularyIsNotWritten) {
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(Path("s.bin"), kId, 10);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const absl::Status status = writer->Append({1, 10});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("token id 10"));
  EXPECT_EQ(writer->Append({-1}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TokenShardsTest, BadMagicIsDataLossNamingTheFile) {
  const std::string path = GoodShard();
  Patch(path, 0, "NOTTOKEN");
  ExpectRefused(path, absl::StatusCode::kDataLoss, "bad magic");
}

TEST_F(TokenShardsTest, AnUnfinishedShardIsRefused) {
  {
    absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(Path("s.bin"), kId, 1000);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->Append(Ids(100, 1000)).ok());
  }
  ExpectRefused(Path("s.bin"), absl::StatusCode::kDataLoss, "bad magic");
}

TEST_F(TokenShardsTest, AnotherVersionIsDataLossNamingTheFile) {
  const std::string path = GoodShard();
  Patch(path, 8, std::string("\x02\0\0\0", 4));
  ExpectRefused(path, absl::StatusCode::kDataLoss, "version 2");
}

TEST_F(TokenShardsTest, ATruncatedShardIsDataLossNamingTheFile) {
  const std::string path = GoodShard();
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  ExpectRefused(path, absl::StatusCode::kDataLoss, "truncated");
  std::filesystem::resize_file(path, 20);
  ExpectRefused(path, absl::StatusCode::kDataLoss, "truncated");
}

TEST_F(TokenShardsTest, AFlippedPayloadByteIsDataLossByTheCrc) {
  const std::string path = GoodShard();
  Patch(path, kTokenShardHeaderBytes + 501, "\x01");
  ExpectRefused(path, absl::StatusCode::kDataLoss, "CRC-32");
}

TEST_F(TokenShardsTest, AShardOfAnotherTokenizerIsFailedPreconditionNamingTheFile) {
  const std::string path = GoodShard();
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, kOtherId, 1000);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr(std::string("made by tokenizer ") + kId));
}

TEST_F(TokenShardsTest, AShardOfAnotherIdWidthIsFailedPrecondition) {
  const std::string path = GoodShard();  // 2 bytes per token
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, kId, 70000);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
}

TEST_F(TokenShardsTest, AnIdOutsideTheVocabularyIsDataLoss) {
  const std::string path = GoodShard();  // ids up to 999
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path, kId, 500);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("token id 999"));
}

TEST_F(TokenShardsTest, AMissingShardIsNotFoundNamingIt) {
  ExpectRefused(Path("no-such.bin"), absl::StatusCode::kNotFound, "cannot open");
}

TEST_F(TokenShardsTest, ShardPathsCountFromZeroInFiveDigits) {
  EXPECT_EQ(TokenShardPath("/d", 0), "/d/shard-00000.bin");
  EXPECT_EQ(TokenShardPath("/d", 123456), "/d/shard-123456.bin");
}

}  // namespace
}  // namespace paci
