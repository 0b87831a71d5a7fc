// Inter-warpgroup ping-pong (K6): two consumer warpgroups take turns issuing their GEMMs, so that
// while one warpgroup's GEMMs run on the tensor cores the other runs its softmax (exp2 on the
// SFU, max/sum on the FP32 pipe) instead of both competing for the tensor cores at the same time
// and then both leaving them idle during softmax.
//
// Two named barriers (hardware ids after CUTLASS's reserved ones), one per warpgroup, each for
// 256 threads: a warpgroup waits on its own barrier (128 threads sync) before issuing and, once
// its GEMMs are issued, arrives on the other's (128 threads arrive): 128 + 128 completes it.
// Warpgroup 1 arrives once at the start to hand warpgroup 0 the first turn; turns then strictly
// alternate, so one warpgroup can never arrive twice on a barrier the other has not waited on.
// Both warpgroups take the same number of turns; the start's extra arrive is consumed by
// finish() so no barrier is left half-complete when the CTA exits.
#pragma once

#include <cutlass/arch/barrier.h>

#include "kernels/sm90/common/wgmma.cuh"

namespace hfa::sm90 {

template <bool kEnabled>
struct WarpgroupTurns {
  static constexpr int kThreads = 256;       // both consumer warpgroups
  static constexpr int kFirstBarrierId = 0;  // user ids 0 and 1 (CUTLASS adds its reserved count)
  int warpgroup;                             // 0 or 1 among the consumers

  __device__ explicit WarpgroupTurns(int consumer_warpgroup) : warpgroup(consumer_warpgroup) {}

  __device__ void start() const {
    if (kEnabled && warpgroup == 1) cutlass::arch::NamedBarrier::arrive(kThreads, kFirstBarrierId);
  }
  __device__ void begin() const {
    if (kEnabled) cutlass::arch::NamedBarrier::sync(kThreads, kFirstBarrierId + warpgroup);
  }
  __device__ void end() const {
    if (kEnabled) cutlass::arch::NamedBarrier::arrive(kThreads, kFirstBarrierId + 1 - warpgroup);
  }
  __device__ void finish() const {
    if (kEnabled && warpgroup == 0) cutlass::arch::NamedBarrier::sync(kThreads, kFirstBarrierId);
  }

  // S = Q K^T of KV stage `st` with no P V beside it (the first tile of k6 and k7, every tile of
  // k7's serial loop): wait for K, issue in this warpgroup's turn, wait for S to land.
  template <class Pipeline, class PipelineStorage, class State, class IssueQk, class FragmentS>
  __device__ __forceinline__ void s_alone(PipelineStorage& pipeline, const State& st, IssueQk& issue_qk,
                                          FragmentS& tSrS) const {
    Pipeline::consumer_wait(pipeline, st);
    begin();
    issue_qk(st);
    end();
    cute::warpgroup_wait<0>();
    fence_after_wait(tSrS);
  }
};

}  // namespace hfa::sm90
