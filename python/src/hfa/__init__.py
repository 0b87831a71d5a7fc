"""hfa: exact attention (FlashAttention) for NVIDIA GPUs, from PyTorch.

    import hfa
    out = hfa.attention(q, k, v, causal=True)          # q: (batch, seqlen, heads, head_dim)

The ops are C++ (libhfa_torch.so, ``TORCH_LIBRARY(hfa)``: ``torch.ops.hfa.attention_fwd`` and the
rest), with fake implementations (``hfa._fake``), so ``torch.compile(fullgraph=True)`` and
``torch.export`` trace them without graph breaks; autograd is C++ too: the backward of
``hfa::attention_fwd`` is ``hfa::attention_bwd`` (the library's backward kernel, "auto"). An
eager call costs the dispatcher and the library's host work, no Python layer. Errors are the C++
library's validation messages, raised as ValueError.
"""
import json
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from . import _library  # noqa: F401  (loads libhfa_torch.so: the ops torch.ops.hfa.*)
from . import _fake  # noqa: F401  (their fake implementations, for torch.compile / torch.export)

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "plan_decode", "DecodePlan", "quantize_fp8",
           "Fp8Inputs", "merge_attention", "list_kernels", "list_backward_kernels", "select_kernel",
           "workspace_memory_reserved", "release_workspace_memory",
           # FlashAttention-3's functions (flash_attn_interface.py, imported at the end)
           "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache"]

# The overloads, looked up once: an eager call then goes straight into the C++ dispatcher.
_attention_fwd = torch.ops.hfa.attention_fwd.default
_attention_varlen_fwd = torch.ops.hfa.attention_varlen_fwd.default
_quantize_fp8 = torch.ops.hfa.quantize_fp8.default
_attention_with_kvcache = torch.ops.hfa.attention_with_kvcache.default
_plan_decode = torch.ops.hfa.plan_decode.default
_merge_attention = torch.ops.hfa.merge_attention.default
_NO_WINDOW = (-1, -1)


def _window_pair(window_size) -> Tuple[int, int]:
    """window_size as the ops take it: two ints (left, right)."""
    if len(window_size) != 2:
        raise ValueError(f"window_size: {window_size!r}; expected (left, right)")
    return int(window_size[0]), int(window_size[1])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: Optional[float] = None, kernel: str = "auto",
              return_lse: bool = False, q_descale: Optional[torch.Tensor] = None,
              k_descale: Optional[torch.Tensor] = None, v_descale: Optional[torch.Tensor] = None,
              out_dtype: Optional[torch.dtype] = None,
              q_block_descale: Optional[torch.Tensor] = None,
              k_block_descale: Optional[torch.Tensor] = None,
              deterministic: bool = False, backward_kernel: str = "auto",
              window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
              sinks: Optional[torch.Tensor] = None):
    """softmax(softmax_scale * q k^T [+ causal mask]) v.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim); bf16,
    fp16 (or float8_e4m3fn: below) CUDA tensors on one device, head_dim contiguous. heads_q must be a multiple of heads_kv
    (GQA/MQA). causal is aligned bottom-right when seqlen_q != seqlen_k. softmax_scale defaults to
    1/sqrt(head_dim). kernel: a name from list_kernels(), or "auto" (the forward);
    backward_kernel: a name from list_backward_kernels(), or "auto" (bwd_sm90 on Hopper, fa2
    on other GPUs and for the deterministic mode where it measured faster: BackwardArgs::kernel).
    With return_lse, also returns the fp32 log-sum-exp of each row, shape (batch, heads_q,
    seqlen_q) (not differentiable).

    FP8: q, k, v as torch.float8_e4m3fn with q_descale, k_descale, v_descale, each fp32
    (batch, heads_kv): the real q of query head h is q * q_descale[:, h // (heads_q // heads_kv)]
    (FlashAttention-3's convention). out is bfloat16, or float16 with out_dtype=torch.float16.
    Block quantization (k8) instead: q_block_descale fp32 (batch, heads_q, ceil(seqlen_q / 128))
    and k_block_descale (batch, heads_kv, ceil(seqlen_k / 128)) in place of q_descale and
    k_descale. quantize_fp8() makes either from bf16/fp16 tensors. Forward only (k7, k8).

    Differentiable with respect to q, k and v (bf16/fp16). deterministic=True makes the backward's
    dq, dk, dv bit-identical from run to run (BackwardArgs::deterministic: dq is summed in 64-bit
    fixed point or in a fixed order, at some cost in speed and workspace); the default is the
    fastest backward.

    Variants (FlashAttention's semantics; forward and backward, bf16/fp16): window_size=(left,
    right) is a sliding window, query i seeing keys i + seqlen_k - seqlen_q - left .. + right
    (-1: unbounded; with causal, right is 0). softcap > 0 caps the scores:
    softcap * tanh(softmax_scale * q.k / softcap). sinks: an fp32 (heads_q,) tensor of one logit
    per query head added to each row's softmax denominator (gpt-oss), differentiable; lse then
    includes it.
    """
    if (window_size == _NO_WINDOW and not softcap and sinks is None and q_descale is None
            and k_descale is None and v_descale is None and q_block_descale is None
            and k_block_descale is None and out_dtype is None and not deterministic
            and backward_kernel == "auto"):
        # The common call: the op's defaults for the rest. Each argument handed to the dispatcher
        # is converted from Python (about 0.14 us each: python/host_overhead.py, docs/PERFORMANCE.md).
        out, lse = _attention_fwd(q, k, v, causal, softmax_scale, kernel)
        return (out, lse) if return_lse else out
    if len(window_size) != 2:
        raise ValueError(f"window_size: {window_size!r}; expected (left, right)")
    out, lse = _attention_fwd(q, k, v, causal, softmax_scale, kernel, q_descale, k_descale,
                              v_descale, out_dtype, q_block_descale, k_block_descale,
                              deterministic, backward_kernel, int(window_size[0]),
                              int(window_size[1]), float(softcap), sinks)
    return (out, lse) if return_lse else out


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                     max_seqlen_k: int, seqused_k: Optional[torch.Tensor] = None,
                     causal: bool = False, softmax_scale: Optional[float] = None,
                     kernel: str = "auto", return_lse: bool = False,
                     window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                     sinks: Optional[torch.Tensor] = None, deterministic: bool = False,
                     backward_kernel: str = "auto"):
    """Attention over a packed batch of sequences of different lengths (no padding).

    q: (total_q, heads_q, head_dim), k, v: (total_k, heads_kv, head_dim), bf16/fp16, sequence b
    being rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q and cu_seqlens_k[b] ..
    cu_seqlens_k[b + 1] of k and v (cu_seqlens: int32 (batch + 1,) CUDA tensors starting at 0;
    seqused_k: optional int32 (batch,), the keys each sequence uses). max_seqlen_q / max_seqlen_k
    must bound every sequence's length (a longer one is cut to it). causal, window_size, softcap
    and sinks as in attention(), within each sequence (bottom-right aligned to its own lengths).
    Returns out (total_q, heads_q, head_dim), or (out, lse) with lse fp32 (heads_q, total_q).

    Differentiable with respect to q, k, v (and sinks), with every variant: on Hopper by the
    backward kernel bwd_sm90, on other GPUs (sm80+) by fa2. Gradients are 0 in k's and v's rows
    past seqused_k and in rows past the last sequence.
    deterministic and backward_kernel as in attention().
    """
    if len(window_size) != 2:
        raise ValueError(f"window_size: {window_size!r}; expected (left, right)")
    out, lse = _attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                     int(max_seqlen_k), seqused_k, causal, softmax_scale, kernel,
                                     int(window_size[0]), int(window_size[1]), float(softcap),
                                     sinks, deterministic, backward_kernel)
    return (out, lse) if return_lse else out


class Fp8Inputs(NamedTuple):
    """What quantize_fp8 returns: hfa.attention(x.q, x.k, x.v, **x.descales)."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    descales: Dict[str, torch.Tensor]


def quantize_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hadamard: bool = True,
                 block: bool = True, hadamard_seed: int = 0,
                 subtract_mean_key: bool = False) -> Fp8Inputs:
    """bf16/fp16 q, k, v -> float8_e4m3fn tensors and the descales hfa.attention takes.

    Each scale group (per (batch, KV head), or with block=True per 128 rows of each head of q and
    k) is scaled so its largest |value| becomes 448; v's descale is per (batch, KV head).
    hadamard: q and k times the same random orthogonal Hadamard transform along head_dim (signs
    from hadamard_seed), which leaves q k^T unchanged and spreads outlier channels, lowering the
    FP8 error. subtract_mean_key: k minus its mean over the sequence (per batch and KV head); the
    attention output is unchanged but the LSE of each row drops by softmax_scale * q . mean.
    head_dim 64, 128 or 256. Usage::

        x = hfa.quantize_fp8(q, k, v)
        out = hfa.attention(x.q, x.k, x.v, causal=True, **x.descales)
    """
    q8, k8, v8, qs, ks, vs = _quantize_fp8(q, k, v, block, hadamard, hadamard_seed,
                                           subtract_mean_key)
    if block:
        descales = {"q_block_descale": qs, "k_block_descale": ks, "v_descale": vs}
    else:
        descales = {"q_descale": qs, "k_descale": ks, "v_descale": vs}
    return Fp8Inputs(q8, k8, v8, descales)


class DecodePlan(NamedTuple):
    """What plan_decode returns: the split count for one set of decode shapes and the workspace
    it needs (allocated once). Pass it as attention_with_kvcache(..., plan=p) to every call with
    the same shapes (the layers of one decode step, CUDA graph replays) to skip the planning."""
    num_splits: int
    workspace: torch.Tensor


def plan_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                cache_seqlens: torch.Tensor, k: Optional[torch.Tensor] = None,
                v: Optional[torch.Tensor] = None, page_table: Optional[torch.Tensor] = None,
                cache_batch_idx: Optional[torch.Tensor] = None, causal: bool = False,
                num_splits: int = 0, k_descale: Optional[torch.Tensor] = None,
                v_descale: Optional[torch.Tensor] = None,
                window_size: Tuple[int, int] = (-1, -1)) -> DecodePlan:
    """The split count (num_splits=0: the library's heuristic) and workspace for these shapes
    (an e4m3 cache: pass its k_descale and v_descale too; a sliding window: its window_size, whose
    keys are what the splits share out)."""
    left, right = _window_pair(window_size)
    splits, nbytes = _plan_decode(q, k_cache, v_cache, k, v, cache_seqlens, page_table,
                                  cache_batch_idx, causal, num_splits, k_descale, v_descale,
                                  left, right)
    return DecodePlan(splits, torch.empty(nbytes, dtype=torch.uint8, device=q.device))


def attention_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None,
                           cache_seqlens: Optional[torch.Tensor] = None,
                           page_table: Optional[torch.Tensor] = None,
                           cache_batch_idx: Optional[torch.Tensor] = None, causal: bool = False,
                           softmax_scale: Optional[float] = None, num_splits: int = 0,
                           return_lse: bool = False, plan: Optional[DecodePlan] = None,
                           k_descale: Optional[torch.Tensor] = None,
                           v_descale: Optional[torch.Tensor] = None,
                           window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           sinks: Optional[torch.Tensor] = None):
    """Flash decode, as FlashAttention's flash_attn_with_kvcache: q (batch, seqlen_q, heads_q,
    head_dim) attends to the first cache_seqlens[b] (+ seqlen_new) keys of its sequence's cache.

    k_cache, v_cache: contiguous (batch_cache, capacity, heads_kv, head_dim), or paged
    (num_pages, page_size, heads_kv, head_dim) with page_table int32 (batch, max_pages), page_size
    a power of two. cache_seqlens: int32 (batch), required. cache_batch_idx: int32 (batch),
    contiguous caches only. k, v: (batch, seqlen_new, heads_kv, head_dim), written into the cache
    at cache_seqlens[b] ... before attending (in place; cache_seqlens is not advanced). causal:
    bottom-right aligned (new token i sees the cache and new tokens up to i). num_splits: 0 for the
    library's choice. plan: from plan_decode() for these shapes (then num_splits is the plan's).
    q bf16/fp16, head_dim 64/128/256; the cache (and k, v) of q's dtype, or torch.float8_e4m3fn
    with k_descale and v_descale, fp32 (batch, heads_kv): key j of sequence b, KV head h is
    k_cache's value times k_descale[b, h] (FlashAttention-3's convention); out has q's dtype.
    Variants, as hfa.attention takes them (n_b = the sequence's keys in place of seqlen_k):
    window_size=(left, right) (query i sees keys i + n_b - seqlen_q - left ... + right; -1
    unbounded; only the window's keys are read), softcap (cap * tanh(scores / cap)), sinks (fp32
    (heads_q) logits added to each row's denominator). A plan made for another window is still
    correct, its split count chosen for that window. Not differentiable. Under
    torch.compile(fullgraph=True) pass a plan made outside the compiled function (plan_decode is
    host code that dynamo does not trace). Returns out (and the fp32 LSE, (batch, heads_q,
    seqlen_q), with return_lse).
    """
    if cache_seqlens is None:
        raise ValueError("cache_seqlens: required (int32, (batch))")
    if plan is None:
        plan = plan_decode(q, k_cache, v_cache, cache_seqlens, k, v, page_table, cache_batch_idx,
                           causal, num_splits, k_descale, v_descale, window_size)
    left, right = _window_pair(window_size)
    out, lse = _attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table,
                                       cache_batch_idx, causal, softmax_scale, plan.num_splits,
                                       plan.workspace, k_descale, v_descale, left, right,
                                       float(softcap), sinks)
    return (out, lse) if return_lse else out


def merge_attention(o_parts, lse_parts, out_dtype: Optional[torch.dtype] = None):
    """Attention over a union of disjoint key sets from the results over each set, exactly:
    with O_i, LSE_i a row's output and log-sum-exp over key set i, LSE = log sum_i exp(LSE_i) and
    O = sum_i exp(LSE_i - LSE) O_i (in fp32). Returns (out, lse).

    o_parts: (num_parts, batch, seqlen, heads, head_dim) float32/bfloat16/float16, or a list of
    (batch, seqlen, heads, head_dim) tensors (stacked first); lse_parts: float32 (num_parts, batch,
    heads, seqlen) or a list of (batch, heads, seqlen), as attention(..., return_lse=True) gives
    them. head_dim 64, 128 or 256; 1 to 256 parts. A part whose LSE is -inf saw no key: its O is
    not read. out has out_dtype (default o_parts's dtype); lse is float32 (batch, heads, seqlen).
    Not differentiable (hfa.distributed.ring_attention has its own backward)."""
    if isinstance(o_parts, (list, tuple)):
        o_parts = torch.stack(list(o_parts))
    if isinstance(lse_parts, (list, tuple)):
        lse_parts = torch.stack(list(lse_parts))
    return _merge_attention(o_parts, lse_parts, out_dtype)


def list_kernels() -> List[dict]:
    """Every kernel of the library: name, description, what it supports."""
    return json.loads(torch.ops.hfa.list_kernels(False))


def list_backward_kernels() -> List[dict]:
    """Every backward kernel (what backward_kernel= accepts): name, description, what it supports."""
    return json.loads(torch.ops.hfa.list_kernels(True))


def _cuda_device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"device: hfa's workspace pools are on CUDA devices, not {d}")
    return torch.cuda.current_device() if d.index is None else d.index


def workspace_memory_reserved(device=None) -> int:
    """Bytes of device memory hfa's workspace pool holds on `device` (default: the current CUDA
    device): the backward's fp32 dQ accumulator and the forward's small plans come from it, and it
    keeps what they free for the next call instead of returning it to the driver at every
    synchronization. Not counted by torch.cuda.memory_allocated / memory_reserved."""
    return torch.ops.hfa.workspace_memory_reserved(_cuda_device_index(device))


def release_workspace_memory(device=None) -> None:
    """Returns the memory hfa's workspace pool keeps on `device` (default: the current CUDA device)
    to the driver, as torch.cuda.empty_cache() does for torch's allocator; what calls still in
    flight use stays."""
    torch.ops.hfa.release_workspace_memory(_cuda_device_index(device))


def select_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> str:
    """The kernel that kernel="auto" runs for these arguments on q's device."""
    return torch.ops.hfa.select_kernel(q, k, v, causal)


# FlashAttention-3's Python API on the functions above (after them: the module imports them).
from .flash_attn_interface import (flash_attn_func, flash_attn_qkvpacked_func,  # noqa: E402
                                   flash_attn_varlen_func, flash_attn_with_kvcache)
