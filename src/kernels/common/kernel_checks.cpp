#include "kernels/common/kernel_checks.h"

#include <cstdint>
#include <string>

#include "common/status_util.h"
#include "kernels/common/backward_workspace.h"

namespace hfa {

Status check_min_arch(const char* kernel, const DeviceInfo& device, int min_cc) {
  if (device.cc() >= min_cc) return Status::Ok();
  return make_error(StatusCode::kUnsupported,
                    "kernel \"%s\": needs a GPU of compute capability %d.%d or newer; device %d is "
                    "%d.%d", kernel, min_cc / 10, min_cc % 10, device.device, device.cc_major,
                    device.cc_minor);
}

Status check_head_dim(const char* kernel, const FwdProblem& p, std::initializer_list<int> dims) {
  std::string list;
  for (int d : dims) {
    if (d == p.head_dim) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::to_string(d);
  }
  return make_error(StatusCode::kUnsupported,
                    "head_dim: %d is not supported by kernel \"%s\" (this build has: %s)",
                    p.head_dim, kernel, list.c_str());
}

Status check_16B_operand(const char* kernel, const char* name, const void* ptr, int64_t batch_stride,
                         int64_t row_stride, int64_t head_stride, DType dtype) {
  const int64_t elem = size_of(dtype);
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    return make_error(StatusCode::kUnsupported,
                      "%s: data pointer %p is not 16-byte aligned, which kernel \"%s\" needs "
                      "(16-byte vector loads)", name, ptr, kernel);
  const int64_t strides[3] = {batch_stride, row_stride, head_stride};
  const char* names[3] = {"batch", "seqlen", "heads"};
  for (int i = 0; i < 3; ++i)
    if ((strides[i] * elem) % 16 != 0)
      return make_error(StatusCode::kUnsupported,
                        "%s: %s stride %lld elements is not a multiple of 16 bytes, which kernel "
                        "\"%s\" needs (16-byte vector loads)", name, names[i],
                        static_cast<long long>(strides[i]), kernel);
  return Status::Ok();
}

Status check_16B_aligned(const char* kernel, const FwdProblem& p) {
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "q", p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, p.dtype));
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "k", p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, p.dtype));
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "v", p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, p.dtype));
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "out", p.o, p.o_batch_stride, p.o_row_stride, p.o_head_stride, p.out_dtype));
  const int64_t elem = size_of(p.dtype);
  if ((p.head_dim * elem) % 16 != 0)
    return make_error(StatusCode::kUnsupported, "head_dim: %d is not a multiple of %lld for kernel \"%s\"",
                      p.head_dim, static_cast<long long>(16 / elem), kernel);
  return Status::Ok();
}

Status check_grid_dim(const char* kernel, const char* what, long long blocks) {
  if (blocks <= 65535) return Status::Ok();
  return make_error(StatusCode::kUnsupported,
                    "%s: kernel \"%s\" needs %lld thread blocks along one grid axis; at most 65535",
                    what, kernel, blocks);
}

Status check_smem(const char* kernel, const DeviceInfo& device, long long bytes) {
  if (bytes <= device.max_smem_per_block_optin) return Status::Ok();
  return make_error(StatusCode::kUnsupported,
                    "head_dim: kernel \"%s\" needs %lld bytes of shared memory per block at this "
                    "head_dim; device %d allows %lld", kernel, bytes, device.device,
                    static_cast<long long>(device.max_smem_per_block_optin));
}

Status check_backward_operands(const char* kernel, const BwdProblem& bp) {
  const FwdProblem& p = bp.fwd;
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "dout", bp.dout, bp.do_batch_stride, bp.do_row_stride, bp.do_head_stride, p.dtype));
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "dq", bp.dq, bp.dq_batch_stride, bp.dq_row_stride, bp.dq_head_stride, bp.grad_dtype()));
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "dk", bp.dk, bp.dk_batch_stride, bp.dk_row_stride, bp.dk_head_stride, bp.grad_dtype()));
  HFA_RETURN_IF_ERROR(check_16B_operand(kernel, "dv", bp.dv, bp.dv_batch_stride, bp.dv_row_stride, bp.dv_head_stride, bp.grad_dtype()));
  HFA_RETURN_IF_ERROR(check_grid_dim(kernel, "heads_q", p.heads_q));  // the row passes' grids
  HFA_RETURN_IF_ERROR(check_grid_dim(kernel, p.varlen() ? "cu_seqlens_q" : "batch", p.batch));
  if (p.varlen() && varlen_workspace_rows(p.total_q, p.batch) > INT32_MAX)  // the TMA reductions' rows
    return make_error(StatusCode::kUnsupported,
                      "cu_seqlens_q: kernel \"%s\" pads each of the %d sequences' rows of its dQ "
                      "workspace to %d, which makes more than 2^31 rows with q's %d", kernel, p.batch,
                      kRowStatsAlign, p.total_q);
  return Status::Ok();
}

}  // namespace hfa
