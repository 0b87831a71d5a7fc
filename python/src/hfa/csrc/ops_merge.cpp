// hfa::merge_attention (schema in ops_library.cpp): the exact merge of partial attention results
// (hfa::merge_attention, the kernel flash decode's splits use), which hfa.distributed's ring
// applies to the blocks of keys it gets from the other GPUs.
#include <torch/library.h>

#include <tuple>

#include "torch_views.h"

namespace hfa_torch {
namespace {

using at::Tensor;

// o_parts (num_parts, batch, seqlen, heads, head_dim), lse_parts fp32 (num_parts, batch, heads,
// seqlen) -> out (batch, seqlen, heads, head_dim) in out_dtype (default o_parts's), lse fp32.
std::tuple<Tensor, Tensor> merge_attention(const Tensor& o_parts, const Tensor& lse_parts,
                                           std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK_VALUE(o_parts.is_cuda(), "o_parts: tensor is on ", o_parts.device().str(),
                    "; hfa needs CUDA tensors");
  TORCH_CHECK_VALUE(o_parts.dim() == 5, "o_parts: expected rank 5 (num_parts, batch, seqlen, "
                    "heads, head_dim), got rank ", o_parts.dim());
  const at::Device device = o_parts.device();
  const c10::cuda::CUDAGuard guard(device);
  const auto sizes = o_parts.sizes();
  Tensor out = new_cuda_tensor({sizes[1], sizes[2], sizes[3], sizes[4]},
                               out_dtype.value_or(o_parts.scalar_type()), device);
  Tensor lse = new_cuda_tensor({sizes[1], sizes[3], sizes[2]}, at::kFloat, device);
  hfa::MergeArgs args;
  args.o_parts = to_view(o_parts, "o_parts", device);
  args.lse_parts = to_view(lse_parts, "lse_parts", device);
  args.out = to_view(out, "out", device);
  args.lse = to_view(lse, "lse", device);
  throw_if_error(hfa::merge_attention(args, current_stream(device)));
  return {out, lse};
}

}  // namespace
}  // namespace hfa_torch

TORCH_LIBRARY_IMPL(hfa, CUDA, m) { m.impl("merge_attention", &hfa_torch::merge_attention); }
TORCH_LIBRARY_IMPL(hfa, CPU, m) {  // for the error naming the argument
  m.impl("merge_attention", &hfa_torch::merge_attention);
}
