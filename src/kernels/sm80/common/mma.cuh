// Ampere-style tensor-core building blocks (sm80 and newer): cp.async loads, ldmatrix, and the
// warp-level mma.sync m16n8k16 with fp32 accumulators. Used by the FA2 kernels (src/kernels/fa2/).
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), with g = lane / 4 and q = lane % 4:
//   A (16 x 16, row-major):  a[0] = A[g][2q..2q+1]    a[1] = A[g+8][2q..2q+1]
//                            a[2] = A[g][8+2q..]      a[3] = A[g+8][8+2q..]
//   B (16 x 8, "col"):       b[0] = B[2q..2q+1][g]    b[1] = B[8+2q..8+2q+1][g]
//   C (16 x 8, fp32):        c[0..1] = C[g][2q..2q+1] c[2..3] = C[g+8][2q..2q+1]
// Two 2-byte elements share one 32-bit register, the lower column in the low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hfa::sm80 {

// ---- cp.async: global -> shared without registers, 16 bytes at a time ---------------------------

// Copies 16 bytes, or writes 16 zero bytes when !valid (src is then not read, but must be a
// mapped address all the same, so callers pass the tensor's base).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}
// The same for a chunk known to be in range (no zero fill, no predicate).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
// An L2 policy that makes the lines it loads the first to be evicted: for data read once (a
// decode step's KV cache), so that streaming it does not push out what the L2 holds for the
// kernels around it (and does not force the write-back of dirty lines that would stay cached).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// cp_async_16 (with zero fill) under an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid, uint64_t l2_policy) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
               "l"(gmem), "r"(src_bytes), "l"(l2_policy));
}
// The same with the destination as a shared-window address (what __cvta_generic_to_shared gives).
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, bool valid, uint64_t l2_policy) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr),
               "l"(gmem), "r"(src_bytes), "l"(l2_policy));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// ---- ldmatrix: four 8x8 matrices of 2-byte elements from shared memory -------------------------

// Lane l supplies the shared-memory address (state space: shared, as __cvta_generic_to_shared
// gives it) of row (l % 8) of matrix (l / 8); register i receives matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
// The same, each matrix transposed on the way (for operands stored the other way round).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mma.sync m16n8k16, fp32 accumulate ---------------------------------------------------------

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats -> one register of two 2-byte elements (lo in the low half), rounded to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Calls f(mt, nt, i) for every element of a warp's fp32 fragments acc[MT][NT][4], unrolled (so
// each call indexes registers with constants). Element i of tile (mt, nt) is at row
// 16 mt + g + 8 (i / 2), column 8 nt + 2 q + i % 2 of the warp's block (layout above).
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_fragment_element(F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) f(mt, nt, i);
}

// The A operand of a k16 step from two neighbouring fp32 C fragments (n-tiles 2k and 2k+1 of one
// 16-row tile): how P = softmax(S) feeds P V without a trip through shared memory.
template <typename T>
__device__ __forceinline__ void c_pair_to_a(const float (&c0)[4], const float (&c1)[4],
                                            uint32_t (&a)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

}  // namespace hfa::sm80
