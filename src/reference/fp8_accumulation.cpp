#include "reference/fp8_accumulation.h"

#include <algorithm>
#include <cmath>

namespace hfa::reference {

double fp8_dot_error_bound(const double* a, const double* b, int n) {
  double mean = 0, variance = 0, acc = 0;
  auto sign = [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; };
  for (int c0 = 0; c0 < n; c0 += kFp8KStep) {
    const int end = std::min(n, c0 + kFp8KStep);
    // The step's largest magnitude: the accumulator coming in, each product, and (to cover any
    // order of the additions inside the step) every partial sum on the way.
    double largest = std::fabs(acc), signs = sign(acc);
    for (int c = c0; c < end; ++c) {
      const double p = a[c] * b[c];
      acc += p;
      signs += sign(p);
      largest = std::max({largest, std::fabs(p), std::fabs(acc)});
    }
    if (largest == 0) continue;
    const double quantum = std::ldexp(1.0, std::ilogb(largest) - kFp8AccumulatorBits);
    mean += signs * quantum / 2;
    variance += (end - c0 + 1) * quantum * quantum / 12;
  }
  return std::fabs(mean) + kFp8ErrorSigmas * std::sqrt(variance);
}

double fp8_dot_emulated(const double* a, const double* b, int n) {
  double acc = 0;
  for (int c0 = 0; c0 < n; c0 += kFp8KStep) {
    const int end = std::min(n, c0 + kFp8KStep);
    double largest = std::fabs(acc);
    for (int c = c0; c < end; ++c) largest = std::max(largest, std::fabs(a[c] * b[c]));
    if (largest == 0) continue;
    // 13 mantissa bits below the largest magnitude's leading bit.
    const double quantum = std::ldexp(1.0, std::ilogb(largest) - kFp8AccumulatorBits);
    auto truncate = [quantum](double x) { return std::trunc(x / quantum) * quantum; };
    double sum = truncate(acc);
    for (int c = c0; c < end; ++c) sum += truncate(a[c] * b[c]);
    acc = sum;
  }
  return acc;
}

}  // namespace hfa::reference
