// The (part dtype, out dtype, head dim) dispatch of the merge kernel.
#include "kernels/merge/merge.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/merge/merge_kernel.cuh"

namespace hfa::merge {
namespace {

template <typename TPart, typename TOut>
cudaError_t launch_typed(const MergeProblem& p, cudaStream_t stream, bool as_dependent) {
  const bool warp_rows = p.num_parts <= kWarpRowMaxParts;
  auto* kernel = warp_rows ? (p.head_dim == 64    ? merge_rows_kernel<TPart, TOut, 64>
                              : p.head_dim == 128 ? merge_rows_kernel<TPart, TOut, 128>
                                                  : merge_rows_kernel<TPart, TOut, 256>)
                           : (p.head_dim == 64    ? merge_kernel<TPart, TOut, 64>
                              : p.head_dim == 128 ? merge_kernel<TPart, TOut, 128>
                                                  : merge_kernel<TPart, TOut, 256>);
  constexpr int64_t kRowsPerWarpCta = kMergeThreads / 32;
  cudaLaunchConfig_t config = {};
  // a warp per output row, or a CTA per output row
  config.gridDim = dim3(static_cast<unsigned>(warp_rows ? (p.rows() + kRowsPerWarpCta - 1) / kRowsPerWarpCta : p.rows()));
  config.blockDim = dim3(kMergeThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = as_dependent ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, p);
}

template <typename TPart>
cudaError_t launch_part(const MergeProblem& p, cudaStream_t stream, bool as_dependent) {
  switch (p.out_dtype) {
    case DType::kFP32: return launch_typed<TPart, float>(p, stream, as_dependent);
    case DType::kBF16: return launch_typed<TPart, __nv_bfloat16>(p, stream, as_dependent);
    case DType::kFP16: return launch_typed<TPart, __half>(p, stream, as_dependent);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch(const MergeProblem& p, cudaStream_t stream, bool as_dependent) {
  if (p.rows() == 0) return cudaSuccess;
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return cudaErrorInvalidValue;
  switch (p.part_dtype) {
    case DType::kFP32: return launch_part<float>(p, stream, as_dependent);
    case DType::kBF16: return launch_part<__nv_bfloat16>(p, stream, as_dependent);
    case DType::kFP16: return launch_part<__half>(p, stream, as_dependent);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace hfa::merge
