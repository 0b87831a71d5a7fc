// bwd_sm90's registry entry: the Hopper backward (WGMMA, TMA, warp specialization), its support
// rules, the (dtype, head_dim) dispatch, and the workspace it shares with fa2.
#include "kernels/bwd_sm90/bwd_sm90_launch.h"

#include <cstdint>

#include "common/status_util.h"
#include "kernels/common/backward_workspace.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/kernel_checks.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

constexpr const char* kName = "bwd_sm90";

struct BwdSm90 {
  template <typename T, int D>
  static cudaError_t run(const BwdProblem& p, cudaStream_t s) {
    if constexpr (bwd_sm90::has_shape(D)) return bwd_sm90::launch_backward<T, D>(p, s);
    return cudaErrorInvalidValue;  // refused by check() before any launch
  }
};

Status check(const BwdProblem& bp, const DeviceInfo& device) {
  const FwdProblem& p = bp.fwd;
  const bool has_shape = bwd_sm90::has_shape(p.head_dim);
  HFA_RETURN_IF_ERROR(sm90::check_kernel(kName, p, device,
                                         static_cast<long long>(bwd_sm90::smem_bytes(has_shape ? p.head_dim : 128))));
  if (!has_shape)
    return make_error(StatusCode::kUnsupported, "head_dim: kernel \"%s\" has no shape for head_dim %d",
                      kName, p.head_dim);
  return check_backward_operands(kName, bp);
}

Status launch(const BwdProblem& problem, const DeviceInfo&, cudaStream_t stream) {
  BwdProblem fixed = problem;
  fixed.dq_in_launch_order = problem.deterministic && bwd_sm90::dq_in_launch_order(problem.fwd);
  fixed.dq_fixed_point = bwd_sm90::dq_fixed_point(problem.deterministic, fixed.dq_in_launch_order);
  return with_backward_workspace(fixed, stream, kName, [&](const BwdProblem& bp) {
    return dispatch_dtype_head_dim<BwdSm90>(bp, bp.fwd.dtype, bp.fwd.head_dim, stream);
  });
}

}  // namespace

BackwardKernelEntry bwd_sm90_backward_entry() {
  BackwardKernelEntry e;
  e.name = kName;
  e.description =
      "Hopper backward (Algorithm 2) on WGMMA + TMA, warp-specialized: one CTA per KV block, a "
      "producer warp streaming Q/dO/LSE/D through an mbarrier ring, two consumer warpgroups "
      "with dK/dV in registers; d <= 128: 128-key blocks, S^T/dP^T with the keys as M so that "
      "dV += P^T dO and dK += dS^T Q take P^T and dS^T from registers, dQ = dS K added in fp32 "
      "by TMA reductions (deterministic mode: in 64-bit fixed point, at d = 128 by clusters of "
      "two CTAs on adjacent KV blocks, each adding half of the columns summed with its "
      "partner's on chip); d = 256: 64-key blocks "
      "split between the warpgroups, dK^T/dV^T in registers, P and dS through shared memory, dQ "
      "staged in the consumed Q/dO stage and added by TMA reductions (deterministic mode: in "
      "64-bit fixed point, by clusters of two CTAs on adjacent KV blocks, each adding half of "
      "the columns summed with its partner's on chip); the deterministic mode of short "
      "sequences of many heads: one launch of the default kernel per KV block index (fp32 dQ "
      "summed in launch order)";
  e.supports = "bf16/fp16, head_dim 64, 128 and 256, causal (block skipping), sliding window, "
               "softcap, sinks, variable-length batches, GQA/MQA, deterministic mode; 16-byte "
               "aligned pointers and strides; sm90a (H100/H200)";
  e.variants = {/*window=*/true, /*softcap=*/true, /*sinks=*/true, /*varlen=*/true};
  e.auto_priority = 20;
  // The deterministic mode: bwd_sm90 sums dQ in 64-bit fixed point (no waiting, twice the
  // reduction bytes and three memory-bound passes around the kernel; at d = 128 and 256 in CTA
  // pairs, which halve them) or, for short sequences of many heads, in launch order
  // (bwd_sm90_launch.h); fa2 in turn order. Measured next to each other on the H100
  // (docs/results/2026-11-27-h100-peers-bwd-deterministic-a7cd461.json, the run after d = 128's
  // pairs): bwd_sm90 faster without the mask from 1k keys (+12 to +75%), at d = 128 and 256 also
  // at 512 keys (+9%, +6%) and, in launch order, at d = 64's 512 keys (+7%); under the causal mask
  // from 2k keys (+3 to +68%) and at d = 128 from 1k (+4%); fa2 faster under the mask at 512 and
  // 1k keys otherwise (+4 to +30%). "auto" ranks bwd_sm90 below fa2 (5) where fa2 was faster.
  e.auto_priority_for = [](const BwdProblem& p) {
    if (!p.deterministic) return 20;
    const FwdProblem& f = p.fwd;
    if (bwd_sm90::dq_in_launch_order(f) && !f.causal) return 20;
    const int from = f.causal ? (f.head_dim == 128 ? 1024 : 2048) : f.head_dim >= 128 ? 0 : 1024;
    return f.seqlen_k >= from ? 20 : 5;
  };
  e.check = check;
  e.launch = launch;
  return e;
}

}  // namespace hfa
