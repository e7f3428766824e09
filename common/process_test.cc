#include "common/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kBound = absl::Seconds(30);

ProcessCommand Shell(const char* script) { return ProcessCommand{"/bin/sh", {"-c", script}, {}}; }

// Waits (bounded) until child `index` has exited and returns how.
ProcessExit WaitForChild(ChildProcesses& processes, int index) {
  const absl::Time deadline = absl::Now() + kBound;
  while (absl::Now() < deadline) {
    for (const ProcessExit& exit : processes.WaitForExits(deadline - absl::Now())) {
      if (exit.index == index) return exit;
    }
  }
  ADD_FAILURE() << "child " << index << " did not exit within " << kBound;
  return {};
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(ChildProcessesTest, DetectsWhichChildExitedWithWhichStatus) {
  ChildProcesses processes;
  const absl::StatusOr<int> sleeper = processes.Start({"/bin/sleep", {"30"}, {}});
  const absl::StatusOr<int> failing = processes.Start(Shell("exit 3"));
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  ASSERT_TRUE(failing.ok()) << failing.status();
  const ProcessExit exit = WaitForChild(processes, *failing);
  EXPECT_EQ(exit.pid, processes.pid(*failing));
  EXPECT_FALSE(exit.succeeded());
  EXPECT_EQ(exit.ToString(), "exited with status 3");
  EXPECT_EQ(processes.running(), 1);
  EXPECT_TRUE(processes.PollExits().empty());
}

TEST(ChildProcessesTest, PassesArgumentsAndEnvironment) {
  ChildProcesses processes;
  const absl::StatusOr<int> child = processes.Start(
      {"/bin/sh",
       {"-c", "test \"$1\" = --stage=1 && test \"$OMP_NUM_THREADS\" = 4", "sh", "--stage=1"},
       {{"OMP_NUM_THREADS", "4"}}});
  ASSERT_TRUE(child.ok()) << child.status();
  const ProcessExit exit = WaitForChild(processes, *child);
  EXPECT_TRUE(exit.succeeded()) << exit.ToString();
}

TEST(ChildProcessesTest, StartFailsForAMissingBinaryAndLeavesNoChild) {
  ChildProcesses processes;
  const absl::StatusOr<int> child = processes.Start({"/nonexistent/paci_worker", {}, {}});
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(child.status().message(), HasSubstr("/nonexistent/paci_worker"));
  EXPECT_EQ(processes.size(), 0);
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // nothing left to reap
  EXPECT_EQ(errno, ECHILD);
}

TEST(ChildProcessesTest, StopAllTerminatesKillsAndReapsEveryChild) {
  ChildProcesses processes;
  std::vector<int> children;
  for (const ProcessCommand& command :
       {ProcessCommand{"/bin/sleep", {"30"}, {}}, Shell("trap '' TERM; exec /bin/sleep 30"),
        Shell("exit 0")}) {
    const absl::StatusOr<int> child = processes.Start(command);
    ASSERT_TRUE(child.ok()) << child.status();
    children.push_back(*child);
  }
  const std::vector<ProcessExit> exits = processes.StopAll(absl::Milliseconds(300));
  EXPECT_EQ(exits.size(), 3u);
  EXPECT_EQ(processes.running(), 0);
  for (int index : children) EXPECT_FALSE(Alive(processes.pid(index))) << index;
  for (const ProcessExit& exit : exits) {
    if (exit.index == children[0]) {
      EXPECT_THAT(exit.ToString(), HasSubstr("signal 15"));
    } else if (exit.index == children[1]) {
      // The shell may not have set its trap before SIGTERM came; either way it is gone.
      EXPECT_THAT(exit.ToString(), HasSubstr("killed by signal"));
    }
  }
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // no zombies
  EXPECT_EQ(errno, ECHILD);
}

// Reads `fd` to its end (bounded by the child's exit: only it holds the write end).
std::string ReadAll(int fd) {
  std::string out;
  char buffer[256];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) out.append(buffer, static_cast<size_t>(n));
  return out;
}

TEST(ChildProcessesTest, CapturedStdoutAndStderrShareOnePipeThatEndsWithTheChild) {
  ChildProcesses processes;
  ProcessCommand loud = Shell("echo to stdout; echo to stderr >&2");
  loud.output = ProcessCommand::Output::kCombined;
  const absl::StatusOr<int> child = processes.Start(loud);
  // A second child started later must not hold the first one's pipe open.
  ProcessCommand quiet = Shell("exec /bin/sleep 30");
  quiet.output = ProcessCommand::Output::kCombined;
  const absl::StatusOr<int> sleeper = processes.Start(quiet);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  ASSERT_GE(processes.output_fd(*child), 0);
  EXPECT_EQ(ReadAll(processes.output_fd(*child)), "to stdout\nto stderr\n");
  EXPECT_TRUE(WaitForChild(processes, *child).succeeded());
  EXPECT_EQ(processes.running(), 1);
  const absl::StatusOr<int> plain = processes.Start(Shell("exit 0"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(processes.output_fd(*plain), -1);
}

TEST(ChildProcessesTest, DestructorStopsRunningChildren) {
  pid_t pid = -1;
  {
    ChildProcesses processes;
    const absl::StatusOr<int> child = processes.Start({"/bin/sleep", {"30"}, {}});
    ASSERT_TRUE(child.ok()) << child.status();
    pid = processes.pid(*child);
    EXPECT_TRUE(Alive(pid));
  }
  EXPECT_FALSE(Alive(pid));
}

TEST(ChildProcessesTest, SeparatePipesKeepStdoutAndStderrApartAndStdinCanBeNull) {
  ChildProcesses processes;
  ProcessCommand command = Shell("cat; echo out; echo err >&2");
  command.output = ProcessCommand::Output::kSeparate;
  command.stdin_from_null = true;  // else cat would wait on this test's stdin
  const absl::StatusOr<int> child = processes.Start(command);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ReadAll(processes.output_fd(*child)), "out\n");
  EXPECT_EQ(ReadAll(processes.error_fd(*child)), "err\n");
  EXPECT_TRUE(processes.Wait(*child).succeeded());
}

TEST(ChildProcessesTest, FileOutputGetsBothStreams) {
  char dir[] = "/tmp/paci-process-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/child.log";
  ChildProcesses processes;
  ProcessCommand command = Shell("echo one; echo two >&2");
  command.output = ProcessCommand::Output::kFile;
  command.output_file = log;
  const absl::StatusOr<int> child = processes.Start(command);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE(processes.Wait(*child).succeeded());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "one\ntwo\n");
  unlink(log.c_str());
  rmdir(dir);

  command.output_file = "/nonexistent/child.log";
  const absl::StatusOr<int> refused = processes.Start(command);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("/nonexistent/child.log"));
}

TEST(ChildProcessesTest, SearchPathFindsABareNameOrSaysItIsMissing) {
  ChildProcesses processes;
  ProcessCommand found{"sh", {"-c", "exit 4"}, {}};
  found.search_path = true;
  const absl::StatusOr<int> child = processes.Start(found);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(processes.Wait(*child).ToString(), "exited with status 4");

  ProcessCommand missing{"paci-no-such-plugin", {}, {}};
  missing.search_path = true;
  const absl::StatusOr<int> none = processes.Start(missing);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("paci-no-such-plugin"));
  // Without search_path a bare name is a path relative to the working folder.
  missing.search_path = false;
  EXPECT_EQ(processes.Start(missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(ChildProcessesTest, SignalReachesAChildOutsideAProcessGroupOfItsOwn) {
  ChildProcesses processes;
  ProcessCommand command{"/bin/sleep", {"30"}, {}};
  command.own_process_group = false;
  const absl::StatusOr<int> child = processes.Start(command);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(getpgid(processes.pid(*child)), getpgrp());
  processes.Signal(*child, SIGKILL);
  EXPECT_EQ(processes.Wait(*child).ToString(), "killed by signal 9 (Killed)");
  EXPECT_EQ(processes.running(), 0);
}

}  // namespace
}  // namespace paci
