#include "worker/transport/peer_sender.h"

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "worker/transport/frame_validator.h"

namespace paci {

PeerSender::PeerSender(const Options& options, std::function<void(absl::Status)> on_failure)
    : options_(options), on_failure_(std::move(on_failure)) {
  channel_ = CreateStageLinkChannel(options_.address, options_.credentials,
                                    options_.tls_server_name);
  stub_ = v1::StageLink::NewStub(channel_);
}

PeerSender::~PeerSender() {
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
    }
    context_.TryCancel();
    thread_.join();
  }
}

void PeerSender::Start() { thread_ = std::thread([this] { Run(); }); }

bool PeerSender::Send(v1::TensorFrame frame) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return done_ || outbox_.size() < options_.capacity;
  };
  mu_.Await(absl::Condition(&room));
  if (done_) return false;
  outbox_.push_back(std::move(frame));
  return true;
}

void PeerSender::Run() {
  auto fail = [this](absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      status_ = status;
      done_ = true;
    }
    on_failure_(status);
  };
  if (!channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + options_.connect_timeout))) {
    fail(absl::UnavailableError(absl::StrCat("cannot reach ", options_.peer_name, " at ",
                                             options_.address, " within ",
                                             absl::FormatDuration(options_.connect_timeout))));
    return;
  }
  v1::PushSummary summary;
  if (!options_.secret.empty()) context_.AddMetadata(kLinkSecretMetadata, options_.secret);
  if (!options_.run.empty()) context_.AddMetadata(kLinkRunMetadata, options_.run);
  std::unique_ptr<grpc::ClientWriter<v1::TensorFrame>> writer =
      stub_->Push(&context_, &summary);
  // The peer accepts the stream (kLinkAcceptedMetadata) or refuses it with a
  // status: a refused link fails now, not once a write finds the stream gone,
  // which may never come while both stages wait for each other's frames.
  writer->WaitForInitialMetadata();
  const auto& accepted = context_.GetServerInitialMetadata();
  if (accepted.find(kLinkAcceptedMetadata) == accepted.end()) {
    const grpc::Status status = writer->Finish();
    fail(absl::UnavailableError(
        absl::StrCat(options_.peer_name, " at ", options_.address, " refused the link: ",
                     status.error_message().empty() ? "no reason given" : status.error_message())));
    return;
  }
  while (true) {
    v1::TensorFrame frame;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !outbox_.empty() || closing_;
      };
      mu_.Await(absl::Condition(&ready));
      if (outbox_.empty()) break;  // closing and everything is written
      frame = std::move(outbox_.front());
      outbox_.pop_front();
    }
    const int64_t bytes = frame.data().size();
    if (!writer->Write(frame)) {
      grpc::Status status = writer->Finish();
      fail(absl::UnavailableError(absl::StrCat(
          "link to ", options_.peer_name, " at ", options_.address, " broke: ",
          status.error_message().empty() ? "the peer went away" : status.error_message())));
      return;
    }
    absl::MutexLock lock(&mu_);
    bytes_sent_ += bytes;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  absl::MutexLock lock(&mu_);
  done_ = true;
  if (!status.ok()) {
    status_ = absl::UnavailableError(absl::StrCat("link to ", options_.peer_name,
                                                  " ended with: ", status.error_message()));
  }
}

absl::Status PeerSender::Close(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&finished), timeout)) {
      status_ = absl::DeadlineExceededError(
          absl::StrCat("link to ", options_.peer_name, " did not close within ",
                       absl::FormatDuration(timeout)));
    }
  }
  context_.TryCancel();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  return status_;
}

int64_t PeerSender::bytes_sent() const {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

}  // namespace paci
