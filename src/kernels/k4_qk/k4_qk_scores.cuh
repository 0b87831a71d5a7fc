// K4.1 (k4_qk): the K3 skeleton with S = Q K^T on the tensor cores (WGMMA, operands straight from
// the swizzled TMA tiles) while the softmax and P V stay on CUDA cores. The accumulator fragment
// is "laundered" through shared memory: each thread writes its S values to sS at the (row, col)
// an identity tensor reports for them, then every row group reads its row back as K3 does.
#pragma once

#include <cute/tensor.hpp>

#include "kernels/k3/k3_kernel.cuh"
#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::k4_qk {

using namespace hfa::fa2;

template <typename T, int D>
struct WgmmaScores {
  using E = typename sm90::CutlassElement<T>::type;
  using Layout = sm90::TileLayout<E, kBlockM, D>;
  // Two warpgroups split the 64 keys of the tile: each computes a 64 x 32 slab of S.
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<E, E, float, cute::Shape<cute::_64, cute::_32, cute::Int<D>>>(),
      sm90::WarpgroupsAlongN<2>{}));
  static_assert(cute::size(TiledMma{}) == kThreads);
  static constexpr int kMinBlocksPerSm = 1;  // the S fragment and WGMMA need the registers

  __device__ static void scores(const T* sQ, const T* sK, float* sS, int row, int part,
                                float (&s)[kScoresPerThread]) {
    using namespace cute;
    TiledMma mma;
    auto thr = mma.get_thread_slice(threadIdx.x);
    Tensor tSrQ = thr.partition_fragment_A(make_tensor(make_smem_ptr(reinterpret_cast<const E*>(sQ)), Layout{}));
    Tensor tSrK = thr.partition_fragment_B(make_tensor(make_smem_ptr(reinterpret_cast<const E*>(sK)), Layout{}));
    Tensor acc = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    sm90::warpgroup_gemm</*kZeroInit=*/true>(mma, tSrQ, tSrK, acc);

    Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    __syncthreads();  // every row group is done reading the previous tile's P from sS
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) sS[get<0>(coord(i)) * kSRow + get<1>(coord(i))] = acc(i);
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < kScoresPerThread; ++jj) s[jj] = sS[row * kSRow + jj * kThreadsPerRow + part];
  }
};

}  // namespace hfa::k4_qk
