#pragma once

// Where a stage computes and in which precision (runtime.device,
// runtime.stage_devices and runtime.precision of the job spec).
// Includes <torch/torch.h>: only worker/ code includes this header.

#include <string>
#include <string_view>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "worker/model/gpt_config.h"

namespace paci {

struct StagePlacement {
  torch::Device device{torch::kCPU};
  Precision precision = Precision::kFp32;
  // The dtype of the weights and of the activations between stages.
  torch::ScalarType weight_dtype() const {
    return precision == Precision::kBf16Weights ? torch::kBFloat16 : torch::kFloat;
  }
};

// Parses a device ("cpu", "cuda", "cuda:N") and a precision ("fp32",
// "bf16-autocast", "bf16-weights"). FailedPrecondition naming the field when
// the device is CUDA and this process has no CUDA (a CPU build of LibTorch,
// or no GPU), or the GPU index does not exist; and when a bf16 precision is
// asked on a CPU without bfloat16 instructions (CpuHasBf16), where it would
// run slower than fp32 for the same loss: refused with the reason, not run
// slowly.
absl::StatusOr<StagePlacement> ResolvePlacement(const std::string& device,
                                                const std::string& precision);

// Whether /proc/cpuinfo's text names bfloat16 instructions: x86's avx512_bf16
// or amx_bf16 flags, Arm's bf16 feature. Without them LibTorch's bf16 kernels
// emulate the type, at a fraction of float32's speed.
bool CpuInfoHasBf16(std::string_view cpuinfo);
// The same for this machine (false when /proc/cpuinfo cannot be read).
bool CpuHasBf16();

// Turns autocast on for the placement's device for its lifetime when the
// placement asks for bf16 autocast; otherwise does nothing. LibTorch's
// autocast state is per thread: construct it on the thread that computes.
class AutocastScope {
 public:
  explicit AutocastScope(const StagePlacement& placement);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
};

}  // namespace paci
