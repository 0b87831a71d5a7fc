// The explicit 128-byte-swizzle addressing that K3's CUDA-core compute uses must agree with CuTe's
// swizzled shared-memory tensors (which is what the TMA writes and GMMA reads).
#include <gtest/gtest.h>

#include <cute/tensor.hpp>

#include <vector>

#include "kernels/sm90/common/fp8_pv.cuh"
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

// KMajorBytes (k7's V transpose) addresses e4m3 tiles as CuTe lays them out: 64-byte swizzle at
// D = 64, 128-byte above, atoms down the rows first.
template <int Rows, int Cols>
void expect_same_byte_addresses() {
  using E = cute::float_e4m3_t;
  alignas(1024) static E smem[Rows * Cols];
  auto t = cute::make_tensor(cute::make_smem_ptr(smem), hfa::sm90::TileLayout<E, Rows, Cols>{});
  for (int row = 0; row < Rows; ++row)
    for (int col = 0; col < Cols; ++col) {
      const auto cute_offset = reinterpret_cast<const char*>(cute::raw_pointer_cast(&t(row, col))) -
                               reinterpret_cast<const char*>(smem);
      ASSERT_EQ(cute_offset, (hfa::sm90::KMajorBytes<Rows, Cols>::offset(row, col)))
          << Rows << " x " << Cols << " row " << row << " col " << col;
    }
}

TEST(Sm90Layouts, KMajorBytesMatchesCuteForE4m3) {
  expect_same_byte_addresses<128, 64>();
  expect_same_byte_addresses<128, 128>();
  expect_same_byte_addresses<128, 256>();
  expect_same_byte_addresses<64, 128>();
  expect_same_byte_addresses<256, 128>();
  expect_same_byte_addresses<256, 64>();  // d = 256's transposed 64-key V tile
  expect_same_byte_addresses<64, 256>();
}

// The key renaming of the FP8 P V (fp8_pv.cuh): a permutation of each 16 keys, and the one that
// maps S's accumulator order onto the e4m3 A operand's. A thread (q = lane % 4) holds keys
// 2q, 2q + 1, 2q + 8, 2q + 9 of each 16 in the accumulator (PTX's fp32 D fragment: pairs per
// 8-key group) and columns 4q .. 4q + 3 in the A operand (PTX's k32 A fragment).
TEST(Sm90Layouts, Fp8KeyRenamingMatchesTheFragments) {
  std::vector<int> seen(128, 0);
  for (int key = 0; key < 128; ++key) {
    const int col = hfa::sm90::permuted_key_column(key);
    ASSERT_GE(col, key - key % 16);
    ASSERT_LT(col, key - key % 16 + 16);
    ++seen[col];
  }
  for (int c = 0; c < 128; ++c) EXPECT_EQ(seen[c], 1) << "column " << c;
  for (int q = 0; q < 4; ++q) {
    const int acc_keys[4] = {2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(hfa::sm90::permuted_key_column(acc_keys[i]), 4 * q + i);
  }
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
