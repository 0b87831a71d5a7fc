// Two CTAs of a thread-block cluster of two (a "CTA pair") handing register fragments to each
// other through the partner's shared memory (distributed shared memory, sm90).
//
// PairMailbox: one warpgroup's mailbox in each CTA of the pair. Thread t of the warpgroup sends 64
// bytes (four 16-byte pieces) to thread t of the partner's warpgroup with st.async, which counts
// the bytes on the partner's `full` mbarrier; the receiver waits for them there, reads them from
// its own shared memory, and tells the sender that the mailbox is free again by an arrive on the
// sender's `free` mbarrier (one per warp). The n-th message (n = 0, 1, ...) completes phase n of
// the receiver's `full` barrier and waits for phase n of the sender's `free` barrier, so the
// receiver frees the mailbox once per message, in order, before the message is sent -- also
// before the first one. A message's pieces 0 and 1 land in region a, pieces 2 and 3 in region b
// (4 KB each for 128 threads, 16-byte aligned; thread t's piece k at (k % 2 * 128 + t) * 16):
// consecutive threads write consecutive 16 bytes, so neither the st.async nor the reads conflict.
//
// Ordering: the waits and the remote arrive take the mbarrier's default (CTA-scoped) semantics,
// as CUTLASS's cluster pipelines do for barriers that other CTAs' copies complete and arrive on;
// the cluster-scoped acquire / release forms cost the d = 256 backward ~20% more (measured,
// WORKLOG "bwd_sm90", session 39), a fence per message. What the CTA-scoped release does not
// order for the partner, the loads of a message before the partner overwrites it, a data
// dependence does (release()).
// Lifetime: the partner must not signal or write this CTA before its barriers exist, nor after it
// has exited. cluster_sync_all() after init() (every thread of both CTAs) covers the first; the
// second holds where every message sent is received and every release() is waited for by the
// sender (the mailbox is not freed after the last message).
#pragma once

#include <cstdint>

namespace hfa::sm90 {

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Every thread of every CTA of the cluster; the barrier's release / acquire orders what each did
// before it (the barriers' initialization) before what any does after it.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The shared::cluster address of the partner CTA's copy of shared-memory address `addr`.
__device__ __forceinline__ uint32_t partner_address(uint32_t addr, uint32_t partner_rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(partner_rank));
  return remote;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

struct PairMailbox {
  static constexpr uint32_t kMessageBytes = 128 * 64;
  uint32_t a, b;          // this thread's slot for pieces 0 (a) and 2 (b); + 2048 for 1 and 3
  uint32_t full_at, free_at;  // this CTA's barriers
  uint32_t partner_rank;
  uint32_t sent = 0, received = 0;  // messages so far: the phases to wait for
  uint32_t loaded = 0;              // receive()'s vote over the last message's values

  // region_a / region_b: this warpgroup's two 4 KB regions; full_bar / free_bar its barriers
  // (init()); wg_thread: 0 .. 127.
  __device__ PairMailbox(const void* region_a, const void* region_b, uint64_t* full_bar, uint64_t* free_bar,
                         int wg_thread)
      : a(shared_address(region_a) + wg_thread * 16),
        b(shared_address(region_b) + wg_thread * 16),
        full_at(shared_address(full_bar)),
        free_at(shared_address(free_bar)),
        partner_rank(cluster_cta_rank() ^ 1) {}

  // By one thread, before cluster_sync_all(): `full` expects its first message (one arrival, the
  // message's bytes: every later phase is armed by receive(), after the previous one completed,
  // so the expectation always precedes the bytes), `free` one arrival per warp of the receiver.
  __device__ static void init(uint64_t* full_bar, uint64_t* free_bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(full_bar)) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 4;\n" ::"r"(shared_address(free_bar)) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(full_bar)),
                 "r"(kMessageBytes)
                 : "memory");
  }

  // Waits for the phase of `bar` with parity `phase`.
  __device__ static void wait(uint32_t bar, uint32_t phase) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(bar),
        "r"(phase)
        : "memory");
  }

  // The next message, once the partner has freed its mailbox for it.
  __device__ void send(const float4 (&piece)[4]) {
    wait(free_at, sent & 1);
    ++sent;
    const uint32_t remote_full = partner_address(full_at, partner_rank);
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t remote = partner_address((k < 2 ? a : b) + (k % 2) * 2048, partner_rank);
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(remote),
          "r"(__float_as_uint(piece[k].x)), "r"(__float_as_uint(piece[k].y)), "r"(__float_as_uint(piece[k].z)),
          "r"(__float_as_uint(piece[k].w)), "r"(remote_full)
          : "memory");
    }
  }

  // The partner's next message. The warpgroup's thread 0 (`leader`) then arms the next phase.
  __device__ void receive(float4 (&piece)[4], bool leader) {
    wait(full_at, received & 1);
    ++received;
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t addr = (k < 2 ? a : b) + (k % 2) * 2048;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(piece[k].x), "=f"(piece[k].y), "=f"(piece[k].z), "=f"(piece[k].w)
                   : "r"(addr)
                   : "memory");
    }
    // A value that needs every lane's four loaded pieces (a vote over them), for release().
    loaded = __ballot_sync(0xffffffffu, (__float_as_uint(piece[0].x) ^ __float_as_uint(piece[1].x) ^
                                         __float_as_uint(piece[2].x) ^ __float_as_uint(piece[3].x)) != 0u);
    if (leader)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full_at), "r"(kMessageBytes)
                   : "memory");
  }

  // This CTA's mailbox may take the partner's next message: its reads (and whatever else used the
  // regions, e.g. a GEMM that read them, completed) are done. Every thread of the warpgroup, after
  // its own last use; one arrive per warp on the partner's `free`.
  // The partner writes the regions next, so the warp's loads of the last message must have
  // returned their values before the arrive leaves: the arrive's address takes a zero computed
  // from `loaded` (every lane's loaded values, receive()) and from the partner's rank (0 or 1,
  // which the compiler cannot know, so it cannot fold the zero away), so that it issues only once
  // the loads have completed. The mbarrier's default release is CTA-scoped and does not order
  // them for the partner: a load still queued in a busy shared-memory pipe could read the
  // partner's next message, the likely cause of d = 256's deterministic dQ differing between runs
  // in a few rows (WORKLOG "bwd_sm90", session 40; this fix not yet run on the GPU). A
  // cluster-scoped release costs a MEMBAR.GPU per release.
  __device__ void release() const {
    __syncwarp();
    const uint32_t zero = loaded & (partner_rank >> 1);
    if (threadIdx.x % 32 == 0)
      asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(
                       partner_address(free_at, partner_rank) + zero)
                   : "memory");
  }
};

}  // namespace hfa::sm90
