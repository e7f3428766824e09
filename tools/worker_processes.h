#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paci {

// What to run: argv[0] is `binary`; `env` is added to (or replaces entries
// of) the launcher's own environment.
struct ProcessCommand {
  std::string binary;  // a path; PATH is not searched
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  // The child's stdout and stderr go into one pipe, read from output_fd();
  // otherwise it shares the launcher's.
  bool capture_output = false;
};

// How a child ended.
struct ProcessExit {
  int index = -1;       // the order of Start() calls
  pid_t pid = -1;
  int wait_status = 0;  // as from waitpid()

  bool succeeded() const;   // exited with status 0
  std::string ToString() const;  // "exited with status 3", "killed by signal 9 (Killed)"
};

// Starts and owns child processes; no orphans and no zombies: each child is
// killed if the launcher dies (PR_SET_PDEATHSIG), runs in its own process
// group (so a terminal's Ctrl-C reaches only the launcher, which then stops
// the children), and StopAll() (also run by the destructor) terminates and
// reaps every child still running.
//
// Not thread-safe: one owner thread, which must live as long as the children
// (the death signal fires when the thread that forked them exits), i.e. the
// main thread.
class WorkerProcesses {
 public:
  WorkerProcesses() = default;
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;
  // StopAll(kDestructorGrace).
  ~WorkerProcesses();

  static constexpr absl::Duration kDestructorGrace = absl::Seconds(5);

  // Forks and execs `command`; returns its index. Fails (and leaves no child)
  // when the fork fails or the binary cannot be executed, naming the binary
  // and errno. Blocks only until the exec has happened.
  absl::StatusOr<int> Start(const ProcessCommand& command);

  // The children that exited since the last call, reaped. Does not block.
  std::vector<ProcessExit> PollExits();

  // Like PollExits(), but waits up to `timeout` for at least one exit.
  std::vector<ProcessExit> WaitForExits(absl::Duration timeout);

  // Sends SIGTERM to every running child's process group, waits up to
  // `grace` for them to exit, SIGKILLs what is left, and reaps everything.
  // Returns the exits it reaped. Blocks for at most about `grace`.
  std::vector<ProcessExit> StopAll(absl::Duration grace);

  int size() const { return static_cast<int>(children_.size()); }
  int running() const;
  pid_t pid(int index) const { return children_[index].pid; }
  // The read end of the child's output pipe (capture_output), -1 otherwise.
  // Owned here and closed by the destructor; it reads EOF once the child
  // has exited. Only the child holds the write end.
  int output_fd(int index) const { return children_[index].output_fd; }

 private:
  struct Child {
    pid_t pid = -1;
    bool running = false;
    int output_fd = -1;
  };

  std::vector<Child> children_;
};

}  // namespace paci
