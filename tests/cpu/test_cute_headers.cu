// The CuTe headers that scripts/setup.sh unpacks are found and usable (the Hopper kernels build on
// them): a layout's size and the offset it maps a coordinate to.
#include <gtest/gtest.h>

#include <cute/layout.hpp>

TEST(CuteHeaders, LayoutAlgebraWorks) {
  using namespace cute;
  auto row_major = make_layout(make_shape(Int<4>{}, Int<8>{}), make_stride(Int<8>{}, Int<1>{}));
  EXPECT_EQ(size(row_major), 32);
  EXPECT_EQ(row_major(make_coord(2, 3)), 2 * 8 + 3);
}
