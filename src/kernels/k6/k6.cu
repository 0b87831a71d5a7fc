// K6's registry entries: k6, and the two ablation variants (each with one overlap switched off).
#include "kernels/common/dispatch.h"
#include "kernels/k6/k6_launch.h"
#include "kernels/sm90/common/sm90_checks.h"

namespace hfa {
namespace {

template <k6::Variant V>
struct K6Family {
  static constexpr const char* kName = V == k6::Variant::kFull ? "k6"
                                       : V == k6::Variant::kNoPingPong ? "k6_no_pingpong"
                                                                       : "k6_no_overlap";
  static size_t smem_bytes(int head_dim) { return k6::smem_bytes(head_dim); }
  static Status check(const FwdProblem& p, const DeviceInfo& d) { return sm90::check_family<K6Family>(p, d); }
  template <typename T, int D>
  static cudaError_t run(const FwdProblem& p, cudaStream_t s) { return k6::launch_forward<T, D, V>(p, s); }
};

#define HFA_K6_SUPPORTS \
  "bf16/fp16, head_dim " HFA_HEAD_DIMS_STRING ", causal (mask only on diagonal tiles), " HFA_SM90_SUPPORTS

}  // namespace

KernelEntry k6_entry() {
  KernelEntry e = make_entry<K6Family<k6::Variant::kFull>>(
      "K6: K5 plus ping-pong of the two consumer warpgroups (named barriers), intra-warpgroup "
      "overlap (softmax of tile j while P V of tile j-1 runs), persistent longest-first scheduler",
      HFA_K6_SUPPORTS ", sliding window, softcap, sinks, variable-length batches", /*auto_priority=*/40);
  e.variants = {/*window=*/true, /*softcap=*/true, /*sinks=*/true, /*varlen=*/true};  // the ablations: none
  return e;
}

KernelEntry k6_no_pingpong_entry() {
  return make_entry<K6Family<k6::Variant::kNoPingPong>>(
      "K6 ablation: without the inter-warpgroup ping-pong", HFA_K6_SUPPORTS, /*auto_priority=*/0);
}

KernelEntry k6_no_overlap_entry() {
  return make_entry<K6Family<k6::Variant::kNoIntraWarpgroupOverlap>>(
      "K6 ablation: without the intra-warpgroup GEMM/softmax overlap", HFA_K6_SUPPORTS,
      /*auto_priority=*/0);
}

}  // namespace hfa
