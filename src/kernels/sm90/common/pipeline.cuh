// The mbarrier producer/consumer ring between TMA loads and compute (the worklog's K3 protocol).
//
// Stage s has a "full" barrier (the producer arms it with the bytes it will load: K tile + V tile;
// the TMA completes the transaction) and an "empty" barrier (every consumer thread arrives when
// it is done reading the stage; the producer waits on it before reloading the stage).
// Phases flip each time the ring wraps; the producer starts on the opposite parity, so its first
// pass through the ring finds every stage empty without waiting.
#pragma once

#include <cutlass/arch/barrier.h>

namespace hfa::sm90 {

// What a stage carries besides the TMA's bytes, by default: nothing.
struct NoStageFill {
  __device__ void operator()() const {}
};

template <int Stages>
struct TmaPipeline {
  struct SharedStorage {
    uint64_t full[Stages];
    uint64_t empty[Stages];
  };

  // Position in the ring: which stage, and the parity of the phase to wait for.
  struct State {
    int index = 0;
    uint32_t phase = 0;
    __device__ void advance() {
      if (++index == Stages) {
        index = 0;
        phase ^= 1;
      }
    }
  };

  // One thread initializes; the caller then synchronizes the CTA before anyone uses the barriers.
  // producer_arrivals > 1: a ring filled by threads' stores instead of the TMA (producer_commit).
  __device__ static void init(SharedStorage& s, int consumer_arrivals, int producer_arrivals = 1) {
    for (int i = 0; i < Stages; ++i) {
      cutlass::arch::ClusterTransactionBarrier::init(&s.full[i], producer_arrivals);
      cutlass::arch::ClusterBarrier::init(&s.empty[i], consumer_arrivals);
    }
    cutlass::arch::fence_barrier_init();
  }

  __device__ static State producer_start() { return State{0, 1}; }
  __device__ static State consumer_start() { return State{0, 0}; }

  // Producer: wait until the stage is empty, then announce the bytes the TMA will bring.
  // fill_stage() runs in between: plain shared-memory writes that belong to the stage (K6: the
  // tile's coordinates next to its Q). The arrive releases them and the consumers' wait on the
  // full barrier acquires them, like the TMA's bytes.
  template <class Fill = NoStageFill>
  __device__ static void producer_acquire(SharedStorage& s, const State& st, uint32_t tx_bytes,
                                          const Fill& fill_stage = Fill{}) {
    cutlass::arch::ClusterBarrier::wait(&s.empty[st.index], st.phase);
    fill_stage();
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s.full[st.index], tx_bytes);
  }
  // A ring filled by threads (k7's transposed V): each producer thread waits until the stage is
  // empty, stores, and commits. Stores that an async-proxy reader (WGMMA) will see need
  // fence_view_async_shared() before the commit.
  __device__ static void producer_wait_empty(SharedStorage& s, const State& st) {
    cutlass::arch::ClusterBarrier::wait(&s.empty[st.index], st.phase);
  }
  __device__ static void producer_commit(SharedStorage& s, const State& st) {
    cutlass::arch::ClusterBarrier::arrive(&s.full[st.index]);
  }
  __device__ static uint64_t& full_barrier(SharedStorage& s, const State& st) {
    return s.full[st.index];
  }

  // Consumer: wait until the stage's loads landed; release it when done reading.
  __device__ static void consumer_wait(SharedStorage& s, const State& st) {
    cutlass::arch::ClusterTransactionBarrier::wait(&s.full[st.index], st.phase);
  }
  __device__ static void consumer_release(SharedStorage& s, const State& st) {
    cutlass::arch::ClusterBarrier::arrive(&s.empty[st.index]);
  }
  // One thread releasing the stage on behalf of `count` consumer threads (K6: a warpgroup's
  // thread 0 once the O store staged in the stage has read it).
  __device__ static void consumer_release(SharedStorage& s, const State& st, uint32_t count) {
    const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&s.empty[st.index]));
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  }
};

// A single-use barrier for a tile loaded once (Q).
struct OnceBarrier {
  __device__ static void init(uint64_t& bar) {
    cutlass::arch::ClusterTransactionBarrier::init(&bar, 1);
  }
  __device__ static void arm(uint64_t& bar, uint32_t tx_bytes) {
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&bar, tx_bytes);
  }
  __device__ static void wait(uint64_t& bar) { cutlass::arch::ClusterTransactionBarrier::wait(&bar, 0); }
};

}  // namespace hfa::sm90
