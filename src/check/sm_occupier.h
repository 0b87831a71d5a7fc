// Test support: keeps all but a few SMs of the current device busy, so that a kernel launched
// meanwhile runs on fewer SMs than the device has (deterministic modes must not depend on it).
#pragma once

#include "hfa/hfa.h"

namespace hfa::check {

class SmOccupier {
 public:
  SmOccupier() = default;
  SmOccupier(const SmOccupier&) = delete;
  SmOccupier& operator=(const SmOccupier&) = delete;
  ~SmOccupier();  // releases

  // Launches one CTA per SM but `free_sms`, each holding as much shared memory as a CTA may (so
  // nothing else fits beside it), spinning on a host flag on a stream of its own; returns once
  // all of them run. Other work then gets only the free SMs until release().
  Status occupy(int free_sms);
  Status release();

 private:
  volatile int* flag_ = nullptr;     // mapped host memory: 1 releases the CTAs
  volatile int* started_ = nullptr;  // mapped host memory: CTAs running
  void* stream_ = nullptr;           // cudaStream_t
  bool running_ = false;
};

}  // namespace hfa::check
