// DynamicTileScheduler's group size, chosen on the host by simulating the walk (tile_scheduler.cuh).
#include "kernels/sm90/common/tile_scheduler.cuh"

#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <vector>

namespace hfa::sm90 {
namespace {

// KV tiles a dense Q tile visits (no window; bottom-right causal), as the kernels' AttentionMask.
long long kv_tiles_of(const FwdProblem& p, int q0, int block_m, int block_n) {
  long long kv_end = p.seqlen_k;
  if (p.causal) {
    const long long q_end = q0 + block_m < p.seqlen_q ? q0 + block_m : p.seqlen_q;
    if (q_end + p.causal_offset() < kv_end) kv_end = q_end + p.causal_offset();
  }
  return kv_end > 0 ? (kv_end + block_n - 1) / block_n : 0;
}

// Beyond this many simulated tiles (tiles x candidate sizes) a launch does not simulate: about a
// millisecond of host time, once per shape.
constexpr long long kMaxSimulatedTiles = 1LL << 20;
// A smaller group is taken only if it ends this much more evenly: larger groups read each K/V
// from DRAM by more CTAs at once.
constexpr double kImbalanceSlack = 0.005;

}  // namespace

double dynamic_order_imbalance(const FwdProblem& p, int block_m, int block_n, int grid, int group) {
  const DynamicTileScheduler order(nullptr, p, block_m, group);
  std::priority_queue<long long, std::vector<long long>, std::greater<long long>> free_at;
  for (int c = 0; c < grid; ++c) free_at.push(0);
  long long total = 0, busiest = 0;
  for (int idx = 0; idx < order.tiles(); ++idx) {
    const long long cost = kv_tiles_of(p, order.block_coord(idx).m_block * block_m, block_m, block_n) + 1;
    const long long done = free_at.top() + cost;
    free_at.pop();
    free_at.push(done);
    total += cost;
    if (done > busiest) busiest = done;
  }
  return total > 0 ? static_cast<double>(busiest) * grid / static_cast<double>(total) : 1.0;
}

int dynamic_order_group(const FwdProblem& p, int block_m, int block_n, int grid, int element_bytes,
                        long long l2_bytes) {
  const int cap = l2_heads_per_group(p, element_bytes, l2_bytes);  // whole GQA groups
  const int gqa = p.group_size();
  const long long tiles = PersistentTileScheduler(p, block_m, 1).tiles();
  if (!p.causal || p.local || cap <= gqa || tiles * (cap / gqa) > kMaxSimulatedTiles) return cap;

  using Key = std::array<long long, 10>;
  const Key key{p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, block_m, block_n, grid,
                cap, element_bytes};
  static std::mutex mutex;
  static std::map<Key, int> chosen;  // per shape; bounded below
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = chosen.find(key);
    if (it != chosen.end()) return it->second;
  }
  std::vector<double> imbalance(cap / gqa + 1, 0.0);
  double most_even = 0.0;
  for (int k = 1; k <= cap / gqa; ++k) {
    imbalance[k] = dynamic_order_imbalance(p, block_m, block_n, grid, k * gqa);
    if (k == 1 || imbalance[k] < most_even) most_even = imbalance[k];
  }
  int group = gqa;
  for (int k = cap / gqa; k >= 1; --k) {
    if (imbalance[k] <= most_even + kImbalanceSlack) {
      group = k * gqa;
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (chosen.size() >= 1024) chosen.clear();
  chosen[key] = group;
  return group;
}

}  // namespace hfa::sm90
