// K6's persistent tile scheduler: every (Q tile, head, batch) exactly once, in L2 groups of
// (head, batch) pairs, each group's Q tiles from the last (longest under causal masking) to the first.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "kernels/sm90/common/tile_scheduler.cuh"

namespace {

using hfa::FwdProblem;
using hfa::sm90::BlockCoord;
using hfa::sm90::PersistentTileScheduler;

FwdProblem problem(int batch, int heads, int seqlen) {
  FwdProblem p;
  p.batch = batch;
  p.heads_q = p.heads_kv = heads;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.head_dim = 128;
  return p;
}

void expect_valid_order(const FwdProblem& p, int group) {
  const PersistentTileScheduler s(p, 128, group);
  const int m_blocks = (p.seqlen_q + 127) / 128;
  ASSERT_EQ(s.tiles(), m_blocks * p.heads_q * p.batch);
  std::set<std::tuple<int, int, int>> seen;
  int prev_group = -1, prev_m = 0;
  for (int idx = 0; idx < s.tiles(); ++idx) {
    const BlockCoord c = s.block_coord(idx);
    ASSERT_TRUE(c.m_block >= 0 && c.m_block < m_blocks && c.head >= 0 && c.head < p.heads_q &&
                c.batch >= 0 && c.batch < p.batch)
        << "idx " << idx;
    EXPECT_TRUE(seen.insert({c.m_block, c.head, c.batch}).second) << "idx " << idx << " twice";
    const int g = (c.batch * p.heads_q + c.head) / group;
    EXPECT_GE(g, prev_group) << "groups must not interleave, idx " << idx;
    if (g == prev_group) EXPECT_LE(c.m_block, prev_m) << "not longest-first, idx " << idx;
    prev_group = g;
    prev_m = c.m_block;
  }
  EXPECT_EQ(static_cast<int>(seen.size()), s.tiles());
}

TEST(PersistentTileScheduler, EveryTileOnceLongestFirstPerGroup) {
  expect_valid_order(problem(1, 16, 16384), 2);
  expect_valid_order(problem(3, 5, 1000), 4);   // last group smaller (15 pairs, groups of 4)
  expect_valid_order(problem(2, 3, 100), 1);    // one Q tile per pair
  expect_valid_order(problem(4, 8, 513), 32);   // one group holds everything
}

TEST(PersistentTileScheduler, L2GroupAndGrid) {
  FwdProblem p = problem(1, 16, 16384);  // K+V per head: 2 x 16384 x 128 x 2 B = 8 MB
  EXPECT_EQ(PersistentTileScheduler::l2_group(p, 2, 24LL << 20), 3);
  EXPECT_EQ(PersistentTileScheduler::l2_group(p, 2, 1), 1);  // never 0
  p.heads_kv = 2;                                             // GQA 8:1 shares each K/V 8 ways
  EXPECT_EQ(PersistentTileScheduler::l2_group(p, 2, 24LL << 20), 16);  // capped at all pairs
  EXPECT_EQ(PersistentTileScheduler::grid_shape(p, 128, 2, 132).x, 132u);
  EXPECT_EQ(PersistentTileScheduler::grid_shape(problem(1, 2, 200), 128, 2, 132).x, 4u);
}

}  // namespace
