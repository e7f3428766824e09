#include "worker/model/precision.h"

#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/read_file.h"

namespace paci {

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16Autocast: return "bf16-autocast";
    case Precision::kBf16Weights: return "bf16-weights";
  }
  return "fp32";
}

absl::StatusOr<StagePlacement> ResolvePlacement(const std::string& device,
                                                const std::string& precision,
                                                bool cpu_has_bf16) {
  StagePlacement placement;
  const bool automatic = precision.empty() || precision == "auto";
  if (automatic || precision == "fp32") {
    placement.precision = Precision::kFp32;
  } else if (precision == "bf16-autocast") {
    placement.precision = Precision::kBf16Autocast;
  } else if (precision == "bf16-weights") {
    placement.precision = Precision::kBf16Weights;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "runtime.precision: must be auto, fp32, bf16-autocast or bf16-weights, got \"", precision,
        "\""));
  }
  try {
    placement.device = torch::Device(device.empty() ? "cpu" : device);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("runtime.device: must be cpu, cuda or cuda:N, got \"", device, "\""));
  }
  if (placement.device.is_cuda()) {
    if (!torch::cuda::is_available()) {
      // LibTorch's CUDA half registers its hooks when it is linked (the CUDA build).
      return absl::FailedPreconditionError(absl::StrCat(
          "runtime.device: ", device, " asked for, but ",
          at::detail::getCUDAHooks().isBuilt()
              ? "this worker sees no GPU (request one, e.g. resources.limits nvidia.com/gpu, "
                "on a node whose container runtime passes it in)"
              : "this worker's LibTorch is the CPU build (the CUDA worker is built with "
                "-DPACI_CUDA=ON, image paci-worker-cuda)"));
    }
    const int64_t index = placement.device.has_index() ? placement.device.index() : 0;
    if (index >= static_cast<int64_t>(torch::cuda::device_count())) {
      return absl::FailedPreconditionError(
          absl::StrCat("runtime.device: ", device, " asked for, but this worker has ",
                       torch::cuda::device_count(), " GPU(s)"));
    }
    placement.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  } else if (!placement.device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("runtime.device: must be cpu, cuda or cuda:N, got \"", device, "\""));
  } else if (automatic) {
    if (cpu_has_bf16) placement.precision = Precision::kBf16Autocast;
    placement.note = cpu_has_bf16
                         ? "automatic: this CPU has bfloat16 instructions"
                         : "automatic: this CPU has no bfloat16 instructions (avx512_bf16, "
                           "amx_bf16 or Arm's bf16)";
  } else if (placement.precision != Precision::kFp32 && !cpu_has_bf16) {
    placement.emulated = true;
    placement.note = absl::StrCat(
        "warning: ", precision,
        " on a CPU without bfloat16 instructions (avx512_bf16 or amx_bf16 on x86, bf16 on Arm; "
        "see /proc/cpuinfo): LibTorch emulates bfloat16 here, its matmuls several times slower "
        "than fp32's; use fp32 or auto for speed");
  }
  if (automatic && placement.device.is_cuda()) {
    placement.note = "automatic: fp32 on a GPU (name bf16-autocast or bf16-weights for bfloat16)";
  }
  return placement;
}

bool CpuInfoHasBf16(std::string_view cpuinfo) {
  for (absl::string_view line : absl::StrSplit(absl::string_view(cpuinfo.data(), cpuinfo.size()), '\n')) {
    // x86: "flags\t\t: fpu ... avx512_bf16 ..."; Arm: "Features\t: fp asimd ... bf16 ...".
    if (!absl::StartsWith(line, "flags") && !absl::StartsWith(line, "Features")) continue;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    for (absl::string_view flag : absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipEmpty())) {
      if (flag == "avx512_bf16" || flag == "amx_bf16" || flag == "bf16") return true;
    }
    return false;  // every processor lists the same flags
  }
  return false;
}

bool CpuHasBf16() {
  static const bool has = [] {
    absl::StatusOr<std::string> cpuinfo = ReadFileToString("/proc/cpuinfo", 64 << 20);
    return cpuinfo.ok() && CpuInfoHasBf16(*cpuinfo);
  }();
  return has;
}

namespace {

// Autocast's state per device type (LibTorch 2.4 on).
bool AutocastEnabled(bool cuda) {
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
}
void SetAutocast(bool cuda, bool enabled) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled);
}
void SetAutocastBf16(bool cuda) {
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, at::kBFloat16);
}

}  // namespace

AutocastScope::AutocastScope(const StagePlacement& placement) {
  if (placement.precision != Precision::kBf16Autocast) return;
  active_ = true;
  cuda_ = placement.device.is_cuda();
  was_enabled_ = AutocastEnabled(cuda_);
  SetAutocastBf16(cuda_);
  SetAutocast(cuda_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Casts of the weights are cached for the scope; the optimizer changes them.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(cuda_, was_enabled_);
}

}  // namespace paci
