#include "tools/worker_log_relay.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace paci {

void WorkerLogRelay::Add(int fd, std::string prefix) {
  sources_.push_back(Source{fd, std::move(prefix), "", fd >= 0});
}

bool WorkerLogRelay::open() const {
  return std::any_of(sources_.begin(), sources_.end(), [](const Source& s) { return s.open; });
}

void WorkerLogRelay::ReadFrom(Source& source, std::vector<std::string>* lines) {
  char buffer[16 * 1024];
  const ssize_t n = read(source.fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {  // the end, or an error that will not go away
    source.open = false;
    if (!source.partial.empty()) lines->push_back(absl::StrCat(source.prefix, source.partial));
    source.partial.clear();
    return;
  }
  source.partial.append(buffer, static_cast<size_t>(n));
  size_t begin = 0;
  for (size_t end; (end = source.partial.find('\n', begin)) != std::string::npos; begin = end + 1) {
    lines->push_back(absl::StrCat(source.prefix,
                                  absl::string_view(source.partial).substr(begin, end - begin)));
  }
  source.partial.erase(0, begin);
  while (source.partial.size() >= kMaxLine) {
    lines->push_back(
        absl::StrCat(source.prefix, absl::string_view(source.partial).substr(0, kMaxLine)));
    source.partial.erase(0, kMaxLine);
  }
}

std::vector<std::string> WorkerLogRelay::Poll(absl::Duration timeout) {
  std::vector<std::string> lines;
  std::vector<pollfd> fds;
  std::vector<Source*> polled;
  for (Source& source : sources_) {
    if (!source.open) continue;
    fds.push_back(pollfd{source.fd, POLLIN, 0});
    polled.push_back(&source);
  }
  const int timeout_ms =
      static_cast<int>(std::max<int64_t>(absl::ToInt64Milliseconds(timeout), 0));
  if (fds.empty()) {
    absl::SleepFor(timeout);
    return lines;
  }
  const int ready = poll(fds.data(), fds.size(), timeout_ms);
  if (ready <= 0) return lines;  // timed out, or interrupted by a signal
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) ReadFrom(*polled[i], &lines);
  }
  return lines;
}

std::vector<std::string> WorkerLogRelay::Drain(absl::Duration timeout) {
  std::vector<std::string> lines;
  const absl::Time deadline = absl::Now() + timeout;
  while (open()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    std::vector<std::string> more = Poll(deadline - now);
    lines.insert(lines.end(), std::make_move_iterator(more.begin()),
                 std::make_move_iterator(more.end()));
  }
  for (Source& source : sources_) {  // whatever is left after the deadline
    if (!source.partial.empty()) lines.push_back(absl::StrCat(source.prefix, source.partial));
    source.partial.clear();
  }
  return lines;
}

}  // namespace paci
