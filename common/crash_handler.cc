#include "common/crash_handler.h"

#include <execinfo.h>
#include <initializer_list>
#include <signal.h>
#include <string.h>
#include <unistd.h>

namespace paci {
namespace {

const char* g_program = "paci";

void WriteString(const char* text) {
  const size_t length = strlen(text);
  ssize_t ignored = write(STDERR_FILENO, text, length);
  (void)ignored;
}

void OnFatalSignal(int signal_number) {
  // Only async-signal-safe calls until the signal is raised again.
  WriteString("*** ");
  WriteString(g_program);
  WriteString(" died of ");
  WriteString(sigabbrev_np(signal_number) ? "SIG" : "signal ");
  WriteString(sigabbrev_np(signal_number) ? sigabbrev_np(signal_number) : "?");
  WriteString("; stack:\n");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  signal(signal_number, SIG_DFL);  // SA_RESETHAND did this too; be sure
  raise(signal_number);
}

}  // namespace

void InstallCrashHandler(const char* program) {
  g_program = program;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now, not inside the handler
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = OnFatalSignal;
  action.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) {
    sigaction(signal_number, &action, nullptr);
  }
}

}  // namespace paci
