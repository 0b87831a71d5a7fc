// Small helpers to build Status values with formatted messages.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include "hfa/hfa.h"

namespace hfa {

// A message as it is (no formatting: a literal with nothing to format is not a format string,
// which -Wformat-security rejects when passed to snprintf alone).
inline Status make_error(StatusCode code, const char* message) { return Status{code, message}; }

template <typename Arg, typename... Args>
Status make_error(StatusCode code, const char* fmt, Arg&& arg, Args&&... args) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf), fmt, std::forward<Arg>(arg), std::forward<Args>(args)...);
  return Status{code, buf};
}

#define HFA_RETURN_IF_ERROR(expr)         \
  do {                                    \
    ::hfa::Status hfa_status_ = (expr);   \
    if (!hfa_status_.ok()) return hfa_status_; \
  } while (0)

// Turns a CUDA error into a Status naming what failed.
inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return make_error(err == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory
                                                     : StatusCode::kCudaError,
                    "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

}  // namespace hfa
