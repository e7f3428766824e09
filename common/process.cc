#include "common/process.h"

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
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

extern char** environ;

namespace paci {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

std::vector<std::string> BuildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  const auto named = [](absl::string_view entry, const std::string& name) {
    return entry.size() > name.size() && entry[name.size()] == '=' &&
           entry.substr(0, name.size()) == name;
  };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const bool overridden = std::any_of(overrides.begin(), overrides.end(),
                                        [&](const auto& kv) { return named(entry, kv.first); });
    if (!overridden) env.emplace_back(entry);
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    const auto later = std::find_if(overrides.begin() + i + 1, overrides.end(),
                                    [&](const auto& kv) { return kv.first == overrides[i].first; });
    if (later == overrides.end()) {
      env.push_back(absl::StrCat(overrides[i].first, "=", overrides[i].second));
    }
  }
  return env;
}

std::vector<char*> PointersTo(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Where the child's descriptors 0, 1 and 2 come from (-1: left as they are).
struct ChildFds {
  int in = -1;
  int out = -1;
  int err = -1;
};

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void ExecChild(pid_t parent, int error_fd, ChildFds fds, bool own_group,
                            const char* binary, char** argv, char** envp) {
  // Die with the parent; if it is already gone, the death signal was never armed.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  if (own_group) setpgid(0, 0);
  // dup2 leaves close-on-exec off on the copies, so they survive the exec.
  if ((fds.in >= 0 && dup2(fds.in, STDIN_FILENO) < 0) ||
      (fds.out >= 0 && dup2(fds.out, STDOUT_FILENO) < 0) ||
      (fds.err >= 0 && dup2(fds.err, STDERR_FILENO) < 0)) {
    const int err = errno;
    ssize_t ignored = write(error_fd, &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  // Undo what the parent may have set up for itself.
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

// `name` looked up in PATH as execvp would, before the fork (the lookup
// allocates); ENOENT when no entry has it.
absl::StatusOr<std::string> LookPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("cannot execute ", name, ": not found in PATH"));
}

// Closes the descriptors it holds when it goes, unless released.
struct Descriptors {
  std::vector<int> fds;
  ~Descriptors() {
    for (int fd : fds) close(fd);
  }
  // A close-on-exec pipe: no other child inherits an end, so the reader sees
  // EOF when this child exits.
  absl::Status Pipe(int ends[2]) {
    if (pipe2(ends, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
    }
    fds.push_back(ends[0]);
    fds.push_back(ends[1]);
    return absl::OkStatus();
  }
  absl::Status Open(const std::string& path, int flags, int* fd) {
    *fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (*fd < 0) return absl::FailedPreconditionError(absl::StrCat(path, ": ", strerror(errno)));
    fds.push_back(*fd);
    return absl::OkStatus();
  }
  void Close(int fd) {
    fds.erase(std::remove(fds.begin(), fds.end(), fd), fds.end());
    close(fd);
  }
  int Release(int fd) {
    fds.erase(std::remove(fds.begin(), fds.end(), fd), fds.end());
    return fd;
  }
};

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

ChildProcesses::~ChildProcesses() {
  StopAll(kDestructorGrace);
  for (const Child& child : children_) {
    if (child.output_fd >= 0) close(child.output_fd);
    if (child.error_fd >= 0) close(child.error_fd);
  }
}

absl::StatusOr<int> ChildProcesses::Start(const ProcessCommand& command) {
  std::string binary = command.binary;
  if (command.search_path) {
    ASSIGN_OR_RETURN(binary, LookPath(command.binary));
  }
  std::vector<std::string> arg_strings = {command.binary};
  arg_strings.insert(arg_strings.end(), command.args.begin(), command.args.end());
  std::vector<std::string> env_strings = BuildEnvironment(command.env);
  std::vector<char*> argv = PointersTo(arg_strings);
  std::vector<char*> envp = PointersTo(env_strings);

  Descriptors held;
  // The child writes its execve (or dup2) errno here; EOF means the exec succeeded.
  int error_pipe[2];
  RETURN_IF_ERROR(held.Pipe(error_pipe));
  ChildFds fds;
  int output_pipe[2] = {-1, -1};
  int stderr_pipe[2] = {-1, -1};
  using Output = ProcessCommand::Output;
  if (command.stdin_from_null) RETURN_IF_ERROR(held.Open("/dev/null", O_RDONLY, &fds.in));
  switch (command.output) {
    case Output::kInherit:
      break;
    case Output::kCombined:
      RETURN_IF_ERROR(held.Pipe(output_pipe));
      fds.out = fds.err = output_pipe[1];
      break;
    case Output::kStdoutOnly:
      RETURN_IF_ERROR(held.Pipe(output_pipe));
      fds.out = output_pipe[1];
      break;
    case Output::kSeparate:
      RETURN_IF_ERROR(held.Pipe(output_pipe));
      RETURN_IF_ERROR(held.Pipe(stderr_pipe));
      fds.out = output_pipe[1];
      fds.err = stderr_pipe[1];
      break;
    case Output::kFile:
      RETURN_IF_ERROR(held.Open(command.output_file, O_WRONLY | O_CREAT | O_TRUNC, &fds.out));
      fds.err = fds.out;
      break;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot fork for ", command.binary, ": ", strerror(errno)));
  }
  if (pid == 0) {
    ExecChild(parent, error_pipe[1], fds, command.own_process_group, binary.c_str(), argv.data(),
              envp.data());
  }
  // Only the child keeps the write ends.
  held.Close(error_pipe[1]);
  for (int fd : {fds.in, fds.out, fds.err}) {
    if (fd >= 0 && std::count(held.fds.begin(), held.fds.end(), fd) > 0) held.Close(fd);
  }
  if (command.own_process_group) setpgid(pid, pid);  // also here, so the group exists now
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(error_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string message =
        absl::StrCat("cannot execute ", command.binary, ": ", strerror(exec_errno));
    return exec_errno == ENOENT ? absl::NotFoundError(message)
                                : absl::FailedPreconditionError(message);
  }
  Child child;
  child.pid = pid;
  child.running = true;
  child.own_group = command.own_process_group;
  if (output_pipe[0] >= 0) child.output_fd = held.Release(output_pipe[0]);
  if (stderr_pipe[0] >= 0) child.error_fd = held.Release(stderr_pipe[0]);
  children_.push_back(child);
  return static_cast<int>(children_.size()) - 1;
}

ProcessExit ChildProcesses::Wait(int index) {
  Child& child = children_[index];
  if (!child.running) return ProcessExit{index, child.pid, -1};
  int status = 0;
  pid_t r;
  do {
    r = waitpid(child.pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  child.running = false;
  return ProcessExit{index, child.pid, r == child.pid ? status : -1};
}

void ChildProcesses::Signal(int index, int signal) {
  const Child& child = children_[index];
  // A running child not yet reaped still owns its pid (and leads its group).
  if (child.running) kill(child.own_group ? -child.pid : child.pid, signal);
}

std::vector<ProcessExit> ChildProcesses::PollExits() {
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

std::vector<ProcessExit> ChildProcesses::WaitForExits(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::vector<ProcessExit> exits = PollExits();
    const absl::Time now = absl::Now();
    if (!exits.empty() || running() == 0 || now >= deadline) return exits;
    absl::SleepFor(std::min(kPollInterval, deadline - now));
  }
}

std::vector<ProcessExit> ChildProcesses::StopAll(absl::Duration grace) {
  std::vector<ProcessExit> exits = PollExits();
  for (int i = 0; i < size(); ++i) Signal(i, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (running() > 0 && absl::Now() < deadline) {
    std::vector<ProcessExit> more = WaitForExits(deadline - absl::Now());
    exits.insert(exits.end(), more.begin(), more.end());
  }
  for (int i = 0; i < size(); ++i) {
    if (!children_[i].running) continue;
    Signal(i, SIGKILL);
    exits.push_back(Wait(i));
  }
  return exits;
}

int ChildProcesses::running() const {
  return static_cast<int>(
      std::count_if(children_.begin(), children_.end(), [](const Child& c) { return c.running; }));
}

}  // namespace paci
