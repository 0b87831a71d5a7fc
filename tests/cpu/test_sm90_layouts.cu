// The explicit 128-byte-swizzle addressing that K3's CUDA-core compute uses must agree with CuTe's
// swizzled shared-memory tensors (which is what the TMA writes and GMMA reads).
#include <gtest/gtest.h>

#include <cute/tensor.hpp>

#include "kernels/sm90/common/staged_output.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace {

template <int Rows, int D>
void expect_same_addresses() {
  using E = cutlass::bfloat16_t;
  using Layout = hfa::sm90::TileLayout<E, Rows, D>;
  alignas(1024) static E smem[Rows * D];
  auto t = cute::make_tensor(cute::make_smem_ptr(smem), Layout{});
  for (int row = 0; row < Rows; ++row)
    for (int c8 = 0; c8 < D / 8; ++c8)
      for (int e = 0; e < 8; ++e) {
        const E* cute_addr = cute::raw_pointer_cast(&t(row, c8 * 8 + e));
        const E* ours = hfa::sm90::Sw128Rows<Rows>::chunk(smem, row, c8) + e;
        ASSERT_EQ(cute_addr, ours) << "row " << row << " col " << c8 * 8 + e;
      }
}

TEST(Sm90Layouts, Sw128RowsMatchesCute) {
  expect_same_addresses<64, 64>();
  expect_same_addresses<64, 128>();
  expect_same_addresses<64, 256>();
  expect_same_addresses<128, 128>();
}

// K6's O staging computes chunk addresses as a row base XOR a constant (staged_output.cuh); each
// lane of stmatrix addresses chunk j or j + 1 (odd) of its row through the same formula.
template <int D>
void expect_staged_offsets_match() {
  constexpr int Rows = hfa::sm90::kStagedRows;
  using E = cutlass::bfloat16_t;
  alignas(1024) static E smem[Rows * D];
  for (int row = 0; row < Rows; ++row)
    for (int c8 = 0; c8 < D / 8; ++c8) {
      const auto ref = static_cast<uint32_t>(
          reinterpret_cast<const char*>(hfa::sm90::Sw128Rows<Rows>::chunk(smem, row, c8)) -
          reinterpret_cast<const char*>(smem));
      const uint32_t base = hfa::sm90::staged_row_base(row);
      ASSERT_EQ(hfa::sm90::staged_chunk_offset(base, c8), ref) << "row " << row << " chunk " << c8;
      if (c8 % 2 == 1)  // the odd chunk of a pair, as stage_output's matrices 2 and 3 address it
        ASSERT_EQ(hfa::sm90::staged_chunk_offset(base ^ 16, c8 - 1), ref) << "row " << row << " chunk " << c8;
    }
}

TEST(Sm90Layouts, StagedOutputOffsetsMatchSw128Rows) {
  expect_staged_offsets_match<64>();
  expect_staged_offsets_match<128>();
  expect_staged_offsets_match<256>();
}

}  // namespace
