// Flash decode's host rules (decode.cpp), split out so that CPU tests exercise every one with a
// hand-made DeviceInfo and no GPU.
#pragma once

#include "common/problem.h"
#include "kernels/decode/decode_problem.h"

namespace hfa {

// Checks DecodeArgs (ranks, shapes, dtypes, strides, pointers, the optional tensors' pairings) and
// fills `problem` (num_splits as given: 0 = not chosen yet). Errors name the argument and the rule.
Status normalize_decode(const DecodeArgs& args, DecodeProblem* problem);

// Whether `device` can run decode at this head dim and cache dtype (compute capability, shared
// memory).
Status check_decode_device(const DeviceInfo& device, int head_dim, bool fp8_cache);

// The plan for a normalized problem on `device`: its split count (the problem's, or the
// heuristic's when 0) and workspace size.
Status plan_decode_for(const DecodeProblem& problem, const DeviceInfo& device, DecodePlan* plan);

// Whether a plan was made for this problem's shapes on this device.
Status check_plan_matches(const DecodeProblem& problem, const DecodePlan& plan, int device);

}  // namespace hfa
