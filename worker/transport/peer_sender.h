#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include <grpcpp/grpcpp.h>

#include "paci/v1/stage.grpc.pb.h"
#include "worker/transport/frame_sender.h"

namespace paci {

// The outgoing link to one neighbour: one client stream of StageLink.Push,
// fed from a bounded outbox by its own thread, so that the compute thread
// overlaps with the transfer. A full outbox blocks Send (flow control). The
// first failure (peer unreachable, stream broken) is passed to `on_failure`
// once.
//
// Owns its thread: Start() begins it, Close() or the destructor joins it.
// Send and Close are called from one thread (the stage's compute thread).
class PeerSender final : public FrameSender {
 public:
  struct Options {
    std::string address;           // host:port of the peer's StageLink
    std::string peer_name;         // "stage 1", for messages
    size_t capacity = 16;          // frames waiting to be written
    absl::Duration connect_timeout = absl::Seconds(60);
    // TLS toward the peer when set; plaintext otherwise.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // With credentials: the name the peer's certificate must carry, instead
    // of its address (the workers of a namespace share one certificate).
    std::string tls_server_name;
    std::string secret;  // the attempt's link secret, sent on the stream
    std::string run;     // the attempt's run id (RunId), sent on the stream
  };

  PeerSender(const Options& options, std::function<void(absl::Status)> on_failure);
  ~PeerSender() override;
  PeerSender(const PeerSender&) = delete;
  PeerSender& operator=(const PeerSender&) = delete;

  void Start();
  // Queues a frame; blocks while the outbox is full. Returns false after a
  // failure (the frame is dropped).
  bool Send(v1::TensorFrame frame) override;
  // Sends what is queued, half-closes the stream and waits for the peer's
  // answer, at most `timeout`. Returns the stream's final status.
  absl::Status Close(absl::Duration timeout) override;

  int64_t bytes_sent() const;

 private:
  void Run();

  const Options options_;
  const std::function<void(absl::Status)> on_failure_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StageLink::Stub> stub_;
  grpc::ClientContext context_;

  mutable absl::Mutex mu_;
  std::deque<v1::TensorFrame> outbox_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace paci
