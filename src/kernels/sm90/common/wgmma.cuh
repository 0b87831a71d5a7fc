// Warpgroup GEMMs on the tensor cores (WGMMA), and views of their accumulator fragments.
#pragma once

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

namespace hfa::sm90 {

// Where a TiledMMA puts its N warpgroups: along M (each its own 64-row slab of the output) or
// along N (each its own columns).
template <int N>
using WarpgroupsAlongM = cute::Layout<cute::Shape<cute::Int<N>, cute::_1, cute::_1>>;
template <int N>
using WarpgroupsAlongN = cute::Layout<cute::Shape<cute::_1, cute::Int<N>, cute::_1>>;

// Issues C (+)= A B as one warpgroup-wide WGMMA batch and commits it, without waiting: the
// caller waits with warpgroup_wait<N>() (N = batches allowed to stay in flight) and then
// fence_after_wait(c) (and a, for the RS form) before touching the registers. A and B are GMMA
// descriptors of shared memory, or A is a register fragment (the RS form, kRegisterA).
template <bool kZeroInit, bool kRegisterA = false, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void warpgroup_gemm_issue(TiledMma& mma, TA& a, TB const& b, TC& c) {
  using namespace cute;
  if constexpr (kRegisterA) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

// After warpgroup_wait: keeps the compiler from moving reads or writes of a fragment the
// finished batch used above the wait.
template <class... Fragments>
__device__ __forceinline__ void fence_after_wait(Fragments&... fragments) {
  (cute::warpgroup_fence_operand(fragments), ...);
}

// cute::warpgroup_wait<N>, but not before `after` has been computed. ptxas schedules a bare
// WARPGROUP.DEPBAR as early as nothing orders it: at the top of its basic block, ahead of
// arithmetic that comes before it in the source but does not touch the WGMMAs' registers. In
// K7's loop that put the wait for the previous tile's P V ahead of the whole softmax that was
// meant to run while P V does (SASS of 00f5fb0; ncu: 8% of the consumers' time on that wait).
// A predicated wait would carry the dependence, but ptxas then serializes every WGMMA (C7518).
// So each thread stores a byte derived from `after` to its own `slot` in shared memory (nothing
// reads it) just before the wait: ptxas keeps the wait after the store, and the store after the
// values it stores. Where the wait then lands is still ptxas's choice (K7, on the row max's
// alpha: late in the exponentials); on values computed last it can cost more than it saves
// (K7 tied to the row sums: 2.6% slower than the bare wait over its sweep; WORKLOG, K7 fifth pass).
template <int N, int K>
__device__ __forceinline__ void warpgroup_wait_after(const float (&after)[K], uint8_t* slot) {
  uint32_t bits = 0;
  CUTE_UNROLL
  for (int k = 0; k < K; ++k) bits ^= __float_as_uint(after[k]);
  asm volatile("st.shared.u8 [%0], %1;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(slot))),
               "r"(bits)
               : "memory");
  cute::warpgroup_wait<N>();
}

// C (+)= A B, issued and waited for before returning.
template <bool kZeroInit, bool kRegisterA = false, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void warpgroup_gemm(TiledMma& mma, TA& a, TB const& b, TC& c) {
  warpgroup_gemm_issue<kZeroInit, kRegisterA>(mma, a, b, c);
  cute::warpgroup_wait<0>();
  fence_after_wait(c);
  if constexpr (kRegisterA) fence_after_wait(a);
}

// A WGMMA accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) viewed as (rows, cols) of this
// thread: rows ((2), MMA_M) -- a thread holds rows r and r + 8 of each 16-row slab of its warp --
// and cols ((2, N/8), MMA_N). The 4 threads of a quad (lane / 4 equal) share each row.
template <class AccLayout>
__device__ __forceinline__ auto acc_rowcol(AccLayout l) {
  using namespace cute;
  static_assert(rank(get<0>(AccLayout{})) == 3, "expects a ((2,2,N/8),MMA_M,MMA_N) accumulator");
  auto v = get<0>(l);
  return make_layout(make_layout(get<1>(v), get<1>(l)),
                     make_layout(get<0>(v), get<2>(v), get<2>(l)));
}
template <class AccTensor>
__device__ __forceinline__ auto as_rowcol(AccTensor&& t) {
  return cute::make_tensor(t.data(), acc_rowcol(t.layout()));
}

// The accumulator of S = Q K^T (fp32, ((2,2,N/8),1,1)) converted to the element type, laid out as
// the register A operand of the next GEMM (P V): ((2,2,2),1,N/16). Both layouts walk a thread's
// registers in the same order (column pair, row, 8-column half), so element i maps to element i:
// this is the register handoff of P, with no shared memory in between. make_a_operand_for makes
// the (uninitialized) operand, convert_to_a_operand fills one, acc_to_a_operand does both.
// For a 1-byte Element (e4m3, K7) the operand is that of a k = 32 GMMA: ((4,2,2),1,N/32) in PTX
// register order (4 keys, row r / r + 8, 16-key half); its layout does not match the
// accumulator's, and fp8_pv.cuh's convert_to_fp8_a_operand fills it.
template <typename Element, class AccTensor>
__device__ __forceinline__ auto make_a_operand_for(const AccTensor&) {
  using namespace cute;
  constexpr int kN8 = size<0, 2>(typename AccTensor::layout_type{});
  constexpr int kN8PerBlock = sizeof(Element) == 1 ? 4 : 2;  // 8-column groups per k-step
  static_assert(size<1>(typename AccTensor::layout_type{}) == 1 &&
                    size<2>(typename AccTensor::layout_type{}) == 1 && kN8 % kN8PerBlock == 0,
                "one 64-row WGMMA accumulator per thread, whole k-steps, expected");
  if constexpr (sizeof(Element) == 1) {
    using ALayout = Layout<Shape<Shape<_4, _2, _2>, _1, Int<kN8 / 4>>, Stride<Stride<_1, _4, _8>, _0, _16>>;
    return cute::make_tensor<Element>(ALayout{});
  } else {
    using ALayout = Layout<Shape<Shape<_2, _2, _2>, _1, Int<kN8 / 2>>, Stride<Stride<_1, _2, _4>, _0, _8>>;
    return cute::make_tensor<Element>(ALayout{});
  }
}
template <class AccTensor, class ATensor>
__device__ __forceinline__ void convert_to_a_operand(const AccTensor& acc, ATensor& a) {
  using Element = typename ATensor::value_type;
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc); ++i) a(i) = static_cast<Element>(acc(i));
}
template <typename Element, class AccTensor>
__device__ __forceinline__ auto acc_to_a_operand(const AccTensor& acc) {
  auto a = make_a_operand_for<Element>(acc);
  convert_to_a_operand(acc, a);
  return a;
}

}  // namespace hfa::sm90
