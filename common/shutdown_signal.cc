#include "common/shutdown_signal.h"

#include <pthread.h>

namespace paci {

ShutdownSignal::ShutdownSignal() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  waiter_ = std::thread([this] { WaitForSignals(); });
}

ShutdownSignal::~ShutdownSignal() {
  closing_.store(true);
  // Ends the sigwait: SIGTERM to the waiting thread itself, which it takes
  // (and then sees closing_) whether it is in sigwait now or enters it later.
  pthread_kill(waiter_.native_handle(), SIGTERM);
  waiter_.join();
}

void ShutdownSignal::Request() {
  absl::MutexLock lock(&mu_);
  if (!requested_.HasBeenNotified()) requested_.Notify();
}

void ShutdownSignal::WaitForSignals() {
  while (true) {
    int signal_number = 0;
    if (sigwait(&signals_, &signal_number) != 0) continue;
    if (closing_.load()) return;
    if (!requested()) signal_number_.store(signal_number);
    Request();
    absl::MutexLock lock(&mu_);
    ++signals_taken_;
  }
}

bool ShutdownSignal::AwaitSignalsTaken(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto taken = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return signals_taken_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&taken), timeout);
}

}  // namespace paci
