// The NCCL stage link. Without a GPU only its refusals run; the exchange
// needs two GPUs (NCCL refuses two ranks on one GPU) and skips otherwise; with
// one GPU, NCCL's answer to two ranks on it is recorded.

#include "worker/transport/nccl_link.h"

#include <atomic>
#include <iostream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#ifdef PACI_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace paci {
namespace {

int GpuCount() {
#ifdef PACI_HAVE_NCCL
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return 0;
#endif
}

TEST(NcclLinkTest, IdsOfTheWrongSizeAreRefused) {
  absl::StatusOr<std::unique_ptr<NcclLink>> link = NcclLink::Connect("short", true, 0);
  EXPECT_FALSE(link.ok());
}

TEST(NcclLinkTest, WithoutAGpuConnectFailsWithAClearReason) {
  if (GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_FALSE(NcclLink::Available());
  absl::StatusOr<std::unique_ptr<NcclLink>> link =
      NcclLink::Connect(std::string(NcclLink::kIdsBytes, '\0'), true, 0);
  ASSERT_FALSE(link.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(link.status())) << link.status();
}

#ifdef PACI_HAVE_NCCL
TEST(NcclLinkTest, TwoGpusExchangeActivationsAndGradientsAtOnce) {
  if (GpuCount() < 2) {
    GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one GPU); this machine has "
                 << GpuCount();
  }
  absl::StatusOr<std::string> ids = NcclLink::NewIds();
  ASSERT_TRUE(ids.ok()) << ids.status();
  constexpr size_t kCount = 1 << 20;
  std::vector<float> received_by_upper(kCount), received_by_lower(kCount);
  auto side = [&](bool lower) {
    const int device = lower ? 0 : 1;
    absl::StatusOr<std::unique_ptr<NcclLink>> link = NcclLink::Connect(*ids, lower, device);
    ASSERT_TRUE(link.ok()) << link.status();
    cudaSetDevice(device);
    float *out = nullptr, *in = nullptr;
    cudaMalloc(&out, kCount * sizeof(float));
    cudaMalloc(&in, kCount * sizeof(float));
    std::vector<float> values(kCount, lower ? 1.5f : -2.5f);
    cudaMemcpy(out, values.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
    // Both send first: the two directions must not wait on each other.
    absl::StatusOr<uint64_t> ticket = (*link)->Send(out, kCount, NcclDType::kFloat32);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    ASSERT_TRUE((*link)->Receive(in, kCount, NcclDType::kFloat32).ok());
    while (!(*link)->Done(*ticket)) std::this_thread::yield();
    cudaMemcpy((lower ? received_by_lower : received_by_upper).data(), in, kCount * sizeof(float),
               cudaMemcpyDeviceToHost);
    cudaFree(out);
    cudaFree(in);
  };
  std::thread lower([&] { side(true); });
  std::thread upper([&] { side(false); });
  lower.join();
  upper.join();
  EXPECT_EQ(received_by_upper[0], 1.5f);
  EXPECT_EQ(received_by_upper[kCount - 1], 1.5f);
  EXPECT_EQ(received_by_lower[0], -2.5f);
  EXPECT_EQ(received_by_lower[kCount - 1], -2.5f);
}

// Both ranks on GPU 0 (stage_host never asks for this: such stages use gRPC).
// NCCL refuses it ("Duplicate GPU detected"); the test records NCCL's answer
// and checks that both sides return: with an error, or with the right data.
TEST(NcclLinkTest, TwoRanksOnOneGpuAnswerWithoutHanging) {
  if (GpuCount() < 1) GTEST_SKIP() << "needs a GPU";
  absl::StatusOr<std::string> ids = NcclLink::NewIds();
  ASSERT_TRUE(ids.ok()) << ids.status();
  constexpr size_t kCount = 1024;
  absl::Status connected[2];
  std::atomic<int> joined{0};
  float received[2] = {0, 0};
  auto side = [&](int index) {
    absl::StatusOr<std::unique_ptr<NcclLink>> link = NcclLink::Connect(*ids, index == 0, 0);
    connected[index] = link.status();
    // Exchange only when both joined (a lone side would wait for its peer forever).
    joined.fetch_add(1);
    while (joined.load() < 2) std::this_thread::yield();
    if (!connected[0].ok() || !connected[1].ok()) return;
    float *out = nullptr, *in = nullptr;
    cudaMalloc(&out, kCount * sizeof(float));
    cudaMalloc(&in, kCount * sizeof(float));
    std::vector<float> values(kCount, index == 0 ? 1.5f : -2.5f);
    cudaMemcpy(out, values.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
    absl::StatusOr<uint64_t> ticket = (*link)->Send(out, kCount, NcclDType::kFloat32);
    if (ticket.ok() && (*link)->Receive(in, kCount, NcclDType::kFloat32).ok()) {
      while (!(*link)->Done(*ticket)) std::this_thread::yield();
      cudaMemcpy(&received[index], in, sizeof(float), cudaMemcpyDeviceToHost);
    }
    cudaFree(out);
    cudaFree(in);
  };
  std::thread lower([&] { side(0); });
  std::thread upper([&] { side(1); });
  lower.join();
  upper.join();
  std::cout << "NCCL, two ranks on GPU 0: lower " << connected[0] << "; upper " << connected[1]
            << std::endl;
  RecordProperty("lower", connected[0].ToString());
  RecordProperty("upper", connected[1].ToString());
  if (connected[0].ok() && connected[1].ok()) {
    EXPECT_EQ(received[0], -2.5f);
    EXPECT_EQ(received[1], 1.5f);
  }
}
#endif

}  // namespace
}  // namespace paci
