#include "common/atomic_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace paci {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  static std::string Read(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream bytes;
    bytes << file.rdbuf();
    return bytes.str();
  }

  // The names in the folder: a temporary file left behind shows here.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  const TempDir temp_{"atomic-file"};
  const std::string dir_ = temp_.path();
  const std::string path_ = dir_ + "/state";
};

TEST_F(AtomicFileTest, WritesAndReplacesTheContentsAndLeavesOnlyTheFile) {
  ASSERT_TRUE(WriteFileAtomically(path_, "first version").ok());
  EXPECT_EQ(Read(path_), "first version");
  ASSERT_TRUE(WriteFileAtomically(path_, "2").ok());
  EXPECT_EQ(Read(path_), "2");
  ASSERT_TRUE(WriteFileAtomically(path_, "").ok());
  EXPECT_EQ(Read(path_), "");
  EXPECT_THAT(Names(), ElementsAre("state"));
}

TEST_F(AtomicFileTest, KeepsEveryByte) {
  std::string bytes(3 << 20, '\0');  // larger than the stream's buffer, with NULs
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  ASSERT_TRUE(WriteFileAtomically(path_, bytes).ok());
  EXPECT_TRUE(Read(path_) == bytes);
}

// Small pieces through the buffer and large ones past it, in order.
TEST_F(AtomicFileTest, StreamsWhatTheCallbackWrites) {
  const std::string large(200 * 1024, 'L');
  std::string expected;
  const absl::Status status = WriteFileAtomically(path_, [&](std::ostream& out) {
    for (int i = 0; i < 1000; ++i) {
      out << i << ',';
      out.put('.');
      expected += std::to_string(i) + ",.";
      if (i % 300 == 0) {
        out << large;
        expected += large;
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(Read(path_) == expected);
  EXPECT_THAT(Names(), ElementsAre("state"));
}

TEST_F(AtomicFileTest, AMissingFolderIsAnErrorNamingThePath) {
  const std::string path = dir_ + "/no-such-folder/state";
  const absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(path), HasSubstr(std::strerror(ENOENT))));
  EXPECT_THAT(Names(), ElementsAre());
}

TEST_F(AtomicFileTest, ACallbackErrorMidwayLeavesTheOldFileAndNoTemporaryFile) {
  ASSERT_TRUE(WriteFileAtomically(path_, "old contents").ok());
  const absl::Status status = WriteFileAtomically(path_, [](std::ostream& out) {
    out << std::string(100 * 1024, 'n');  // some of it reaches the file
    return absl::DataLossError("the source ran dry");
  });
  EXPECT_EQ(status, absl::DataLossError("the source ran dry"));
  EXPECT_EQ(Read(path_), "old contents");
  EXPECT_THAT(Names(), ElementsAre("state"));
}

TEST_F(AtomicFileTest, AThrowingCallbackLeavesTheOldFileAndNoTemporaryFile) {
  ASSERT_TRUE(WriteFileAtomically(path_, "old contents").ok());
  const auto throwing = [](std::ostream& out) -> absl::Status {
    out << "partial";
    throw std::runtime_error("serializer failed");
  };
  EXPECT_THROW((void)WriteFileAtomically(path_, throwing), std::runtime_error);
  EXPECT_EQ(Read(path_), "old contents");
  EXPECT_THAT(Names(), ElementsAre("state"));
}

// A write the disk refuses midway (here the file size limit: EFBIG) is the
// system's reason, naming the path, and changes nothing.
TEST_F(AtomicFileTest, AFailedWriteLeavesTheOldFileByteIdentical) {
  const std::string old(5000, 'o');
  ASSERT_TRUE(WriteFileAtomically(path_, old).ok());
  struct rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &limit), 0);
  const struct rlimit saved = limit;
  limit.rlim_cur = 4096;
  signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing us
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const absl::Status status = WriteFileAtomically(path_, std::string(10000, 'n'));
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, SIG_DFL);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(path_), HasSubstr(std::strerror(EFBIG))));
  EXPECT_TRUE(Read(path_) == old);
  EXPECT_THAT(Names(), ElementsAre("state"));
}

TEST_F(AtomicFileTest, AFailedRenameIsAnErrorAndLeavesNoTemporaryFile) {
  fs::create_directories(path_ + "/not-empty");  // a folder there: rename cannot replace it
  const absl::Status status = WriteFileAtomically(path_, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), AllOf(HasSubstr("cannot rename"), HasSubstr(path_)));
  EXPECT_TRUE(fs::is_directory(path_ + "/not-empty"));
  EXPECT_THAT(Names(), ElementsAre("state"));
}

// A new file's mode is what open(2) would make, not mkstemp's 0600: other
// users (a worker image's) read checkpoints and datasets.
TEST_F(AtomicFileTest, TheFileHasTheModeOfAPlainlyCreatedOne) {
  const mode_t saved = umask(022);
  const absl::Status status = WriteFileAtomically(path_, "x");
  umask(saved);
  ASSERT_TRUE(status.ok()) << status;
  struct stat info;
  ASSERT_EQ(stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
}

TEST_F(AtomicFileTest, APathWithoutAFolderIsInTheWorkingFolder) {
  const fs::path saved = fs::current_path();
  fs::current_path(dir_);
  const absl::Status status = WriteFileAtomically("here", "x");
  fs::current_path(saved);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(Read(dir_ + "/here"), "x");
}

// Writers of one path never share a temporary file: the file ends up as one
// of them wrote it, whole.
TEST_F(AtomicFileTest, ConcurrentWritersLeaveOneWholeVersion) {
  const std::string a(100 * 1024, 'a'), b(70 * 1024, 'b');
  std::vector<std::thread> writers;
  std::vector<absl::Status> statuses(8);
  for (size_t w = 0; w < statuses.size(); ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 20 && statuses[w].ok(); ++i) {
        statuses[w] = WriteFileAtomically(path_, w % 2 == 0 ? a : b);
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  for (const absl::Status& status : statuses) EXPECT_TRUE(status.ok()) << status;
  const std::string last = Read(path_);
  EXPECT_TRUE(last == a || last == b);
  EXPECT_THAT(Names(), ElementsAre("state"));
}

TEST_F(AtomicFileTest, SyncFolderNamesAMissingFolder) {
  EXPECT_TRUE(SyncFolder(dir_).ok());
  const absl::Status status = SyncFolder(dir_ + "/gone");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir_ + "/gone"));
}

TEST_F(AtomicFileTest, AStagingFolderAppearsWholeOnCommitAndLeavesNothingOtherwise) {
  const std::string destination = dir_ + "/dataset";
  {
    absl::StatusOr<std::unique_ptr<StagingFolder>> staging = StagingFolder::Create(destination);
    ASSERT_TRUE(staging.ok()) << staging.status();
    ASSERT_TRUE(WriteFileAtomically((*staging)->path() + "/a", "half").ok());
    EXPECT_THAT(Names(), ElementsAre(HasSubstr(".dataset.tmp-")));
  }
  EXPECT_THAT(Names(), ElementsAre());  // dropped before Commit: gone with its file
  fs::create_directory(destination);    // an empty folder there is replaced
  absl::StatusOr<std::unique_ptr<StagingFolder>> staging = StagingFolder::Create(destination);
  ASSERT_TRUE(staging.ok()) << staging.status();
  ASSERT_TRUE(WriteFileAtomically((*staging)->path() + "/a", "whole").ok());
  ASSERT_TRUE((*staging)->Commit().ok());
  staging->reset();
  EXPECT_THAT(Names(), ElementsAre("dataset"));
  EXPECT_EQ(Read(destination + "/a"), "whole");
  struct stat info;
  ASSERT_EQ(::stat(destination.c_str(), &info), 0);
  const mode_t mask = umask(0);
  umask(mask);
  EXPECT_EQ(info.st_mode & 0777, 0777 & ~mask);  // as mkdir would make it, not mkdtemp's 0700

  const absl::Status refused = StagingFolder::Create(dir_ + "/gone/dataset").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.message()), HasSubstr(dir_ + "/gone/dataset"));
}

}  // namespace
}  // namespace paci
