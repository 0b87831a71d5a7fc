// merge_attention's argument rules (api/merge.cpp), apart so the CPU tests reach them.
#pragma once

#include "hfa/hfa.h"
#include "kernels/merge/merge_problem.h"

namespace hfa {

// Checks MergeArgs (ranks, shapes, dtypes, strides, alignment, overlap) and fills `problem`.
// The message of an error names the argument and the rule it broke.
Status normalize_merge(const MergeArgs& args, MergeProblem* problem);

}  // namespace hfa
