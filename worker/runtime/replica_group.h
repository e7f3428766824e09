#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/runtime/gradient_sync.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace paci {

// The rendezvous store (torch.distributed's TCPStore) a worker serves for the
// replica groups of the stages whose replica 0 it runs. TCPStore has no
// authentication, so the groups' keys start with the attempt's secret
// (ReplicaGroupOptions::secret), and it is served only when needed: Reserve binds its port
// (on every interface, `address()` is `advertise_host` with that port) without
// listening, so a connection there is refused, and the first Serve (replica 0
// of a job with data_parallel > 1) starts the store on it. A worker that only
// ever runs R = 1 jobs never serves one.
class ReplicaStoreServer {
 public:
  // Unavailable when no port can be bound.
  static absl::StatusOr<std::unique_ptr<ReplicaStoreServer>> Reserve(
      const std::string& advertise_host);
  ~ReplicaStoreServer();

  const std::string& address() const { return address_; }
  // Starts the store on the reserved port, once; later calls return at once.
  // Unavailable when it cannot.
  absl::Status Serve();
  bool serving() const;

 private:
  struct Impl;
  explicit ReplicaStoreServer(std::unique_ptr<Impl> impl, std::string address);
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

struct ReplicaGroupOptions {
  std::string store_address;  // host:port of replica 0's ReplicaStoreServer
  std::string prefix;         // the group's keys: unique to the placement and stage
  // The attempt's secret (StageAssignment.link_secret): every key of the
  // group starts with it, so a stranger who reaches the store can neither
  // read the replicas' addresses nor forge a key they wait for (TCPStore
  // lists no keys). Empty only in tests.
  std::string secret;
  int stage = 0;
  int replica = 0;
  int num_replicas = 1;
  std::string hostname = "127.0.0.1";  // where this process's Gloo sockets listen; "[::1]" too
  // Every replica's worker of this stage (its link address), by replica: a
  // failure names the ones that do not answer.
  std::vector<std::string> peer_addresses;
  absl::Duration join_timeout = absl::Seconds(120);  // every replica arrives
  // One all-reduce: how long a replica waits for the slowest, which may be
  // replica 0 evaluating or writing a checkpoint.
  absl::Duration collective_timeout = absl::Minutes(5);
};

// The replicas of one pipeline stage (pipeline.data_parallel): a c10d
// ProcessGroupGloo over a TCPStore, so the all-reduce is LibTorch's own.
// Used by one thread, the stage's compute thread.
class ReplicaGroup final : public GradientSync {
 public:
  // Meets the other replicas. Unavailable, naming the replicas that did not
  // arrive and the peers (or the store) that do not answer, when they do not
  // all come within join_timeout.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Join(const ReplicaGroupOptions& options);
  ~ReplicaGroup() override;

  // Replaces each tensor by its mean over the replicas, in one all-reduce per
  // element type (float64 tensors in float64, every other in float32, then
  // back to its own type). Any device: the values travel through host memory.
  // Every replica must pass tensors of the same shapes in the same order, and
  // ends with the same bits. Unavailable naming the peers that do not answer
  // when a replica is gone.
  absl::Status Average(const std::vector<torch::Tensor>& tensors) override;

  int replica() const override { return options_.replica; }
  int num_replicas() const override { return options_.num_replicas; }

 private:
  struct Impl;
  ReplicaGroup(const ReplicaGroupOptions& options, std::unique_ptr<Impl> impl);
  // Marks this replica arrived and waits up to join_timeout for the others.
  absl::Status Arrive(c10d::Store& store) const;
  // `what` failed: Unavailable with the peers that do not answer a connect.
  absl::Status Failed(const std::string& what, const std::string& error) const;

  const ReplicaGroupOptions options_;
  std::unique_ptr<Impl> impl_;
};

// A CRC-32 of the tensors' bytes (as they are in host memory), continuing
// `seed`: the weights' fingerprint, chained step after step.
uint32_t HashTensors(const std::vector<torch::Tensor>& tensors, uint32_t seed);

}  // namespace paci
