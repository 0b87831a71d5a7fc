"""FlashAttention-3's Python functions (``hopper/flash_attn_interface.py``), on hfa's kernels.

    from hfa import flash_attn_func          # instead of: from flash_attn_interface import ...
    out = flash_attn_func(q, k, v, causal=True)

Same signatures, argument names, defaults and return conventions as FlashAttention-3. An argument
hfa does not support yet raises NotImplementedError naming it (never silently ignored); the table
of what is supported is in docs/PYTHON.md. Everything else is hfa.attention /
hfa.attention_with_kvcache: errors from the library's validation are ValueError.
"""
from typing import Optional, Union

import torch

from . import attention, attention_varlen, attention_with_kvcache

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache"]


def _unsupported(function: str, **given) -> None:
    """Raises for the first argument whose value is not FlashAttention-3's default (what hfa
    implements): given maps name -> (value, default)."""
    for name, (value, default) in given.items():
        if isinstance(default, tuple):
            differs = tuple(value) != default
        elif default is None:
            differs = value is not None
        else:
            differs = value != default
        if differs:
            raise NotImplementedError(f"{function}: {name}={value!r} is not supported by hfa yet "
                                      f"(only {default!r}); see docs/PYTHON.md")


def _forward_options(function, qv, attention_chunk, num_splits, pack_gqa, sm_margin,
                     num_splits_default=1):
    _unsupported(function, qv=(qv, None), attention_chunk=(attention_chunk, 0),
                 num_splits=(num_splits, num_splits_default), pack_gqa=(pack_gqa, None),
                 sm_margin=(sm_margin, 0))


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                    return_attn_probs=False):
    """q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim);
    bf16/fp16 (differentiable), or float8_e4m3fn with (batch, heads_kv) descales (forward only,
    bf16 out). causal is bottom-right aligned; window_size (left, right) and softcap as
    FlashAttention's. Returns out, or (out, softmax_lse) with return_attn_probs (softmax_lse:
    fp32 (batch, heads_q, seqlen_q))."""
    _forward_options("flash_attn_func", qv, attention_chunk, num_splits, pack_gqa, sm_margin)
    return attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                     return_lse=return_attn_probs, q_descale=q_descale, k_descale=k_descale,
                     v_descale=v_descale, deterministic=deterministic,
                     window_size=tuple(window_size), softcap=softcap)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None,
                              k_descale=None, v_descale=None, window_size=(-1, -1),
                              attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """qkv: (batch, seqlen, 3, heads, head_dim), or (batch, seqlen, heads_q + 2 heads_kv, head_dim)
    with num_heads_q (GQA). q, k, v are views of it (no copy); the gradient is qkv's."""
    _forward_options("flash_attn_qkvpacked_func", None, attention_chunk, 1, None, sm_margin)
    if qkv.dim() == 5:
        if qkv.shape[-3] != 3:
            raise ValueError(f"qkv: shape {tuple(qkv.shape)}; a 5-d qkv is (batch, seqlen, 3, heads, head_dim)")
        q, k, v = qkv.unbind(dim=-3)
    elif qkv.dim() == 4:
        if num_heads_q is None:
            raise ValueError("num_heads_q: required with a 4-d qkv (batch, seqlen, heads_q + 2 heads_kv, head_dim)")
        heads_kv = (qkv.shape[2] - num_heads_q) // 2
        if heads_kv <= 0 or num_heads_q + 2 * heads_kv != qkv.shape[2]:
            raise ValueError(f"num_heads_q: {num_heads_q}; qkv's {qkv.shape[2]} heads are not "
                             "num_heads_q + 2 heads_kv")
        q, k, v = qkv.split([num_heads_q, heads_kv, heads_kv], dim=-2)
    else:
        raise ValueError(f"qkv: rank {qkv.dim()}; expected 5 (batch, seqlen, 3, heads, head_dim) "
                         "or 4 with num_heads_q")
    return attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                     return_lse=return_attn_probs, q_descale=q_descale, k_descale=k_descale,
                     v_descale=v_descale, deterministic=deterministic,
                     window_size=tuple(window_size), softcap=softcap)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
                           qv=None, q_descale=None, k_descale=None, v_descale=None,
                           window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0,
                           return_attn_probs=False):
    """q: (total_q, heads_q, head_dim), k, v: (total_k, heads_kv, head_dim), bf16/fp16; sequence b
    is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (int32 (batch + 1,) CUDA tensors), likewise
    for k and v, of which it uses the first seqused_k[b] when given. Returns out, or (out,
    softmax_lse) with return_attn_probs (softmax_lse: fp32 (heads_q, total_q)). Differentiable
    as hfa.attention_varlen is."""
    _forward_options("flash_attn_varlen_func", qv, attention_chunk, num_splits, pack_gqa, sm_margin)
    _unsupported("flash_attn_varlen_func", seqused_q=(seqused_q, None), q_descale=(q_descale, None),
                 k_descale=(k_descale, None), v_descale=(v_descale, None))
    return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            seqused_k=seqused_k, causal=causal, softmax_scale=softmax_scale,
                            return_lse=return_attn_probs, window_size=tuple(window_size),
                            softcap=softcap, deterministic=deterministic)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens: Optional[Union[int, torch.Tensor]] = None,
                            cache_batch_idx: Optional[torch.Tensor] = None,
                            cache_leftpad: Optional[torch.Tensor] = None,
                            page_table: Optional[torch.Tensor] = None,
                            cu_seqlens_q: Optional[torch.Tensor] = None,
                            cu_seqlens_k_new: Optional[torch.Tensor] = None,
                            max_seqlen_q: Optional[int] = None,
                            rotary_seqlens: Optional[torch.Tensor] = None,
                            q_descale: Optional[torch.Tensor] = None,
                            k_descale: Optional[torch.Tensor] = None,
                            v_descale: Optional[torch.Tensor] = None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False):
    """Decode against a KV cache (hfa.attention_with_kvcache): q bf16/fp16; the cache of q's dtype,
    or float8_e4m3fn with k_descale / v_descale (batch, heads_kv). k, v are appended in place at
    cache_seqlens (an int or int32 (batch,) tensor). num_splits 0: the library's heuristic.
    window_size and softcap as FlashAttention's. Returns out, or (out, softmax_lse) with
    return_softmax_lse."""
    name = "flash_attn_with_kvcache"
    _unsupported(name, qv=(qv, None), rotary_cos=(rotary_cos, None), rotary_sin=(rotary_sin, None),
                 cache_leftpad=(cache_leftpad, None), cu_seqlens_q=(cu_seqlens_q, None),
                 cu_seqlens_k_new=(cu_seqlens_k_new, None), max_seqlen_q=(max_seqlen_q, None),
                 rotary_seqlens=(rotary_seqlens, None),
                 attention_chunk=(attention_chunk, 0),
                 scheduler_metadata=(scheduler_metadata, None), pack_gqa=(pack_gqa, None),
                 sm_margin=(sm_margin, 0))
    if q_descale is not None:
        raise NotImplementedError(f"{name}: q_descale is not supported by hfa yet: hfa's decode "
                                  "takes q in bf16/fp16 (an e4m3 cache needs only k_descale and v_descale)")
    if cache_seqlens is None:
        raise ValueError("cache_seqlens: required (an int or int32 (batch,) tensor)")
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    return attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                                  page_table=page_table, cache_batch_idx=cache_batch_idx,
                                  causal=causal, softmax_scale=softmax_scale,
                                  num_splits=num_splits, return_lse=return_softmax_lse,
                                  k_descale=k_descale, v_descale=v_descale,
                                  window_size=tuple(window_size), softcap=softcap)
