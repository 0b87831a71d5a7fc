"""hfa: exact attention (FlashAttention) for NVIDIA GPUs, from PyTorch.

    import hfa
    out = hfa.attention(q, k, v, causal=True)          # q: (batch, seqlen, heads, head_dim)

The op is registered with torch.library as ``hfa::attention_fwd`` (with a fake implementation),
so ``torch.compile(fullgraph=True)`` traces it without graph breaks. Errors are the C++ library's
validation messages, raised as ValueError.
"""
from typing import List, Optional, Tuple

import torch

from . import _C  # the compiled binding; loads libhfa.so shipped next to it

__all__ = ["attention", "list_kernels", "select_kernel"]


def _check_rank(q: torch.Tensor) -> None:
    if q.dim() != 4:
        raise ValueError(f"q: expected rank 4 (batch, seqlen, heads, head_dim), got rank {q.dim()}")


@torch.library.custom_op("hfa::attention_fwd", mutates_args=())
def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   softmax_scale: Optional[float], kernel: str) -> Tuple[torch.Tensor, torch.Tensor]:
    _check_rank(q)
    out = torch.empty_like(q)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    _C.forward(q, k, v, out, lse, causal, softmax_scale, kernel)
    return out, lse


@_attention_fwd.register_fake
def _(q, k, v, causal, softmax_scale, kernel):
    _check_rank(q)
    out = torch.empty_like(q)
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: Optional[float] = None, kernel: str = "auto",
              return_lse: bool = False):
    """softmax(softmax_scale * q k^T [+ causal mask]) v.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim); bf16 or
    fp16 CUDA tensors on one device, head_dim contiguous. heads_q must be a multiple of heads_kv
    (GQA/MQA). causal is aligned bottom-right when seqlen_q != seqlen_k. softmax_scale defaults to
    1/sqrt(head_dim). kernel: a name from list_kernels(), or "auto". With return_lse, also returns
    the fp32 log-sum-exp of each row, shape (batch, heads_q, seqlen_q).
    """
    out, lse = torch.ops.hfa.attention_fwd(q, k, v, causal, softmax_scale, kernel)
    return (out, lse) if return_lse else out


def list_kernels() -> List[dict]:
    """Every kernel of the library: name, description, what it supports."""
    return _C.list_kernels()


def select_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> str:
    """The kernel that kernel="auto" runs for these arguments on q's device."""
    return _C.select_kernel(q, k, v, torch.empty_like(q), causal)
