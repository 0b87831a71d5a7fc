// FA2's registry entries: the forward kernel "fa2" and the backward kernel "fa2", with their
// support rules, the (dtype, head_dim) dispatch, and the backward's workspace.
#include <type_traits>

#include "kernels/common/backward_workspace.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/kernel_checks.h"
#include "kernels/fa2/fa2_shapes.h"

namespace hfa {

// Defined (explicitly instantiated) in the generated fa2_hdim<D>.cu (dense), fa2_varlen_hdim<D>.cu
// (variable-length batches), fa2_variants_hdim<D>.cu and fa2_varlen_variants_hdim<D>.cu (with a
// sliding window, softcap or both) files; this file only declares them, so it compiles no kernel.
namespace fa2 {
template <typename T, int D, bool kVarlen, bool kLocal, bool kSoftcap>
cudaError_t launch_forward(const FwdProblem&, cudaStream_t);
template <typename T, int D, bool kVarlen, bool kLocal, bool kSoftcap>
cudaError_t launch_backward(const BwdProblem&, cudaStream_t);
}  // namespace fa2

namespace {

constexpr const char* kName = "fa2";

// Calls launch(varlen, local, softcap), each a std::bool_constant, with p's combination of the
// variants that have kernels of their own (the sinks need none).
template <class Launch>
cudaError_t dispatch_variants(const FwdProblem& p, Launch launch) {
  auto by_score = [&](auto varlen, auto local) {
    return p.softcap > 0.f ? launch(varlen, local, std::true_type{}) : launch(varlen, local, std::false_type{});
  };
  auto by_mask = [&](auto varlen) {
    return p.local ? by_score(varlen, std::true_type{}) : by_score(varlen, std::false_type{});
  };
  return p.varlen() ? by_mask(std::true_type{}) : by_mask(std::false_type{});
}

// Shared memory per block that a head dim needs at least (the small-smem shapes).
template <int D> using FwdSmallestShape = fa2::FwdShape<D, /*kSmallSmem=*/true>;
template <int D> using BwdSmallestShape = fa2::BwdShape<D, /*kSmallSmem=*/true>;
template <template <int> class Shape>
size_t smem_bytes(int head_dim) {
#define HFA_FA2_SMEM(D) if (head_dim == D) return Shape<D>::kSmemBytes;
  HFA_FOR_EACH_HEAD_DIM(HFA_FA2_SMEM)
#undef HFA_FA2_SMEM
  return 0;
}

// Rules the forward and the backward share: arch, head dim, 16-byte operands, grid, smem.
Status check_common(const FwdProblem& p, const DeviceInfo& device, size_t smem) {
  HFA_RETURN_IF_ERROR(check_min_arch(kName, device, 80));
  HFA_RETURN_IF_ERROR(check_head_dim(kName, p, {HFA_HEAD_DIMS_INIT}));
  HFA_RETURN_IF_ERROR(check_16B_aligned(kName, p));
  HFA_RETURN_IF_ERROR(check_grid_dim(kName, "heads_q", p.heads_q));
  HFA_RETURN_IF_ERROR(check_grid_dim(kName, "batch", p.batch));
  return check_smem(kName, device, static_cast<long long>(smem));
}

struct Fa2Forward {
  static constexpr const char* kName = "fa2";
  static Status check(const FwdProblem& p, const DeviceInfo& device) {
    return check_common(p, device, smem_bytes<FwdSmallestShape>(p.head_dim));
  }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) {
    return dispatch_variants(p, [&](auto varlen, auto local, auto softcap) {
      return fa2::launch_forward<T, D, varlen.value, local.value, softcap.value>(p, s);
    });
  }
};

struct Fa2Backward {
  template <typename T, int D>
  static cudaError_t run(const BwdProblem& p, cudaStream_t s) {
    return dispatch_variants(p.fwd, [&](auto varlen, auto local, auto softcap) {
      return fa2::launch_backward<T, D, varlen.value, local.value, softcap.value>(p, s);
    });
  }
};

Status check_backward(const BwdProblem& bp, const DeviceInfo& device) {
  const FwdProblem& p = bp.fwd;
  HFA_RETURN_IF_ERROR(check_common(p, device, smem_bytes<BwdSmallestShape>(p.head_dim)));
  return check_backward_operands(kName, bp);
}

// The workspace (backward_workspace.h) around the three launches.
Status launch_backward(const BwdProblem& problem, const DeviceInfo&, cudaStream_t stream) {
  return with_backward_workspace(problem, stream, kName, [&](const BwdProblem& bp) {
    return dispatch_dtype_head_dim<Fa2Backward>(bp, bp.fwd.dtype, bp.fwd.head_dim, stream);
  });
}

}  // namespace

KernelEntry fa2_entry() {
  KernelEntry e = make_entry<Fa2Forward>(
      "FA2 forward (Algorithm 1) on mma.sync m16n8k16 tensor cores: split-Q over warps, ldmatrix, "
      "cp.async K/V loads overlapping the softmax, deferred 1/l",
      "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (block skipping), GQA/MQA, LSE, "
      "variable-length batches, sliding windows (tiles outside them skipped), softcap, attention "
      "sinks; 16-byte aligned pointers and strides; sm80+",
      /*auto_priority=*/15);
  e.variants = {/*window=*/true, /*softcap=*/true, /*sinks=*/true, /*varlen=*/true};
  return e;
}

BackwardKernelEntry fa2_backward_entry() {
  BackwardKernelEntry e;
  e.name = kName;
  e.description =
      "FA2 backward (Algorithm 2) on mma.sync: one CTA per KV block, P recomputed from LSE, dK/dV "
      "on chip (summed over the GQA group), dQ added in fp32 (TMA tensor reductions on sm90, atomics "
      "before; in KV-block order when deterministic)";
  e.supports = "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (block skipping), GQA/MQA, "
               "variable-length batches, sliding windows, softcap, attention sinks (their gradient), "
               "deterministic mode; 16-byte aligned pointers and strides; sm80+";
  e.variants = {/*window=*/true, /*softcap=*/true, /*sinks=*/true, /*varlen=*/true};
  e.auto_priority = 10;
  e.check = check_backward;
  e.launch = launch_backward;
  return e;
}

}  // namespace hfa
