// Host side of the TMA tensor maps that plain-PTX kernels use (the CuTe kernels build theirs with
// make_tma_copy): cuTensorMapEncodeTiled, reached through the runtime's driver entry point so
// that libhfa needs no link to libcuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hfa::sm90 {

// A map of the contiguous fp32 array base[planes][rows][cols] (cols * 4 bytes a multiple of 16),
// boxes of (box_cols, box_rows, 1) with box_cols * 4 == 128 bytes, 128-byte swizzled in shared
// memory: 16-byte chunk c of box row r at chunk c ^ (r % 8). Every dimension must be at least 1.
// Returns cudaErrorInvalidValue when the driver rejects the map (or lacks the entry point).
cudaError_t encode_f32_tensor_map(CUtensorMap* map, float* base, uint64_t cols, uint64_t rows,
                                  uint64_t planes, uint32_t box_cols, uint32_t box_rows);

}  // namespace hfa::sm90
