#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "paci/v1/stage.grpc.pb.h"
#include "worker/transport/frame_validator.h"
#include "worker/transport/inbox.h"

namespace paci {

// The gRPC adapter of a worker's incoming links. A stream must carry the
// attached attempt's link secret (kLinkSecretMetadata) or it is refused as
// UNAUTHENTICATED before a frame is read, leaving the Inbox untouched. A worker's server lives
// longer than any one stage it runs: the stage attaches its expectations and
// Inbox when it starts and detaches when it ends.
//
// Each neighbour keeps one client stream open, and only one: a second stream
// from a stage that already has one to the attached stage is refused as
// ALREADY_EXISTS at its first frame, never queued. Every frame is validated
// (ValidateFrame against the attached stage, whose job_name is the run id)
// before it is queued. A frame that fails validation ends that stream with
// INVALID_ARGUMENT and is never queued. A stream that opens before its stage
// is attached waits up to 30 s for it (a neighbour may be a moment faster),
// then is refused as UNAVAILABLE. A stream of another run than the attached
// stage's (the run id it names, kLinkRunMetadata) waits the same way, for its
// own stage, while the one here is still ending: a later attempt of this
// job (a restarted job's neighbour can be a moment faster than this worker's
// stop) or another job (the next job placed here can be a moment faster than
// this worker's end of the last). The run id is no credential: after the wait
// the secret decides, and a stream naming an earlier attempt of the attached
// job or no run id is refused at once. An accepted stream gets
// kLinkAcceptedMetadata before any frame is read, so that its sender learns
// of a refusal at once. At most kMaxWaitingStreams wait at once
// (a stage has two neighbours), so strangers on the port of an idle worker
// cannot take its server's threads: more are refused at once as
// RESOURCE_EXHAUSTED. A neighbour's stream that ends before the
// stage is finished (the peer died or gave up) fails the Inbox with
// UNAVAILABLE naming the stage.
//
// With a peer name (the worker's --link_tls_server_name, on mutual-TLS
// links), a stream whose sender's verified certificate does not carry that
// DNS name (paci-worker.<namespace>, which every worker certificate of the
// namespace carries) is refused as UNAUTHENTICATED before anything else: a
// certificate of the same CA made for someone else (the operator, a tenant,
// another namespace's workers) is no stage's neighbour.
//
// Thread-safe.
class StageLinkService final : public v1::StageLink::Service {
 public:
  // `peer_name`: the DNS name every sender's certificate must carry; empty:
  // none is checked (plaintext links, or TLS checked by the CA alone).
  explicit StageLinkService(std::string peer_name = "") : peer_name_(std::move(peer_name)) {}

  void Attach(const LinkExpectations& expect, std::shared_ptr<Inbox> inbox);
  // Streams of the detached stage end at their next frame.
  void Detach();

  grpc::Status Push(grpc::ServerContext* context, grpc::ServerReader<v1::TensorFrame>* reader,
                    v1::PushSummary* summary) override;

  int64_t frames_rejected() const { return frames_rejected_.load(); }
  // Streams now waiting for a stage to be attached.
  int waiting_streams() const {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }
  // Waits, at most `timeout`, until `count` streams wait for a stage; whether they do.
  bool AwaitWaitingStreams(int count, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return waiting_ >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  static constexpr int kMaxWaitingStreams = 4;

 private:
  const std::string peer_name_;
  // The stages that have opened a stream to the attached stage.
  struct Senders {
    absl::Mutex mu;
    std::set<int> stages ABSL_GUARDED_BY(mu);
  };
  struct Attached {
    LinkExpectations expect;
    std::shared_ptr<Inbox> inbox;
    std::shared_ptr<Senders> senders;
  };
  // The attached stage once one is (waiting up to 30 s for it); nullopt
  // with *crowded set when kMaxWaitingStreams already wait.
  // A stream of another run than the attached stage's (MayBeNextRun) waits the
  // same way, for its own stage.
  std::optional<Attached> AwaitAttached(const std::string& run, bool* crowded) const;

  mutable absl::Mutex mu_;
  std::optional<Attached> attached_ ABSL_GUARDED_BY(mu_);
  mutable int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> frames_rejected_{0};
};

}  // namespace paci
