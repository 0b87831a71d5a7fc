// FA2 forward (FlashAttention-2, Algorithm 1) on mma.sync tensor cores, for sm80 and newer.
//
// One CTA owns BlockM query rows of one (batch, head); each warp owns 16 * kMTiles of those rows
// and streams over all of K and V (split-Q, no split-K), so the online softmax needs only the
// four lanes of a quad: no shared-memory reduction across warps. Per KV tile j:
//   S = Q K_j^T (Q and K_j from shared memory, ldmatrix)    -> registers, fp32
//   mask, running max m, P = exp2(S - m), rescale O          -> registers
//   O += P V_j (P straight from the S registers as the A operand, V_j with ldmatrix.trans)
// The 1/l normalisation is deferred to the end (the paper's tweak 1), which also writes LSE.
// Loads (cp.async), two schedules (FwdShape::kKVStages):
//   2 buffers each for K and V: tile j+1 is issued right after the one barrier of iteration j and
//     lands while tile j computes.
//   1 buffer each (FA2's schedule, half the shared memory): V_j is issued at the start of
//     iteration j and lands during S_j and the softmax; K_{j+1} is issued once every warp is done
//     with K_j and lands during P V_j. Two barriers per tile.
// Score variants (kernels/common/attention_mask.cuh, as in k6): a Mask policy (AttentionMask: none or
// causal; LocalMask: a sliding window) gives the KV tiles a Q tile visits and which need the mask,
// a Score policy (PlainScore; SoftcapScore: tanh) transforms S as it leaves the tensor cores;
// attention sinks join each row's denominator in the epilogue (finish_row).
// Variable-length batches (kVarlen, a kernel of its own so that the dense one keeps its code): the
// grid's third axis is the sequences, each CTA works on its sequence as a dense problem (its
// lengths from sequence_span, varlen.cuh; its rows from the span's first ones), and CTAs past its
// queries return.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/problem.h"
#include "kernels/common/attention_mask.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/quad_reduce.cuh"
#include "kernels/common/varlen.cuh"
#include "kernels/fa2/fa2_shapes.h"
#include "kernels/sm80/common/fragment_mask.cuh"
#include "kernels/sm80/common/online_softmax.cuh"
#include "kernels/sm80/common/smem_tile.cuh"

namespace hfa::fa2 {

using namespace hfa::sm80;


template <typename T, class Shape, bool kVarlen, class Mask, class Score>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kMinBlocksPerSm)
    fa2_forward_kernel(FwdProblem problem) {
  constexpr int D = Shape::kHeadDim;
  constexpr int kMT = Shape::kMTiles, kBlockM = Shape::kBlockM, kBlockN = Shape::kBlockN;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kSTiles = kBlockN / 8, kOTiles = D / 8;  // n8 tiles of S and of O per row tile
  using TileQ = SwizzledTile<kBlockM, D>;
  using TileKV = SwizzledTile<kBlockN, D>;

  constexpr int kStages = Shape::kKVStages;
  extern __shared__ uint4 smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + TileQ::kElems;             // kStages buffers
  T* sV = sK + kStages * TileKV::kElems;  // kStages buffers

  const int q0 = blockIdx.x * kBlockM, h = blockIdx.y, b = blockIdx.z;
  // p: the problem as this CTA sees it, with kVarlen sequence b's lengths (the batch strides are
  // 0); its rows start at q_begin / k_begin of the packed tensors. Only the lengths are copied:
  // a whole view (sequence_view) kept its out and lse pointers live across the loop, which spilled.
  FwdProblem sequence;
  int64_t q_begin = 0, k_begin = 0;
  if constexpr (kVarlen) {
    const SequenceSpan span = sequence_span(problem, b);
    if (q0 >= span.seqlen_q) return;  // the grid is sized by max_seqlen_q
    sequence = problem;
    sequence.seqlen_q = span.seqlen_q;
    sequence.seqlen_k = span.seqlen_k;
    q_begin = span.q_begin;
    k_begin = span.k_begin;
  }
  const FwdProblem& p = kVarlen ? sequence : problem;
  const int hk = h / p.group_size();
  const int warp_m0 = (threadIdx.x / 32) * 16 * kMT;  // this warp's first row in the tile
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + q_begin * p.q_row_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride + k_begin * p.k_row_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride + k_begin * p.v_row_stride;
  // The KV tiles the CTA's rows see (block skipping: tiles wholly outside the causal mask or the
  // window are never loaded), and of those the ones that need no mask.
  const KvRange range = Mask::range(p, q0, kBlockM, kBlockN);

  // Without load_rows_async's whole-tile branch: in the forward it measured no faster, and at
  // d = 128 its second copy of the loop cost a register that spilled.
  constexpr bool kFullTileBranch = false;
  auto load_k = [&](int tile) {
    load_rows_async<TileKV, kThreads, kFullTileBranch>(sK + (tile % kStages) * TileKV::kElems, k,
                                                       p.k_row_stride, tile * kBlockN, p.seqlen_k);
  };
  auto load_v = [&](int tile) {
    load_rows_async<TileKV, kThreads, kFullTileBranch>(sV + (tile % kStages) * TileKV::kElems, v,
                                                       p.v_row_stride, tile * kBlockN, p.seqlen_k);
  };
  load_rows_async<TileQ, kThreads>(sQ, q, p.q_row_stride, q0, p.seqlen_q);
  if (!range.empty()) {
    load_k(range.begin);
    if constexpr (kStages == 2) load_v(range.begin);
  }
  cp_async_commit();

  const float scale_log2 = Score::log2_factor(p);  // softmax in base 2 (exp2 is one MUFU op)
  float o[kMT][kOTiles][4];
  zero(o);
  float row_max[kMT][2], row_sum[kMT][2];  // rows g and g + 8 of each row tile; sums per lane
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) row_max[mt][r] = -INFINITY, row_sum[mt][r] = 0.f;

  for (int j = range.begin; j < range.end; ++j) {
    const int k0 = j * kBlockN;
    const T* sKj = sK + (j % kStages) * TileKV::kElems;
    const T* sVj = sV + (j % kStages) * TileKV::kElems;
    cp_async_wait<0>();  // this thread's copies of K_j (and V_j with two stages, and Q) have landed
    // Everyone's copies are visible, and every warp is done with tile j - 1, whose buffers the
    // next loads overwrite.
    __syncthreads();
    if constexpr (kStages == 2) {
      if (j + 1 < range.end) load_k(j + 1), load_v(j + 1);
    } else {
      load_v(j);
    }
    cp_async_commit();

    float s[kMT][kSTiles][4];
    zero(s);
    warp_gemm<T, kMT, kSTiles, D, Stored::kRowMajor, Stored::kRowMajor, TileQ, TileKV>(
        s, sQ, warp_m0, sKj, 0);

    // The mask from p each time (its fields, and whether the tile needs it, recomputed rather than
    // held in registers across the loop: held, they spilled at d = 128 with a window).
    const Mask mask(p);
    const Score score(p);
    const bool needs_mask = !mask.covers(q0, min(p.seqlen_q, q0 + kBlockM) - 1, k0, k0 + kBlockN);
    const float factor = transform_scale_and_mask(s, scale_log2, mask, score, needs_mask, q0 + warp_m0, k0);

    online_softmax_tile(s, row_max, row_sum, o, factor);

    // P as the A operand of P V, rounded to T now: half the registers of the fp32 scores, which
    // would otherwise stay live across the barrier below (at d=64 they spilled).
    uint32_t pa[kMT][kSTiles / 2][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int kk = 0; kk < kSTiles / 2; ++kk)
        c_pair_to_a<T>(s[mt][2 * kk], s[mt][2 * kk + 1], pa[mt][kk]);

    if constexpr (kStages == 1) {
      cp_async_wait<0>();  // V_j has landed
      __syncthreads();     // everyone's V_j is visible and every warp is done with K_j
      if (j + 1 < range.end) load_k(j + 1);
      cp_async_commit();
    }

    const LaneOffsets<TileKV, FragmentKind::kBPairTrans> v_off(sVj, 0, 0);
#pragma unroll
    for (int kk = 0; kk < kSTiles / 2; ++kk) {  // k16 steps over the tile's keys
#pragma unroll
      for (int np = 0; np < kOTiles / 2; ++np) {
        uint32_t bv[2][2];
        v_off.load_pair(bv, 16 * kk, 2 * np);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816<T>(o[mt][2 * np], pa[mt][kk], bv[0]);
          mma_16816<T>(o[mt][2 * np + 1], pa[mt][kk], bv[1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: O /= l (with an attention sink, / (l + its term)), LSE in natural log; rows that saw
  // no key get O = 0 and LSE = -inf, or the sink's logit (finish_row).
  const int lane = threadIdx.x % 32;
  const float sink_log2 = p.sinks ? p.sinks[h * p.sinks_stride] * kLog2e : -INFINITY;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const RowEnd end = finish_row(quad_sum(row_sum[mt][r]), row_max[mt][r] * exponent_factor(scale_log2), sink_log2);
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) o[mt][nt][2 * r + c] *= end.o_scale;
      const int row = q0 + warp_m0 + 16 * mt + lane / 4 + 8 * r;
      if (p.lse && lane % 4 == 0 && row < p.seqlen_q)
        p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + (q_begin + row) * p.lse_row_stride] = end.lse_log2 * kLn2;
    }
  __syncthreads();  // sQ is free: stage O there for 16-byte stores
  store_c<TileQ>(sQ, o, warp_m0, 0);
  __syncthreads();
  T* out = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + q_begin * p.o_row_stride;
  store_rows<TileQ, kThreads>(out, p.o_row_stride, sQ, q0, p.seqlen_q);
}

// Host side: launch for one (dtype, shape, policies).
// kVarlen must be p.varlen(): the grid is then sized by max_seqlen_q, a sequence per z.
template <typename T, class Shape, bool kVarlen, class Mask, class Score>
cudaError_t launch_forward_shape(const FwdProblem& p, cudaStream_t stream) {
  return launch_with_smem(fa2_forward_kernel<T, Shape, kVarlen, Mask, Score>,
                          dim3(ceil_div(p.seqlen_q, Shape::kBlockM), p.heads_q, p.batch),
                          Shape::kThreads, Shape::kSmemBytes, stream, p);
}

// Whether to launch the small-smem shape: when the current device's shared memory per block is
// below the large shape's (the kernel check admitted the small one, so one of the two fits), or
// when HFA_FA2_SMALL_SMEM=1, which is how the tests run the small shapes on GPUs that would not
// choose them (the H100).
inline cudaError_t use_small_smem_shape(size_t large_shape_bytes, bool* small) {
  static const bool force = [] {
    const char* v = std::getenv("HFA_FA2_SMALL_SMEM");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  int device = 0, smem = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  *small = force || static_cast<size_t>(smem) < large_shape_bytes;
  return err;
}

// One (dtype, head_dim, kVarlen, window, softcap) combination: kVarlen must be p.varlen(), kLocal
// p.local, kSoftcap p.softcap > 0 (fa2.cu's dispatch). Instantiated in fa2_hdim<D>.cu (dense
// problems, no window, no softcap), fa2_varlen_hdim<D>.cu (variable-length batches, likewise),
// fa2_variants_hdim<D>.cu and fa2_varlen_variants_hdim<D>.cu (the window and softcap
// combinations of each). Sinks need no combination of their own: they enter once per row, in the
// epilogue.
template <typename T, int D, bool kVarlen, bool kLocal, bool kSoftcap>
cudaError_t launch_forward(const FwdProblem& p, cudaStream_t stream) {
  using Mask = std::conditional_t<kLocal, LocalMask, AttentionMask>;
  using Score = std::conditional_t<kSoftcap, SoftcapScore, PlainScore>;
  if constexpr (kHasSmallSmemShape<FwdShape, D>) {
    bool small = false;
    if (cudaError_t err = use_small_smem_shape(FwdShape<D>::kSmemBytes, &small); err != cudaSuccess)
      return err;
    if (small) return launch_forward_shape<T, FwdShape<D, true>, kVarlen, Mask, Score>(p, stream);
  }
  return launch_forward_shape<T, FwdShape<D>, kVarlen, Mask, Score>(p, stream);
}

}  // namespace hfa::fa2
