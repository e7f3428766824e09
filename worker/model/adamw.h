#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace paci {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; applied to matrices (dim >= 2) only
};

// AdamW that updates parameters through `p.data()`.
//
// Why not torch::optim::AdamW: it updates parameters in place, which bumps
// autograd's version counter, and the backward of a micro-batch still in
// flight (forwarded before the step) then fails with "modified by an inplace
// operation". `p.data()` shares the parameter's storage under a fresh version
// counter, so the update is seen by every pending backward without the check
// firing: the in-flight backward computes input gradients with the *updated*
// weights, which is exactly PACI's bounded-inconsistency semantics (no weight
// stashing), while weight gradients use the saved activations. No patched
// LibTorch is needed. worker/model/model_test.cc proves both facts.
//
// Numerically the same as torch::optim::AdamW. Parameters that are not
// float32 (bf16 weights) get float32 master weights: moments and update in
// float32, then the parameter takes the rounded master value (still through
// p.data()). Works on any device: its state lives beside each parameter.
// Each step updates all parameters at once, on the CPU and on a GPU:
// at::_fused_adamw_, one pass over weights, gradients and moments per group
// (two calls a step: the matrices with weight decay, the rest without), the
// step count for the bias corrections read from a float32 tensor on the
// device. On one CPU thread it is about 4x faster than the multi-tensor ops
// (at::_foreach_*, about ten passes), which remain for lists the kernel does
// not take (another device type, tensors that are not dense). Both are the
// same update (decoupled weight decay, then the bias-corrected step), up to
// float32 rounding.
// Not thread-safe: owned by the stage's compute thread.
class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_parameters,
        const AdamWOptions& options);

  // One update with learning rate `lr` from the accumulated gradients.
  // Parameters without a gradient are skipped.
  void Step(double lr);
  // Drops the gradients (undefined until the next backward).
  void ZeroGrad();

  // Weight prediction (pipeline.drift_correction "predict"): moves the
  // parameters `lr_steps` (the learning rate times the steps to look ahead)
  // along AdamW's current update direction, w - lr_steps * m_hat / (sqrt(v_hat)
  // + eps), the moments bias-corrected at steps(), through p.data() as Step()
  // does. Retract() puts back what the last Extrapolate moved exactly, bit for
  // bit (replicas that predicted different forwards still hold the same
  // weights): parameters with master weights take the master value again;
  // float32 ones the copy taken before the move, in one float32 buffer reused
  // from move to move, as large as the most any one move copied (a forward
  // that moves its pieces one at a time, StageModel::Prediction, needs the
  // largest piece's copy, not the stage's, and frees it with
  // RetractAndRelease() once the forward is done, for the backward's use).
  // The decoupled weight decay's share (lr * weight_decay * w, a thousandth of
  // the Adam term at the examples' rates) is left out. No move before the
  // first step (no moments).
  //
  // `reads` narrows the move to what the forward reads: a table it looks up
  // by index (the token embedding) moves the rows of `reads.rows[name]` only,
  // each element exactly as the whole table's move would, and its copy is of
  // those rows; with `reads.only`, only the parameters it names move.
  // Everything else moves whole. So a forward that looks up a micro-batch's
  // tokens in a table of 32,768 rows copies and moves a few hundred of them,
  // not 32 MB.
  struct Reads {
    std::map<std::string, torch::Tensor> rows;  // unique int64 row indices
    const std::vector<std::string>* only = nullptr;  // null: every parameter
  };
  // A move while another is in place puts that one back first.
  void Extrapolate(double lr_steps, const Reads& reads);
  void Extrapolate(double lr_steps);  // every parameter, whole
  // Puts back what the last Extrapolate moved (nothing after a Retract).
  void Retract();
  // Puts back what the last Extrapolate moved and frees the copies' buffer.
  void RetractAndRelease() {
    Retract();
    copies_ = torch::Tensor();
  }

  // Delay compensation (pipeline.drift_correction "delay-comp"), DC-ASGD's
  // adaptive form (Zheng et al., 2017) on AdamW, before Step(): a gradient
  // g computed on weights `drift` steps old is moved to where the weights are
  // now by the first-order Taylor term with the diagonal outer-product
  // Hessian, g + lambda * g * g * (w_now - w_then) / sqrt(MS), where MS is
  // AdamW's own bias-corrected second moment v_hat (the mean square DC-ASGD
  // keeps) and w_now - w_then is `drift` times the last step's move, rebuilt
  // from the moments that made it: the last step ran at `last_lr` and moved
  // w by -last_lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * w_then) on
  // matrices. No copy of the weights, no buffer: the moments now are the ones
  // that made the last step. A no-op before the first step or for drift 0.
  void CompensateDelay(double last_lr, double drift, double lambda);

  int64_t steps() const { return steps_; }
  // Whether the last Step() ran the fused kernel (at::_fused_adamw_).
  bool last_step_fused() const { return last_step_fused_; }
  const std::vector<std::pair<std::string, torch::Tensor>>& parameters() const { return params_; }
  // Moment estimates, keyed "exp_avg/<name>" and "exp_avg_sq/<name>", and
  // master weights "master/<name>" of parameters that are not float32.
  std::vector<std::pair<std::string, torch::Tensor>> State() const;
  // Restores State() output and the step count; the caller checked the names
  // and shapes.
  void SetState(int64_t steps, const std::vector<std::pair<std::string, torch::Tensor>>& state);

 private:
  AdamWOptions options_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<torch::Tensor> master_;  // undefined for float32 parameters
  std::vector<torch::Tensor> master_grad_;  // float32 copies of their gradients (scratch)
  int64_t steps_ = 0;
  bool last_step_fused_ = false;
  // The fused kernel's conditions: the CPU or CUDA, one device, float32, each
  // parameter's four tensors of the same sizes and strides, dense.
  static bool FusedApplies(const std::vector<torch::Tensor>& w,
                           const std::vector<torch::Tensor>& g,
                           const std::vector<torch::Tensor>& exp_avg,
                           const std::vector<torch::Tensor>& exp_avg_sq);
  void FusedStep(double lr, const std::vector<torch::Tensor>& w,
                 const std::vector<torch::Tensor>& g, const std::vector<torch::Tensor>& exp_avg,
                 const std::vector<torch::Tensor>& exp_avg_sq, const std::vector<bool>& decay);
  torch::Tensor step_count_;  // float32 on the parameters' device: steps_, for the kernel
  // The bias corrections at steps_: 1 - beta1^t, and sqrt(v_hat) of a
  // second moment (or some of its rows; a new tensor), what Extrapolate and
  // CompensateDelay divide by.
  double FirstMomentBias() const;
  torch::Tensor RootVHat(const torch::Tensor& exp_avg_sq) const;
  // What the last Extrapolate moved of each parameter, for Retract: nothing,
  // the rows `rows`, or (rows undefined) all of it; and the float32
  // parameters as they were before it (those rows, or the whole parameter, a
  // view of copies_; undefined with master weights).
  struct Moved {
    bool any = false;
    torch::Tensor rows;
    torch::Tensor before;
  };
  std::vector<Moved> moved_;
  torch::Tensor copies_;  // float32, flat: the whole parameters' copies, reused
};

}  // namespace paci
