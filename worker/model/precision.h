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

// Whether /proc/cpuinfo's text names bfloat16 instructions: x86's avx512_bf16
// or amx_bf16 flags, Arm's bf16 feature. Without them LibTorch's bf16 kernels
// emulate the type, at a fraction of float32's speed.
bool CpuInfoHasBf16(std::string_view cpuinfo);
// The same for this machine (false when /proc/cpuinfo cannot be read).
bool CpuHasBf16();

struct StagePlacement {
  torch::Device device{torch::kCPU};
  Precision precision = Precision::kFp32;
  // Why this precision, or what to know about it: "automatic: ..." when the
  // job left runtime.precision to "auto", a warning when bf16 runs emulated
  // on a CPU without bfloat16 instructions; empty when named and native.
  std::string note;
  bool emulated = false;  // bf16 on a CPU without bfloat16 instructions (`note` warns)
  // The dtype of the weights and of the activations within the stage.
  torch::ScalarType weight_dtype() const {
    return precision == Precision::kBf16Weights ? torch::kBFloat16 : torch::kFloat;
  }
  // The dtype of the activations and gradients this stage sends on the stage
  // links: bfloat16 under either bf16 precision, half float32's bytes (under
  // autocast the stream between blocks stays float32 and is rounded once at
  // each cut, each way). A stage turns what it receives into weight_dtype(),
  // so stages that resolve `auto` differently still fit together.
  torch::ScalarType link_dtype() const {
    return precision == Precision::kFp32 ? torch::kFloat : torch::kBFloat16;
  }
};

// "fp32", "bf16-autocast" or "bf16-weights": runtime.precision's spelling.
const char* PrecisionName(Precision precision);

// Parses a device ("cpu", "cuda", "cuda:N") and a precision ("auto", "fp32",
// "bf16-autocast", "bf16-weights"; empty is "auto"). FailedPrecondition
// naming the field when the device is CUDA and this process has no CUDA (a
// CPU build of LibTorch, or no GPU), or the GPU index does not exist.
//
// "auto" is bf16-autocast on a CPU with bfloat16 instructions (`cpu_has_bf16`,
// this machine's CpuHasBf16() unless a test says otherwise): as fast as bf16
// goes there without moving the weights off float32, and stages that resolve
// it on different CPUs still fit together (link_dtype); fp32 on a CPU
// without them and on a GPU (measured on CPUs; a GPU job names its bf16).
// A bf16 precision named for a CPU without bfloat16 instructions runs, with
// a warning in `note`: LibTorch emulates the type there, rounding as the
// instructions do, its matmuls several times slower than fp32's.
absl::StatusOr<StagePlacement> ResolvePlacement(const std::string& device,
                                                const std::string& precision,
                                                bool cpu_has_bf16 = CpuHasBf16());

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
