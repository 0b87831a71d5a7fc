// DynamicTileScheduler's group size, chosen on the host by simulating the walk (tile_scheduler.cuh).
#include "kernels/sm90/common/tile_scheduler.cuh"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <vector>

namespace hfa::sm90 {
namespace {

// KV tiles Q tile q0 visits, as the kernels' masks count them (mask.cuh: AttentionMask::range,
// LocalMask::range): keys [0, seqlen_k) clipped by the causal mask, or a sliding window's interval.
long long kv_tiles_of(const FwdProblem& p, long long q0, int block_m, int block_n) {
  const long long q_end = q0 + block_m < p.seqlen_q ? q0 + block_m : p.seqlen_q;  // past the tile's last row
  long long lo = 0, hi = p.seqlen_k;
  if (p.local) {
    lo = std::max(0LL, q0 + p.causal_offset() - p.window_left);
    hi = std::min(hi, q_end - 1 + p.causal_offset() + p.window_right + 1);
  } else if (p.causal) {
    hi = std::min(hi, q_end + p.causal_offset());
  }
  return hi > lo ? (hi + block_n - 1) / block_n - lo / block_n : 0;
}

// Heads per group L2 allows (whole GQA groups): l2_heads_per_group's under the causal mask; with
// a window, as many KV heads as keep one Q tile's window of keys within l2_bytes (the CTAs of a
// group work on neighbouring Q tiles, whose windows mostly overlap).
int l2_cap(const FwdProblem& p, int block_m, int element_bytes, long long l2_bytes) {
  if (!p.local) return l2_heads_per_group(p, element_bytes, l2_bytes);
  const long long span = std::min<long long>(
      p.seqlen_k, static_cast<long long>(p.window_left) + p.window_right + block_m);
  const long long kv_head_bytes = 2 * span * p.head_dim * element_bytes;
  const long long kv_heads =
      std::clamp<long long>(kv_head_bytes > 0 ? l2_bytes / kv_head_bytes : p.heads_kv, 1, p.heads_kv);
  return static_cast<int>(kv_heads) * p.group_size();
}

// Beyond this many simulated tiles (tiles x candidate sizes) a launch does not simulate. Measured
// (one core of a 2-core build machine): ~35 ns a simulated tile, so at most ~5 ms of host time,
// once per shape (d = 128, 1 x 16 heads, s = 16k: 0.2 ms; d = 64, 8 x 32 heads, s = 2k, window
// (1024, 1024): 90k tiles). Walks longer than this have many tiles per CTA and end evenly anyway.
constexpr long long kMaxSimulatedTiles = 1LL << 17;
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
    const long long cost =
        kv_tiles_of(p, static_cast<long long>(order.block_coord(idx).m_block) * block_m, block_m, block_n) + 1;
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
  if (!p.causal && !p.local) return 1;  // equal tiles: each head's together (l2_heads_per_group)
  const int cap = l2_cap(p, block_m, element_bytes, l2_bytes);
  const int gqa = p.group_size();
  const long long tiles = PersistentTileScheduler(p, block_m, 1).tiles();
  if (cap <= gqa || tiles * (cap / gqa) > kMaxSimulatedTiles) return cap;

  using Key = std::array<long long, 13>;
  const Key key{p.batch,   p.heads_q, p.heads_kv,      p.seqlen_q,        p.seqlen_k,
                p.local,   p.window_left, p.window_right, block_m, block_n, grid, cap, element_bytes};
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
