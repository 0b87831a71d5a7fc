// Rules every tensor argument of the API follows, shared by the validation of forward/backward/
// quantize (validate.cpp) and of decode (validate_decode.cpp). Each error names the argument.
#pragma once

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

// Whether an optional tensor argument was given (a data pointer, or a shape for empty tensors).
bool given(const TensorView& t);

}  // namespace hfa
