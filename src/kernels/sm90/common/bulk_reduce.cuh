// sm90's bulk copy engine (TMA) as a reduction: cp.reduce.async.bulk.tensor adds a box of shared
// memory into a global tensor element by element (performed at L2; fp32 add, or the 64-bit integer
// add of fixed-point dQ: the element type is the tensor map's), asynchronously, addressed through a
// tensor map (the global shape and strides, the box, the shared-memory swizzle:
// encode_accumulator_tensor_map in tensor_map.h). Elements of the box outside the tensor are
// skipped.
// The issuing thread tracks its operations in bulk groups; before shared memory that a bulk
// operation reads is written again, that thread waits for the group's reads (bulk_wait_read) and
// a barrier tells the writers. Writers of the source make their (generic-proxy) stores visible to
// the bulk engine's (async-proxy) reads with fence_proxy_async_shared() before that barrier.
// Plain PTX, no CuTe: usable from the mma.sync kernels, whose sm90 build takes these paths.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace hfa::sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kHasBulkReduce = true;
#else
inline constexpr bool kHasBulkReduce = false;
#endif

// The (c0, c1, c2) box of the 3-D tensor that `map` describes += the box at `smem` (in the map's
// element type, box shape and swizzle; 128-byte aligned, 1024 for the 128-byte swizzle).
__device__ __forceinline__ void tensor_reduce_add(const CUtensorMap* map, const void* smem, int c0, int c1,
                                                  int c2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned src = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
      ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
#endif
}

// Closes this thread's bulk operations issued so far into one group.
__device__ __forceinline__ void bulk_commit_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` of this thread's bulk groups still read their shared memory.
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Waits until at most `Pending` of this thread's bulk groups are incomplete (writes performed).
template <int Pending>
__device__ __forceinline__ void bulk_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Orders this thread's earlier shared-memory stores before later async-proxy (bulk) reads.
// Orders this thread's generic-proxy accesses of global memory with its async-proxy ones (bulk
// reductions) on either side of the fence.
__device__ __forceinline__ void fence_proxy_async_global() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

}  // namespace hfa::sm90
