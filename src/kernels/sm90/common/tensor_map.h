// Host side of the TMA tensor maps that plain-PTX kernels use (the CuTe kernels build theirs with
// make_tma_copy): cuTensorMapEncodeTiled, reached through the runtime's driver entry point so
// that libhfa needs no link to libcuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hfa::sm90 {

// The element types of the backward's dQ accumulators: fp32, or the 64-bit integers of
// fixed-point dQ (as unsigned: TMA's integer add is defined on u64, and two's complement addition
// gives a signed sum the same bits).
enum class AccumulatorType { kF32, kU64 };

// A map of the contiguous array base[planes][rows][cols] of `type` (cols * its size a multiple
// of 16 bytes), boxes of (box_cols, box_rows, 1) with box_cols * its size == 128 bytes, 128-byte
// swizzled in shared memory: 16-byte chunk c of box row r at chunk c ^ (r % 8). Every dimension
// must be at least 1. Returns cudaErrorInvalidValue when the driver rejects the map (or lacks the
// entry point).
cudaError_t encode_accumulator_tensor_map(CUtensorMap* map, AccumulatorType type, void* base, uint64_t cols,
                                          uint64_t rows, uint64_t planes, uint32_t box_cols, uint32_t box_rows);

}  // namespace hfa::sm90
