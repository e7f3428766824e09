#include "tools/worker_log_relay.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr absl::Duration kBound = absl::Seconds(30);

// A pipe whose read end the relay reads, as from a worker's stdout.
class Pipe {
 public:
  Pipe() { EXPECT_EQ(pipe(fds_), 0); }
  ~Pipe() {
    CloseWriter();
    close(fds_[0]);
  }
  int reader() const { return fds_[0]; }
  void Write(const std::string& text) {
    ASSERT_EQ(write(fds_[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  void CloseWriter() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Polls until at least `n` lines came (bounded).
std::vector<std::string> PollLines(WorkerLogRelay& relay, size_t n) {
  std::vector<std::string> lines;
  const absl::Time deadline = absl::Now() + kBound;
  while (lines.size() < n && absl::Now() < deadline) {
    for (std::string& line : relay.Poll(deadline - absl::Now())) lines.push_back(line);
  }
  return lines;
}

TEST(WorkerLogRelayTest, PassesWholeLinesOnWithTheirPrefix) {
  Pipe stage0;
  WorkerLogRelay relay;
  relay.Add(stage0.reader(), "[stage 0] ");
  stage0.Write("job=tiny stage=0/2 pid=12 link=127.0.0.1:1 metrics=http://127.0.0.1:2/metrics\nhalf");
  EXPECT_THAT(PollLines(relay, 1),
              ElementsAre("[stage 0] job=tiny stage=0/2 pid=12 link=127.0.0.1:1 "
                          "metrics=http://127.0.0.1:2/metrics"));
  stage0.Write(" a line\n");
  EXPECT_THAT(PollLines(relay, 1), ElementsAre("[stage 0] half a line"));
  EXPECT_TRUE(relay.open());
}

TEST(WorkerLogRelayTest, KeepsEachWorkersLinesApart) {
  Pipe stage0, stage1;
  WorkerLogRelay relay;
  relay.Add(stage0.reader(), "[stage 0] ");
  relay.Add(stage1.reader(), "[stage 1] ");
  stage0.Write("zero begins ");
  stage1.Write("one\n");
  stage0.Write("and ends\n");
  std::vector<std::string> lines = PollLines(relay, 2);
  std::sort(lines.begin(), lines.end());
  EXPECT_THAT(lines, ElementsAre("[stage 0] zero begins and ends", "[stage 1] one"));
}

TEST(WorkerLogRelayTest, DrainReadsToTheEndIncludingAnUnterminatedLine) {
  Pipe stage0;
  WorkerLogRelay relay;
  relay.Add(stage0.reader(), "[stage 0] ");
  stage0.Write("first\nlast words");
  stage0.CloseWriter();
  EXPECT_THAT(relay.Drain(kBound), ElementsAre("[stage 0] first", "[stage 0] last words"));
  EXPECT_FALSE(relay.open());
  EXPECT_THAT(relay.Poll(absl::ZeroDuration()), IsEmpty());
}

TEST(WorkerLogRelayTest, AnEndlessLineIsPassedOnInPieces) {
  Pipe stage0;
  WorkerLogRelay relay;
  relay.Add(stage0.reader(), "> ");
  const std::string endless(WorkerLogRelay::kMaxLine + 10, 'x');
  std::thread writer([&] {
    stage0.Write(endless);
    stage0.CloseWriter();
  });
  const std::vector<std::string> lines = relay.Drain(kBound);
  writer.join();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "> " + std::string(WorkerLogRelay::kMaxLine, 'x'));
  EXPECT_EQ(lines[1], "> xxxxxxxxxx");
}

}  // namespace
}  // namespace paci
