#include "worker/runtime/replica_group.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace paci {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// An address where nothing listens: a port the kernel gave out, then closed.
std::string ClosedAddress() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  close(fd);
  return absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
}

// Replica `replica` of `replicas`; peer r's worker at peers[r] (the store's
// address when not given).
ReplicaGroupOptions Options(const ReplicaStoreServer& store, int replica, int replicas,
                            std::vector<std::string> peers = {}) {
  ReplicaGroupOptions o;
  o.store_address = store.address();
  o.prefix = "job/1/stage-0";
  o.replica = replica;
  o.num_replicas = replicas;
  o.hostname = "127.0.0.1";
  o.peer_addresses = std::move(peers);
  o.peer_addresses.resize(replicas, store.address());
  o.join_timeout = absl::Seconds(20);
  o.collective_timeout = absl::Seconds(20);
  return o;
}

// Joins `replicas` groups on threads, as `replicas` workers would.
std::vector<std::unique_ptr<ReplicaGroup>> JoinAll(const ReplicaStoreServer& store, int replicas,
                                                   const std::vector<std::string>& peers = {}) {
  std::vector<std::unique_ptr<ReplicaGroup>> groups(replicas);
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      auto joined = ReplicaGroup::Join(Options(store, r, replicas, peers));
      ASSERT_TRUE(joined.ok()) << joined.status();
      groups[r] = std::move(*joined);
    });
  }
  for (auto& t : threads) t.join();
  return groups;
}

// Whether a TCP connection to 127.0.0.1:`port` is taken.
bool Connects(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  close(fd);
  return connected;
}

TEST(ReplicaStoreServerTest, AReservedStoreRefusesConnectionsUntilServed) {
  auto store = ReplicaStoreServer::Reserve("127.0.0.1");
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string& address = (*store)->address();
  ASSERT_TRUE(absl::StartsWith(address, "127.0.0.1:")) << address;
  uint32_t port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) << address;
  // A worker that runs no replicated stage: nobody can reach (or forge keys in) its store.
  EXPECT_FALSE((*store)->serving());
  EXPECT_FALSE(Connects(port));
  ASSERT_TRUE((*store)->Serve().ok());
  EXPECT_TRUE((*store)->serving());
  EXPECT_TRUE(Connects(port));
  EXPECT_TRUE((*store)->Serve().ok());  // once: later calls change nothing
  // It is a TCPStore: the replicas meet through it.
  std::vector<std::unique_ptr<ReplicaGroup>> groups = JoinAll(**store, 2);
  for (const auto& g : groups) EXPECT_NE(g, nullptr);
}

TEST(ReplicaGroupTest, AverageGivesEveryReplicaTheSameMeanInEachTensorsOwnType) {
  auto store = ReplicaStoreServer::Reserve("127.0.0.1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Serve().ok());
  std::vector<std::unique_ptr<ReplicaGroup>> groups = JoinAll(**store, 3);
  ASSERT_EQ(groups.size(), 3u);
  for (const auto& g : groups) ASSERT_NE(g, nullptr);
  std::vector<std::vector<torch::Tensor>> tensors(3);
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(r);
    tensors[r] = {torch::randn({5, 7}), torch::randn({3}).to(torch::kBFloat16),
                  torch::full({1}, 10.0 * (r + 1), torch::kDouble), torch::randn({2, 2, 2})};
  }
  std::vector<torch::Tensor> expected;
  for (size_t i = 0; i < tensors[0].size(); ++i) {
    expected.push_back((tensors[0][i].to(torch::kDouble) + tensors[1][i].to(torch::kDouble) +
                        tensors[2][i].to(torch::kDouble)) / 3);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { EXPECT_TRUE(groups[r]->Average(tensors[r]).ok()); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(tensors[0][i].scalar_type(), tensors[1][i].scalar_type());
    EXPECT_TRUE(torch::allclose(tensors[0][i].to(torch::kDouble), expected[i], 1e-2, 1e-5))
        << "tensor " << i;
    for (int r = 1; r < 3; ++r) {
      EXPECT_TRUE(torch::equal(tensors[0][i], tensors[r][i])) << "tensor " << i << " replica " << r;
    }
  }
  EXPECT_DOUBLE_EQ(tensors[2][2].item<double>(), 20.0);  // float64 stays exact
  EXPECT_EQ(HashTensors(tensors[0], 0), HashTensors(tensors[2], 0));
}

TEST(ReplicaGroupTest, AStoreNobodyServesFailsTheJoinNamingIt) {
  ReplicaGroupOptions o;
  o.store_address = ClosedAddress();
  o.prefix = "job/1/stage-1";
  o.stage = 1;
  o.replica = 1;
  o.num_replicas = 2;
  o.hostname = "127.0.0.1";
  o.peer_addresses = {o.store_address, ClosedAddress()};
  o.join_timeout = absl::Seconds(2);
  auto joined = ReplicaGroup::Join(o);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(joined.status().message(),
              AllOf(HasSubstr("stage 1 replica 1: meeting at the store " + o.store_address),
                    HasSubstr("not answering: the store at " + o.store_address +
                              ", replica 0 at " + o.store_address)));
}

TEST(ReplicaGroupTest, AReplicaThatNeverArrivesFailsTheJoinWithinItsTimeoutNamingIt) {
  auto store = ReplicaStoreServer::Reserve("127.0.0.1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Serve().ok());
  const std::string gone = ClosedAddress();  // replica 2's worker died before it joined
  ReplicaGroupOptions o = Options(**store, 0, 3, {(*store)->address(), (*store)->address(), gone});
  o.join_timeout = absl::Seconds(2);
  std::thread second([&] {  // replica 1 comes, and times out as well
    ReplicaGroupOptions p = o;
    p.replica = 1;
    EXPECT_FALSE(ReplicaGroup::Join(p).ok());
  });
  auto joined = ReplicaGroup::Join(o);  // bounded by join_timeout, not the collective's
  second.join();
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(joined.status().message(),
              AllOf(HasSubstr("stage 0 replica 0: meeting at the store"),
                    HasSubstr("replica 2 did not arrive within 2s"),
                    HasSubstr("not answering: replica 2 at " + gone)));
}

TEST(ReplicaGroupTest, AStrangerAtTheStoreCannotForgeAReplicasArrival) {
  auto store = ReplicaStoreServer::Reserve("127.0.0.1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Serve().ok());
  ReplicaGroupOptions o = Options(**store, 0, 2);
  o.secret = "0123456789abcdef0123456789abcdef";
  o.join_timeout = absl::Seconds(2);
  // A stranger who reaches the store and knows the group (its placement and stage, not
  // the attempt's secret) says replica 1 has arrived, as c10d's own client would.
  std::string host = "127.0.0.1";
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi((*store)->address().substr((*store)->address().rfind(':') + 1), &port));
  c10d::TCPStoreOptions stranger_options;
  stranger_options.port = static_cast<uint16_t>(port);
  stranger_options.waitWorkers = false;
  auto stranger = c10::make_intrusive<c10d::TCPStore>(host, stranger_options);
  c10d::PrefixStore(o.prefix, stranger).set("arrived/1", std::vector<uint8_t>{1});
  // Replica 0 is not fooled: it still waits for replica 1, which never comes.
  auto joined = ReplicaGroup::Join(o);
  ASSERT_FALSE(joined.ok());
  EXPECT_THAT(joined.status().message(), HasSubstr("replica 1 did not arrive within 2s"));
  // Nor can the stranger see what the replica wrote under the secret.
  EXPECT_FALSE(stranger->check({o.prefix + "/arrived/0"}));
  EXPECT_TRUE(stranger->check({o.secret + "/" + o.prefix + "/arrived/0"}));  // the key is there
}

TEST(ReplicaGroupTest, AReplicaThatLeavesFailsTheAllReduceNamingIt) {
  auto store = ReplicaStoreServer::Reserve("127.0.0.1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Serve().ok());
  const std::string gone = ClosedAddress();  // replica 1's worker, no longer listening
  std::vector<std::unique_ptr<ReplicaGroup>> groups =
      JoinAll(**store, 2, {(*store)->address(), gone});
  ASSERT_NE(groups[0], nullptr);
  ASSERT_NE(groups[1], nullptr);
  groups[1].reset();  // its process ended: its sockets close
  std::vector<torch::Tensor> tensors{torch::ones({4})};
  const absl::Status status = groups[0]->Average(tensors);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("stage 0 replica 0: the all-reduce with the 2 replicas of stage 0"),
                    HasSubstr("not answering: replica 1 at " + gone)));
}

TEST(ReplicaGroupTest, TheWeightsHashChangesWithOneBitAndChains) {
  std::vector<torch::Tensor> a{torch::arange(10, torch::kFloat), torch::ones({3, 3})};
  std::vector<torch::Tensor> b{a[0].clone(), a[1].clone()};
  EXPECT_EQ(HashTensors(a, 0), HashTensors(b, 0));
  b[1][2][2] = std::nextafter(1.0f, 2.0f);
  EXPECT_NE(HashTensors(a, 0), HashTensors(b, 0));
  EXPECT_NE(HashTensors(a, HashTensors(a, 0)), HashTensors(a, 0));
}

}  // namespace
}  // namespace paci
