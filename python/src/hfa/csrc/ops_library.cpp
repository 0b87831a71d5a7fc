// hfa's ops in PyTorch's dispatcher: the whole schema list in one place (the implementations are
// registered by ops_attention.cpp and ops_fp8_decode.cpp), the two host-only queries and the
// workspace pool's two calls.
//
// libhfa_torch.so is the binding: the Python package loads it with torch.ops.load_library and calls
// torch.ops.hfa.*; a C++ program on libtorch links it and calls the same ops through the
// dispatcher. The fake (meta) implementations that torch.compile and torch.export trace with are
// Python's (hfa/_fake.py), found through set_python_module.
#include <torch/library.h>

#include "torch_views.h"

#include <string>
#include <vector>

namespace hfa_torch {
namespace {

// The kernel "auto" runs for these arguments on q's device (host only; nothing is launched).
std::string select_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const at::Device device = cuda_device_of(q);
  const c10::cuda::CUDAGuard guard(device);
  const at::Tensor out = at::empty_like(q);
  hfa::ForwardArgs args;
  set_attention_args(&args, q, k, v, out, causal, std::nullopt, "auto", -1, -1, 0.0, std::nullopt,
                     device);
  std::string name;
  throw_if_error(hfa::select_kernel(args, &name));
  return name;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';  // the descriptions are one line; a control character would not be JSON
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Every kernel of the library (forward, or backward), as a JSON list of objects with
// hfa::KernelInfo's fields: the dispatcher's types have no list of records.
std::string list_kernels(bool backward) {
  const std::vector<hfa::KernelInfo> kernels = backward ? hfa::list_backward_kernels() : hfa::list_kernels();
  std::string out = "[";
  for (const hfa::KernelInfo& k : kernels) {
    if (out.size() > 1) out += ", ";
    const auto flag = [](bool b) { return b ? "true" : "false"; };
    out += "{\"name\": " + json_string(k.name) + ", \"description\": " + json_string(k.description) +
           ", \"supports\": " + json_string(k.supports) + ", \"fp8\": " + flag(k.fp8) +
           ", \"fp8_block_scales\": " + flag(k.fp8_block_scales) + ", \"window\": " + flag(k.window) +
           ", \"softcap\": " + flag(k.softcap) + ", \"sinks\": " + flag(k.sinks) +
           ", \"varlen\": " + flag(k.varlen) + "}";
  }
  return out + "]";
}

// hfa's workspace memory pool on CUDA device `device` (hfa.h, "Workspace memory"): the bytes it
// holds, and giving back what it keeps.
int64_t workspace_memory_reserved(int64_t device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  size_t bytes = 0;
  throw_if_error(hfa::workspace_memory_reserved(&bytes));
  return static_cast<int64_t>(bytes);
}
void release_workspace_memory(int64_t device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  throw_if_error(hfa::release_workspace_memory());
}

}  // namespace
}  // namespace hfa_torch

TORCH_LIBRARY(hfa, m) {
  m.set_python_module("hfa._fake");
  // softmax(softmax_scale q k^T [masked]) v -> (out, lse). deterministic and backward_kernel are
  // the backward's, saved by the Autograd kernel.
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float? softmax_scale, str kernel, "
        "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
        "ScalarType? out_dtype=None, Tensor? q_block_descale=None, Tensor? k_block_descale=None, "
        "bool deterministic=False, str backward_kernel=\"auto\", int window_left=-1, "
        "int window_right=-1, float softcap=0.0, Tensor? sinks=None) -> (Tensor, Tensor)");
  // -> (dq, dk, dv, dsinks); dsinks is empty without sinks; dq, dk, dv in q's dtype or, with
  // grad_dtype=float32, the kernel's fp32 sums unrounded. (Not "kernel": Inductor's fallback for
  // a custom op takes a "kernel" argument of its own.)
  m.def("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, "
        "bool causal, float? softmax_scale, bool deterministic=False, str backward_kernel=\"auto\", "
        "int window_left=-1, int window_right=-1, float softcap=0.0, Tensor? sinks=None, "
        "ScalarType? grad_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("attention_varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
        "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, Tensor? seqused_k, bool causal, "
        "float? softmax_scale, str kernel, int window_left=-1, int window_right=-1, "
        "float softcap=0.0, Tensor? sinks=None, bool deterministic=False, "
        "str backward_kernel=\"auto\") -> (Tensor, Tensor)");
  m.def("attention_varlen_bwd(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, "
        "Tensor? seqused_k, bool causal, float? softmax_scale, bool deterministic, "
        "str backward_kernel, int window_left, int window_right, float softcap, Tensor? sinks, "
        "ScalarType? grad_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)");
  // -> (q8, k8, v8, q_descale, k_descale, v_descale)
  m.def("quantize_fp8(Tensor q, Tensor k, Tensor v, bool block, bool hadamard, int hadamard_seed, "
        "bool subtract_mean_key) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // Writes k, v (when given) into the caches in place, then attends (the splits' partial results
  // go through workspace, which it writes too): -> (out, lse).
  m.def("attention_with_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, "
        "Tensor? v, Tensor cache_seqlens, Tensor? page_table, Tensor? cache_batch_idx, bool causal, "
        "float? softmax_scale, int num_splits, Tensor(c!) workspace, Tensor? k_descale=None, "
        "Tensor? v_descale=None, int window_left=-1, int window_right=-1, float softcap=0.0, "
        "Tensor? sinks=None) -> (Tensor, Tensor)");
  // Host only: -> (num_splits, workspace bytes).
  m.def("plan_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? k, Tensor? v, "
        "Tensor cache_seqlens, Tensor? page_table, Tensor? cache_batch_idx, bool causal, "
        "int num_splits, Tensor? k_descale, Tensor? v_descale, int window_left=-1, "
        "int window_right=-1) -> (int, int)");
  // The exact merge of partial results over disjoint key sets: -> (out, lse).
  m.def("merge_attention(Tensor o_parts, Tensor lse_parts, ScalarType? out_dtype=None) -> (Tensor, Tensor)");
  m.def("select_kernel(Tensor q, Tensor k, Tensor v, bool causal) -> str", &hfa_torch::select_kernel);
  m.def("list_kernels(bool backward=False) -> str", &hfa_torch::list_kernels);
  m.def("workspace_memory_reserved(int device) -> int", &hfa_torch::workspace_memory_reserved);
  m.def("release_workspace_memory(int device) -> ()", &hfa_torch::release_workspace_memory);
}
