#include "server/worker_gateway.h"

#include <deque>
#include <memory>
#include <thread>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_security.h"
#include "common/job_token.h"
#include "common/peer_identity.h"
#include "server/coordinator_service.h"

namespace paci {
namespace {

// Messages waiting to be written to one worker. Shared by the handler and the
// Sender the JobManager keeps, which may outlive the stream (then it drops).
class Outbox {
 public:
  void Push(const v1::CoordinatorMessage& message) {
    absl::MutexLock lock(&mu_);
    if (!closed_) queue_.push_back(message);
  }
  // Blocks for the next message; nullopt once closed.
  std::optional<v1::CoordinatorMessage> Pop() {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (closed_) return std::nullopt;
    v1::CoordinatorMessage message = std::move(queue_.front());
    queue_.pop_front();
    return message;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  absl::Mutex mu_;
  std::deque<v1::CoordinatorMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status CheckRegistration(const v1::WorkerRegistration& r) {
  if (r.worker_id().empty() || r.worker_id().size() > 253) {
    return absl::InvalidArgumentError("register.worker_id: 1 to 253 characters");
  }
  if (r.link_address().empty() || r.link_address().size() > 1024) {
    return absl::InvalidArgumentError("register.link_address: required, at most 1024 characters");
  }
  if (r.labels_size() > 64) return absl::InvalidArgumentError("register.labels: at most 64");
  if (r.job_token().size() > 1024) {
    return absl::InvalidArgumentError("register.job_token: at most 1024 characters");
  }
  for (const auto& [k, v] : r.labels()) {
    if (k.empty() || k.size() > 253 || v.size() > 253) {
      return absl::InvalidArgumentError("register.labels: keys 1 to 253, values at most 253 characters");
    }
  }
  return absl::OkStatus();
}

// Gives a stream's slot back when the stream ends, however it ends.
class StreamSlot {
 public:
  StreamSlot(WorkerStreamSlots& slots, const PeerIdentity& peer) : slots_(slots), peer_(peer) {}
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;
  ~StreamSlot() { slots_.Give(peer_); }

 private:
  WorkerStreamSlots& slots_;
  const PeerIdentity& peer_;
};

}  // namespace

absl::Status WorkerStreamSlots::Take(const PeerIdentity& peer) {
  if (peer.kind != PeerIdentity::Kind::kWorker) return absl::OkStatus();
  absl::MutexLock lock(&mutex_);
  auto it = open_.find(peer.name_space);
  const int streams = it == open_.end() ? 0 : it->second;
  if (streams >= max_per_namespace_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "namespace ", peer.name_space, " has ", streams, " worker streams open, its limit "
        "(--max_workers_per_namespace): the certificate \"", peer.common_name,
        "\" opens no more until one ends"));
  }
  ++open_[peer.name_space];
  return absl::OkStatus();
}

void WorkerStreamSlots::Give(const PeerIdentity& peer) {
  if (peer.kind != PeerIdentity::Kind::kWorker) return;
  absl::MutexLock lock(&mutex_);
  auto it = open_.find(peer.name_space);
  if (it != open_.end() && --it->second <= 0) open_.erase(it);
}

int WorkerStreamSlots::Open(const std::string& name_space) const {
  absl::MutexLock lock(&mutex_);
  auto it = open_.find(name_space);
  return it == open_.end() ? 0 : it->second;
}

WorkerGateway::WorkerGateway(JobManager& manager, std::string token,
                             AdministratorNames administrators, int max_workers_per_namespace)
    : manager_(manager),
      token_(std::move(token)),
      administrators_(std::move(administrators)),
      streams_(max_workers_per_namespace) {}

grpc::Status WorkerGateway::Connect(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
  grpc::Status auth = CheckBearerToken(*context, token_);
  if (!auth.ok()) return auth;
  // A worker certificate's namespace holds at most --max_workers_per_namespace
  // streams, counted from before the first message: a stream that only waits
  // holds a thread too.
  const PeerIdentity peer = IdentityOf(*context, administrators_);
  if (absl::Status slot = streams_.Take(peer); !slot.ok()) {
    LOG(WARNING) << "worker stream refused: " << slot;
    return ToGrpc(slot);
  }
  const StreamSlot held(streams_, peer);
  v1::WorkerMessage message;
  if (!stream->Read(&message)) return grpc::Status::OK;
  if (!message.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on a worker stream must be register");
  }
  v1::WorkerRegistration registration = message.register_();
  absl::Status valid = CheckRegistration(registration);
  if (!valid.ok()) return ToGrpc(valid);
  // The token label is the coordinator's to give: its digest of the token the
  // worker holds, never a value the worker names. So is the namespace it is
  // placed by (below, from its certificate).
  registration.mutable_labels()->erase(kWorkerTokenLabel);
  registration.mutable_labels()->erase(kNamespaceLabel);
  if (!registration.job_token().empty()) {
    (*registration.mutable_labels())[kWorkerTokenLabel] = TokenDigest(registration.job_token());
    registration.clear_job_token();
  }
  const auto label = registration.labels().find(kWorkerJobLabel);
  const std::string* job_label = label == registration.labels().end() ? nullptr : &label->second;
  absl::Status bound = CheckWorkerIdentity(peer, registration.worker_id(), job_label);
  if (!bound.ok()) {
    LOG(WARNING) << "worker " << registration.worker_id() << " refused: " << bound;
    return ToGrpc(bound);
  }
  // The jobs it is placed on: those of its certificate's namespace.
  const std::string name_space = WorkerNamespace(peer, job_label);

  auto outbox = std::make_shared<Outbox>();
  absl::Status connected = manager_.Connect(
      registration, [outbox](const v1::CoordinatorMessage& m) { outbox->Push(m); }, name_space);
  if (!connected.ok()) {
    LOG(WARNING) << "worker " << registration.worker_id() << " refused: " << connected;
    return ToGrpc(connected);
  }

  std::thread writer([outbox, stream, context] {
    while (auto next = outbox->Pop()) {
      if (!stream->Write(*next)) {
        context->TryCancel();  // the reader below ends too
        return;
      }
    }
  });
  const std::string& id = registration.worker_id();
  while (stream->Read(&message)) {
    if (message.has_heartbeat()) {
      manager_.OnHeartbeat(id);
    } else if (message.has_report()) {
      manager_.OnReport(id, message.report());
    }
  }
  outbox->Close();
  writer.join();
  manager_.Disconnect(id);
  return grpc::Status::OK;
}

}  // namespace paci
