#include "tools/worker_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace paci {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

std::vector<std::string> BuildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const bool overridden =
        std::any_of(overrides.begin(), overrides.end(), [&entry](const auto& kv) {
          return entry.size() > kv.first.size() && entry[kv.first.size()] == '=' &&
                 entry.substr(0, kv.first.size()) == kv.first;
        });
    if (!overridden) env.emplace_back(entry);
  }
  for (const auto& [key, value] : overrides) env.push_back(absl::StrCat(key, "=", value));
  return env;
}

std::vector<char*> PointersTo(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void ExecChild(pid_t parent, int error_fd, int output_fd, const char* binary,
                            char** argv, char** envp) {
  // Die with the launcher; if it is already gone, the death signal was never armed.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  setpgid(0, 0);
  // dup2 leaves close-on-exec off on the copies, so they survive the exec.
  if (output_fd >= 0 &&
      (dup2(output_fd, STDOUT_FILENO) < 0 || dup2(output_fd, STDERR_FILENO) < 0)) {
    _exit(127);
  }
  // Undo what the launcher may have set up for itself.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &dfl, nullptr);
  execve(binary, argv, envp);
  const int err = errno;
  ssize_t ignored = write(error_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

}  // namespace

bool ProcessExit::succeeded() const {
  return wait_status >= 0 && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string ProcessExit::ToString() const {
  if (wait_status < 0) return "ended, but its status was reaped elsewhere";
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrCat("killed by signal ", sig, " (", strsignal(sig), ")");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

WorkerProcesses::~WorkerProcesses() {
  StopAll(kDestructorGrace);
  for (const Child& child : children_) {
    if (child.output_fd >= 0) close(child.output_fd);
  }
}

absl::StatusOr<int> WorkerProcesses::Start(const ProcessCommand& command) {
  std::vector<std::string> arg_strings = {command.binary};
  arg_strings.insert(arg_strings.end(), command.args.begin(), command.args.end());
  std::vector<std::string> env_strings = BuildEnvironment(command.env);
  std::vector<char*> argv = PointersTo(arg_strings);
  std::vector<char*> envp = PointersTo(env_strings);

  // The child writes its execve errno here; EOF means the exec succeeded.
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  // Close-on-exec, so that no other child inherits an end and the reader
  // sees EOF when this child exits.
  int output_pipe[2] = {-1, -1};
  if (command.capture_output && pipe2(output_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(error_pipe[0]);
    close(error_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(err)));
  }
  const auto close_output = [&output_pipe] {
    for (int& fd : output_pipe) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(error_pipe[0]);
    close(error_pipe[1]);
    close_output();
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot fork for ", command.binary, ": ", strerror(err)));
  }
  if (pid == 0) {
    close(error_pipe[0]);
    ExecChild(parent, error_pipe[1], output_pipe[1], command.binary.c_str(), argv.data(),
              envp.data());
  }
  close(error_pipe[1]);
  if (output_pipe[1] >= 0) {
    close(output_pipe[1]);
    output_pipe[1] = -1;
  }
  setpgid(pid, pid);  // also here, so the group exists before Start returns
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(error_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close_output();
    const std::string message =
        absl::StrCat("cannot execute ", command.binary, ": ", strerror(exec_errno));
    return exec_errno == ENOENT ? absl::NotFoundError(message)
                                : absl::FailedPreconditionError(message);
  }
  children_.push_back(Child{pid, true, output_pipe[0]});
  return static_cast<int>(children_.size()) - 1;
}

std::vector<ProcessExit> WorkerProcesses::PollExits() {
  std::vector<ProcessExit> exits;
  for (int i = 0; i < size(); ++i) {
    Child& child = children_[i];
    if (!child.running) continue;
    int status = 0;
    const pid_t r = waitpid(child.pid, &status, WNOHANG);
    if (r == child.pid) {
      child.running = false;
      exits.push_back(ProcessExit{i, child.pid, status});
    } else if (r < 0 && errno == ECHILD) {
      child.running = false;
      exits.push_back(ProcessExit{i, child.pid, -1});
    }
  }
  return exits;
}

std::vector<ProcessExit> WorkerProcesses::WaitForExits(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::vector<ProcessExit> exits = PollExits();
    const absl::Time now = absl::Now();
    if (!exits.empty() || running() == 0 || now >= deadline) return exits;
    absl::SleepFor(std::min(kPollInterval, deadline - now));
  }
}

std::vector<ProcessExit> WorkerProcesses::StopAll(absl::Duration grace) {
  std::vector<ProcessExit> exits = PollExits();
  // Each running child still leads its process group, so the group id is
  // safe to signal; after reaping it could be reused.
  for (const Child& child : children_) {
    if (child.running) kill(-child.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  while (running() > 0 && absl::Now() < deadline) {
    std::vector<ProcessExit> more = WaitForExits(deadline - absl::Now());
    exits.insert(exits.end(), more.begin(), more.end());
  }
  for (int i = 0; i < size(); ++i) {
    Child& child = children_[i];
    if (!child.running) continue;
    kill(-child.pid, SIGKILL);
    int status = 0;
    pid_t r;
    do {
      r = waitpid(child.pid, &status, 0);
    } while (r < 0 && errno == EINTR);
    child.running = false;
    exits.push_back(ProcessExit{i, child.pid, r == child.pid ? status : -1});
  }
  return exits;
}

int WorkerProcesses::running() const {
  return static_cast<int>(
      std::count_if(children_.begin(), children_.end(), [](const Child& c) { return c.running; }));
}

}  // namespace paci
