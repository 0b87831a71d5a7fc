// sm90's bulk copy engine as a reduction: cp.reduce.async.bulk adds a contiguous range of shared
// memory into global memory element by element (fp32 add, performed at L2), asynchronously. The
// issuing thread tracks its operations in bulk groups; before shared memory that a bulk operation
// reads is written again, that thread waits for the group's reads (bulk_wait_read) and a barrier
// tells the writers. Writers of the source make their (generic-proxy) stores visible to the bulk
// engine's (async-proxy) reads with fence_proxy_async_shared() before that barrier.
// Plain PTX, no CuTe: usable from the mma.sync kernels, whose sm90 build takes these paths.
#pragma once

#include <cstdint>

namespace hfa::sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kHasBulkReduce = true;
#else
inline constexpr bool kHasBulkReduce = false;
#endif

// gmem[0 .. bytes/4) += smem[0 .. bytes/4); both 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, const float* smem, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned src = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(gmem), "r"(src), "r"(bytes) : "memory");
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
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

}  // namespace hfa::sm90
