"""The fake (meta) implementations of hfa's ops: output shapes and dtypes without running anything,
which torch.compile and torch.export trace with. The ops themselves are C++ (libhfa_torch.so,
TORCH_LIBRARY(hfa) in csrc/ops_library.cpp, which names this module with set_python_module)."""
import torch

from . import _library  # noqa: F401  (the ops must exist before their fakes are registered)


def _check_rank(t: torch.Tensor, name: str = "q") -> None:
    if t.dim() != 4:
        raise ValueError(f"{name}: expected rank 4 (batch, seqlen, heads, head_dim), got rank {t.dim()}")


def _out_dtype(q: torch.Tensor, out_dtype) -> torch.dtype:
    """out has q's dtype, except for float8_e4m3fn inputs: bfloat16 unless out_dtype says float16
    (the C++ kernel's rule, out_dtype_for in csrc/ops_attention.cpp)."""
    if q.dtype != torch.float8_e4m3fn:
        if out_dtype is not None and out_dtype != q.dtype:
            raise ValueError(f"out_dtype: {out_dtype} differs from q's {q.dtype}; only float8 "
                             "inputs choose their output dtype")
        return q.dtype
    if out_dtype not in (None, torch.bfloat16, torch.float16):
        raise ValueError(f"out_dtype: {out_dtype}; with float8_e4m3fn inputs out is bfloat16 or float16")
    return out_dtype or torch.bfloat16


def _dsinks(q, sinks):
    return (torch.empty_like(sinks, dtype=torch.float32) if sinks is not None
            else q.new_empty(0, dtype=torch.float32))


@torch.library.register_fake("hfa::attention_fwd")
def _(q, k, v, causal, softmax_scale, kernel, q_descale=None, k_descale=None, v_descale=None,
      out_dtype=None, q_block_descale=None, k_block_descale=None, deterministic=False,
      backward_kernel="auto", window_left=-1, window_right=-1, softcap=0.0, sinks=None):
    _check_rank(q)
    out = q.new_empty(q.shape, dtype=_out_dtype(q, out_dtype))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


def _grads(q, k, v, sinks, grad_dtype):
    """(dq, dk, dv, dsinks) of the backward ops: q's dtype, or float32 (grad_dtype)."""
    if grad_dtype is not None and grad_dtype not in (q.dtype, torch.float32):
        raise ValueError(f"grad_dtype: {grad_dtype}; the gradients are in q's dtype ({q.dtype}) "
                         "or float32")
    gd = grad_dtype or q.dtype
    return (torch.empty_like(q, dtype=gd), torch.empty_like(k, dtype=gd),
            torch.empty_like(v, dtype=gd), _dsinks(q, sinks))


@torch.library.register_fake("hfa::attention_bwd")
def _(q, k, v, out, dout, lse, causal, softmax_scale, deterministic=False, backward_kernel="auto",
      window_left=-1, window_right=-1, softcap=0.0, sinks=None, grad_dtype=None):
    return _grads(q, k, v, sinks, grad_dtype)


@torch.library.register_fake("hfa::attention_varlen_fwd")
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, causal,
      softmax_scale, kernel, window_left=-1, window_right=-1, softcap=0.0, sinks=None,
      deterministic=False, backward_kernel="auto"):
    if q.dim() != 3:
        raise ValueError(f"q: expected rank 3 (total_q, heads_q, head_dim), got rank {q.dim()}")
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.register_fake("hfa::attention_varlen_bwd")
def _(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
      causal, softmax_scale, deterministic, backward_kernel, window_left, window_right, softcap,
      sinks, grad_dtype=None):
    return _grads(q, k, v, sinks, grad_dtype)


def quantized_shapes(q, k, block):
    """The descales' shapes: per 128-row block of each head of q and k, or per (batch, KV head)."""
    b, sq, hq, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    blocks = lambda s: (s + 127) // 128  # noqa: E731
    qs = (b, hq, blocks(sq)) if block else (b, hk)
    ks = (b, hk, blocks(sk)) if block else (b, hk)
    return qs, ks, (b, hk)


@torch.library.register_fake("hfa::quantize_fp8")
def _(q, k, v, block, hadamard, hadamard_seed, subtract_mean_key):
    _check_rank(q)
    _check_rank(k, "k")
    e4m3 = torch.float8_e4m3fn
    shapes = quantized_shapes(q, k, block)
    return (q.new_empty(q.shape, dtype=e4m3), k.new_empty(k.shape, dtype=e4m3),
            v.new_empty(v.shape, dtype=e4m3)) + tuple(q.new_empty(s, dtype=torch.float32) for s in shapes)


@torch.library.register_fake("hfa::attention_with_kvcache")
def _(q, k_cache, v_cache, k, v, cache_seqlens, page_table, cache_batch_idx, causal, softmax_scale,
      num_splits, workspace, k_descale=None, v_descale=None, window_left=-1, window_right=-1,
      softcap=0.0, sinks=None):
    _check_rank(q)
    return (q.new_empty(q.shape),
            q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32))


@torch.library.register_fake("hfa::merge_attention")
def _(o_parts, lse_parts, out_dtype=None):
    if o_parts.dim() != 5:
        raise ValueError(f"o_parts: expected rank 5 (num_parts, batch, seqlen, heads, head_dim), got rank {o_parts.dim()}")
    _, b, s, h, d = o_parts.shape
    return (o_parts.new_empty((b, s, h, d), dtype=out_dtype or o_parts.dtype),
            o_parts.new_empty((b, h, s), dtype=torch.float32))
