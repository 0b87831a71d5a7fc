// The explicit 128-byte-swizzle addressing that K3's CUDA-core compute uses must agree with CuTe's
// swizzled shared-memory tensors (which is what the TMA writes and GMMA reads).
#include <gtest/gtest.h>

#include <cute/tensor.hpp>

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

}  // namespace
