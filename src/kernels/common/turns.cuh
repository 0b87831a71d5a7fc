// Turn counters in global memory, for work that must happen in a fixed order across CTAs
// (deterministic sums): the CTA whose turn is n waits until the counter reads n, does its part,
// and passes the turn on. Waits only ever point to CTAs that come earlier in the order, which
// must be launched no later (a lower block index): then some CTA can always go on and no wait
// deadlocks.
#pragma once

namespace hfa {

// Spins (one thread) until *turn >= n; acquire: what the previous holders wrote before passing
// the turn is visible after this returns.
__device__ __forceinline__ void wait_for_turn(const int* turn, int n) {
  int seen;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
    if (seen >= n) return;
    __nanosleep(64);
  }
}

// Passes the turn on (one thread); release: what this thread (and, after a barrier, its CTA)
// wrote before is visible to the next holder.
__device__ __forceinline__ void pass_turn(int* turn) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(turn) : "memory");
}

}  // namespace hfa
