#include "common/crash_handler.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace paci {
namespace {

// A child that installs the handler and crashes: its stderr names the signal
// and the program, and it still dies of that signal.
TEST(CrashHandlerTest, AFatalSignalIsNamedOnStderrAndStillKills) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    InstallCrashHandler("crash_test_child");
    raise(SIGSEGV);
    _exit(0);  // not reached
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) output.append(buffer, n);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << output;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_NE(output.find("*** crash_test_child died of SIGSEGV"), std::string::npos) << output;
}

}  // namespace
}  // namespace paci
