#include "worker/transport/inbox.h"

namespace paci {

Inbox::Inbox(size_t capacity) : capacity_(capacity) {}

std::deque<v1::TensorFrame>& Inbox::Queue(From from) {
  return from == From::kPrevious ? previous_ : from == From::kNext ? next_ : head_;
}

const std::deque<v1::TensorFrame>& Inbox::Queue(From from) const {
  return from == From::kPrevious ? previous_ : from == From::kNext ? next_ : head_;
}

bool Inbox::IsHeadFrame(v1::TensorFrame::Kind kind) {
  return kind == v1::TensorFrame::HEAD_INPUT || kind == v1::TensorFrame::HEAD_PART ||
         kind == v1::TensorFrame::HEAD_SCALE;
}

bool Inbox::Push(From from, v1::TensorFrame frame) {
  if (IsHeadFrame(frame.kind())) from = From::kHead;
  absl::MutexLock lock(&mu_);
  const Inbox& self = *this;
  auto has_room = [&self, from]() ABSL_SHARED_LOCKS_REQUIRED(self.mu_) {
    return self.closed_ || self.Queue(from).size() < self.capacity_;
  };
  mu_.Await(absl::Condition(&has_room));
  if (closed_) return false;
  Queue(from).push_back(std::move(frame));
  return true;
}

std::optional<v1::TensorFrame::Kind> Inbox::PeekKind(From from) const {
  absl::MutexLock lock(&mu_);
  const auto& queue = Queue(from);
  if (queue.empty()) return std::nullopt;
  return queue.front().kind();
}

std::optional<v1::TensorFrame> Inbox::Pop(From from) {
  absl::MutexLock lock(&mu_);
  auto& queue = Queue(from);
  if (queue.empty()) return std::nullopt;
  v1::TensorFrame frame = std::move(queue.front());
  queue.pop_front();
  return frame;
}

void Inbox::Wait(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !previous_.empty() || !next_.empty() || !head_.empty() || !failure_.ok() || closed_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

void Inbox::WaitFor(From from, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [this, from]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !Queue(from).empty() || !failure_.ok() || closed_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

void Inbox::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (closed_ || !failure_.ok()) return;
  failure_ = std::move(status);
}

absl::Status Inbox::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void Inbox::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool Inbox::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

}  // namespace paci
