// Rules every tensor argument of the API follows, shared by the validation of the forward
// (validate.cpp), the backward (backward.cpp), quantize_fp8 (quantize.cpp), decode (decode.cpp) and
// merge_attention (merge.cpp). Each error names the argument.
#pragma once

#include <initializer_list>
#include <string>

#include "hfa/hfa.h"

namespace hfa {

// "(2, 128, 16, 64)"
std::string shape_string(const TensorView& t);

// Its rank, sizes in [0, 2^31), non-negative strides, a pointer when it has elements.
// `dims` names the dimensions for the message, e.g. "(batch, seqlen, heads, head_dim)".
Status check_tensor(const TensorView& t, const char* name, int rank, const char* dims);

// A rank-4 (batch, seqlen, heads, head_dim) tensor of `dtype` with head_dim contiguous.
Status check_attention_tensor(const TensorView& t, const char* name, DType dtype);

// a.shape[a_dim] == b.shape[b_dim]; `what` names the dimension for the message.
Status check_same_dim(const TensorView& a, const char* a_name, int a_dim, const TensorView& b,
                      const char* b_name, int b_dim, const char* what);

// A packed (total, heads, head_dim) tensor (a variable-length batch) as the (1, total, heads,
// head_dim) view the dense rules check (the batch stride is never used: 0).
TensorView as_one_batch(const TensorView& t);

// Whether an optional tensor argument was given (a data pointer, or a shape for empty tensors).
bool given(const TensorView& t);

// A descale factor tensor of e4m3 inputs (the forward's, decode's e4m3 cache): given, fp32, rank
// expect.size() with dimensions `dims` of sizes `expect`.
Status check_descale_tensor(const TensorView& t, const char* name, const char* dims,
                            std::initializer_list<int64_t> expect);

// The score variants' argument rules (ForwardArgs and DecodeArgs: window_left / window_right,
// softcap, sinks). Each window side -1 (unbounded) or >= 0, and with causal window_right -1 or 0.
Status check_window_args(int window_left, int window_right, bool causal);
// softcap finite and >= 0 (0: off).
Status check_softcap_arg(float softcap);
// Optional sinks, when given: fp32 (heads_q), any stride.
Status check_sinks_tensor(const TensorView& sinks, int64_t heads_q);

}  // namespace hfa
