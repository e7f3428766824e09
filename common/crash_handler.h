#pragma once

// On a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes one
// line naming the signal and the process, then a stack trace, to stderr, and
// dies of the same signal. Without it a crashed worker vanishes silently and
// its peers only see a closed link. glog's own handler also takes SIGTERM,
// which our binaries handle as a clean shutdown, so this is ours. Call once
// from main, after logging is set up.

namespace paci {

void InstallCrashHandler(const char* program);

}  // namespace paci
