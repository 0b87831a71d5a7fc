// The random signs of quantize_fp8's Hadamard transform, shared by the kernel and the tests: the
// same (seed, channel) gives the same sign on the host and on the device.
#pragma once

#include <cstdint>

#include "common/problem.h"  // HFA_HOST_DEVICE

namespace hfa {

// splitmix64's finalizer: a counter-based hash.
HFA_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// +1 or -1 for channel `c` of the transform seeded by `seed`.
HFA_HOST_DEVICE inline float hadamard_sign(uint64_t seed, int c) {
  return (mix64(mix64(seed) ^ static_cast<uint64_t>(c)) >> 63) ? -1.f : 1.f;
}

}  // namespace hfa
