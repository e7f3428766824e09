#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paci {

// What to run: argv[0] is `binary`; `env` is added to (or replaces entries
// of) this process's own environment; of two entries of one name the later
// wins.
struct ProcessCommand {
  // A path; when it has no '/' and search_path is set, it is looked up in
  // this process's PATH (as a shell, or Go's exec.LookPath, would).
  std::string binary;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  // Where the child's stdout and stderr go.
  enum class Output {
    kInherit,   // this process's own
    kCombined,  // one pipe for both, read from output_fd()
    kSeparate,  // stdout to output_fd(), stderr to error_fd()
    kStdoutOnly,  // stdout to output_fd(), stderr this process's
    kFile,      // both to output_file, created or truncated
  };
  Output output = Output::kInherit;
  std::string output_file = {};
  bool search_path = false;
  bool stdin_from_null = false;  // else this process's stdin
  // Its own process group, so that a terminal's Ctrl-C reaches only this
  // process, which then stops the children. Off for a child that may read
  // the terminal (a background group's read stops it).
  bool own_process_group = true;
};

// How a child ended.
struct ProcessExit {
  int index = -1;       // the order of Start() calls
  pid_t pid = -1;
  int wait_status = 0;  // as from waitpid()

  bool succeeded() const;   // exited with status 0
  std::string ToString() const;  // "exited with status 3", "killed by signal 9 (Killed)"
};

// The one way paci starts a program (the launcher's coordinator and workers,
// the operator's credential plugins, the tests' control plane). Starts and
// owns child processes; no orphans and no zombies: each child is killed if
// this process dies (PR_SET_PDEATHSIG), and StopAll() (also run by the
// destructor) terminates and reaps every child still running.
//
// Not thread-safe: one owner thread, which must live as long as the children
// (the death signal fires when the thread that forked them exits): the main
// thread, or a call that waits for its child before it returns.
class ChildProcesses {
 public:
  ChildProcesses() = default;
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;
  // StopAll(kDestructorGrace).
  ~ChildProcesses();

  static constexpr absl::Duration kDestructorGrace = absl::Seconds(5);

  // Forks and execs `command`; returns its index. Fails (and leaves no child)
  // when the fork fails or the binary cannot be executed, naming the binary
  // and errno. Blocks only until the exec has happened.
  absl::StatusOr<int> Start(const ProcessCommand& command);

  // The children that exited since the last call, reaped. Does not block.
  std::vector<ProcessExit> PollExits();

  // Like PollExits(), but waits up to `timeout` for at least one exit.
  std::vector<ProcessExit> WaitForExits(absl::Duration timeout);

  // Waits for child `index` to exit and reaps it (returns at once if it
  // already has been).
  ProcessExit Wait(int index);

  // Sends `signal` to a running child (its process group when it has one).
  void Signal(int index, int signal);

  // Sends SIGTERM to every running child (its process group), waits up to
  // `grace` for them to exit, SIGKILLs what is left, and reaps everything.
  // Returns the exits it reaped. Blocks for at most about `grace`.
  std::vector<ProcessExit> StopAll(absl::Duration grace);

  int size() const { return static_cast<int>(children_.size()); }
  int running() const;
  pid_t pid(int index) const { return children_[index].pid; }
  // The read ends of the child's output pipes (Output::kCombined and
  // kStdoutOnly: output_fd only; kSeparate: both), -1 otherwise. Owned here and closed by the
  // destructor; each reads EOF once the child has exited. Only the child
  // holds the write ends.
  int output_fd(int index) const { return children_[index].output_fd; }
  int error_fd(int index) const { return children_[index].error_fd; }

 private:
  struct Child {
    pid_t pid = -1;
    bool running = false;
    bool own_group = false;
    int output_fd = -1;
    int error_fd = -1;
  };

  std::vector<Child> children_;
};

}  // namespace paci
