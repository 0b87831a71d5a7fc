"""Context parallelism: attention over a sequence sharded across GPUs (ring attention).

Each rank of a ``torch.distributed`` group (NCCL) holds a shard of the sequence: its queries and
the keys/values of the same positions. ``ring_attention`` passes the K/V shards around the ring
(rank r sends to r + 1 and receives from r - 1), overlapping each transfer with attention on the
shard in hand, and merges the partial results exactly through their LSE (``hfa.merge_attention``,
the kernel flash decode's splits use). The backward runs hfa's backward per block with the merged
output and LSE (so every block's gradient is exact) and its gradients in fp32 (unrounded, so the
sums round once), keeps dq local and sends each K/V block's dk/dv sums (fp32; the last hop in k's
dtype) around the ring behind the block until they are back at its owner.

Causal attention needs the zigzag layout: the sequence cut into 2 * world chunks, rank r holding
chunks r and 2 * world - 1 - r (``zigzag_shard``). Every rank then does the same work at every
step: its own shard causally at step 0, then either all its queries against the first half of
the block in hand (a block from a lower rank) or its second half of queries against the whole
block (from a higher rank). Without causal any sharding works; zigzag is as good as any.

    q_shard = hfa.distributed.zigzag_shard(q, rank, world)        # (batch, seqlen / world, heads, d)
    out_shard = hfa.distributed.ring_attention(q_shard, k_shard, v_shard, causal=True)
    out = hfa.distributed.zigzag_unshard(gathered_shards)          # back in sequence order

Shards may differ in length (a sequence that is no multiple of 2 * world: the chunks are
``torch.tensor_split``'s). The forward learns every rank's length with one all_gather (a host
synchronization) per call, which also checks that the ranks agree on batch, heads, head_dim and
causal. docs/PYTHON.md has the design and how it extends to more GPUs.
"""
from typing import List, Optional, Sequence

import torch
import torch.distributed as dist

from . import _library  # noqa: F401  (loads libhfa_torch.so)
from . import _fake  # noqa: F401

__all__ = ["ring_attention", "zigzag_shard", "zigzag_unshard", "zigzag_chunk_sizes"]

_attention_fwd = torch.ops.hfa.attention_fwd.default
_attention_bwd = torch.ops.hfa.attention_bwd.default
_merge_attention = torch.ops.hfa.merge_attention.default


# ---- The zigzag layout ---------------------------------------------------------------------------

def zigzag_chunk_sizes(seqlen: int, world: int) -> List[int]:
    """The lengths of the 2 * world chunks of a sequence of `seqlen` (torch.tensor_split's: the
    first seqlen % (2 * world) chunks one longer)."""
    if world < 1:
        raise ValueError(f"world: {world}; must be >= 1")
    n = 2 * world
    return [seqlen // n + (1 if i < seqlen % n else 0) for i in range(n)]


def zigzag_shard(x: torch.Tensor, rank: int, world: int, dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s shard of the full sequence `x` along `dim`: chunks rank and 2 * world - 1 -
    rank of 2 * world, concatenated (a new tensor)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank: {rank}; must be in [0, world = {world})")
    chunks = x.tensor_split(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


def zigzag_unshard(shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """The full sequence from every rank's shard (in rank order), the inverse of zigzag_shard."""
    world = len(shards)
    if world < 1:
        raise ValueError("shards: empty; give every rank's shard, in rank order")
    seqlen = sum(s.shape[dim] for s in shards)
    sizes = zigzag_chunk_sizes(seqlen, world)
    chunks = [None] * (2 * world)
    for r, s in enumerate(shards):
        first, second = sizes[r], sizes[2 * world - 1 - r]
        if s.shape[dim] != first + second:
            raise ValueError(f"shards[{r}]: length {s.shape[dim]} along dim {dim}; a zigzag shard of "
                             f"a sequence of {seqlen} over {world} ranks has {first + second}")
        chunks[r], chunks[2 * world - 1 - r] = s.split([first, second], dim=dim)
    return torch.cat(chunks, dim=dim)


# ---- The ring ------------------------------------------------------------------------------------

class _Ring:
    """This rank's place in the group's ring and every rank's shard length."""

    def __init__(self, group, q: torch.Tensor, k: torch.Tensor, causal: bool):
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.world) if group is not None \
            else (self.rank + 1) % self.world
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.world) if group is not None \
            else (self.rank - 1) % self.world
        # Every rank's shard length and the facts that must agree across ranks (a mismatch would
        # leave the transfers waiting for tensors of other sizes): one all_gather, one host sync.
        facts = [q.shape[1], q.shape[0], q.shape[2], k.shape[2], q.shape[3], int(causal)]
        if self.world == 1:
            every = [facts]
        else:
            mine = torch.tensor(facts, dtype=torch.int64, device=q.device)
            gathered = [torch.empty_like(mine) for _ in range(self.world)]
            dist.all_gather(gathered, mine, group=group)
            every = torch.stack(gathered).tolist()
        for r, theirs in enumerate(every):
            if theirs[1:] != facts[1:]:
                raise ValueError(
                    f"q: (batch, heads_q, heads_kv, head_dim, causal) = {tuple(theirs[1:])} on rank {r} "
                    f"but {tuple(facts[1:])} on rank {self.rank}; every rank of the ring must agree")
        self.lens = [theirs[0] for theirs in every]
        self.seqlen = sum(self.lens)
        sizes = zigzag_chunk_sizes(self.seqlen, self.world)
        # first[r]: the length of rank r's first chunk (chunk r) in the zigzag layout
        self.first = [sizes[r] for r in range(self.world)]

    def source(self, step: int) -> int:
        """The rank whose K/V block this rank holds at `step`."""
        return (self.rank - step) % self.world

    def exchange(self, send, recv):
        """Starts sending the tensors `send` to the next rank and receiving `recv` (as many, in the
        same order) from the previous one: one batch of NCCL transfers."""
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in send]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in recv]
        return dist.batch_isend_irecv(ops)

    def block_like(self, x: torch.Tensor, step: int, dtype=None):
        """An empty tensor shaped like `x` with the key count of the block held at `step`."""
        return x.new_empty((x.shape[0], self.lens[self.source(step)]) + tuple(x.shape[2:]),
                           dtype=dtype or x.dtype)

    def check_zigzag(self):
        for r, n in enumerate(self.lens):
            want = self.first[r] + zigzag_chunk_sizes(self.seqlen, self.world)[2 * self.world - 1 - r]
            if n != want:
                raise ValueError(f"q: rank {r}'s shard has {n} rows; causal ring attention needs the "
                                 f"zigzag layout (zigzag_shard), which gives it {want} of the "
                                 f"{self.seqlen}")


def _wait(reqs):
    for req in reqs:
        req.wait()


def _block_rows(ring: _Ring, step: int, causal: bool):
    """What this rank computes at `step` against the block from ring.source(step): (causal mask,
    its first query row, how many of the block's keys: None for all)."""
    src = ring.source(step)
    if not causal:
        return False, 0, None
    if step == 0:
        return True, 0, None               # its own shard: causal
    if src < ring.rank:
        return False, 0, ring.first[src]   # every query against the block's first chunk
    return False, ring.first[ring.rank], None  # the second chunk's queries against the whole block


def _pass_on(ring: _Ring, kv, step: int):
    """Starts sending the K/V block in hand to the next rank and receiving the next step's from the
    previous one: (the next step's block, the requests); (None, []) at the last step."""
    if step + 1 == ring.world:
        return None, []
    nxt = tuple(ring.block_like(x, step + 1) for x in kv)
    return nxt, ring.exchange(kv, nxt)


def _first_keys(kv, keys):
    """The block's K and V, or their first `keys` rows."""
    return kv if keys is None else tuple(x[:, :keys] for x in kv)


def _ring_forward(q, k, v, causal, softmax_scale, ring: _Ring):
    world = ring.world
    b, s, hq, d = q.shape
    o_parts = q.new_empty((world, b, s, hq, d))
    lse_parts = torch.full((world, b, hq, s), float("-inf"), dtype=torch.float32, device=q.device)
    kv = (k.contiguous(), v.contiguous())  # the block in hand (NCCL sends contiguous tensors)
    for step in range(world):
        nxt, reqs = _pass_on(ring, kv, step)
        mask, row0, keys = _block_rows(ring, step, causal)
        kb, vb = _first_keys(kv, keys)
        o, lse = _attention_fwd(q[:, row0:], kb, vb, mask, softmax_scale, "auto")
        o_parts[step, :, row0:] = o
        lse_parts[step, :, :, row0:] = lse
        _wait(reqs)
        kv = nxt
    return _merge_attention(o_parts, lse_parts, q.dtype)


def _ring_backward(dout, q, k, v, out, lse, causal, softmax_scale, deterministic, ring: _Ring):
    world = ring.world
    kv = (k.contiguous(), v.contiguous())
    dkv = None  # fp32 (dk, dv) sums of the block in hand, from the ranks it has visited
    dq = None
    dkv_reqs = []
    for step in range(world):
        nxt, kv_reqs = _pass_on(ring, kv, step)
        mask, row0, keys = _block_rows(ring, step, causal)
        kb, vb = _first_keys(kv, keys)
        # The block's gradients in fp32, unrounded: the sums over the ring round once, at the end.
        dq_b, dk_b, dv_b, _ = _attention_bwd(q[:, row0:], kb, vb, out[:, row0:], dout[:, row0:],
                                             lse[:, :, row0:].contiguous(), mask, softmax_scale,
                                             deterministic, grad_dtype=torch.float32)
        if step == 0:  # every row and every key of its own block
            contiguous = lambda x: x.contiguous()  # noqa: E731
            dq, dkv = contiguous(dq_b), (contiguous(dk_b), contiguous(dv_b))
        else:
            dq[:, row0:] += dq_b
            _wait(dkv_reqs)  # the block's sums from the ranks before, received into dkv
            n = dk_b.shape[1]
            dkv[0][:, :n] += dk_b
            dkv[1][:, :n] += dv_b
        # On to the next rank, which holds this block next step. The last step sends each block's
        # finished sums to its owner, which only casts them to k's dtype: sent in that dtype, half
        # the bytes of the one transfer that no compute hides.
        if world > 1:
            last = step + 1 == world
            send = tuple(x.to(k.dtype) for x in dkv) if last else dkv
            recv = tuple(ring.block_like(x, step + 1, k.dtype if last else torch.float32) for x in (k, v))
            dkv_reqs = ring.exchange(send, recv)
        _wait(kv_reqs)
        kv = nxt
        if world > 1:
            dkv = recv
    _wait(dkv_reqs)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, group, deterministic):
        ring = _Ring(group, q, k, causal)
        if causal:
            ring.check_zigzag()
        out, lse = _ring_forward(q, k, v, causal, softmax_scale, ring)
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.causal, ctx.softmax_scale, ctx.deterministic = ring, causal, softmax_scale, deterministic
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(dout.contiguous(), q, k, v, out, lse, ctx.causal,
                                    ctx.softmax_scale, ctx.deterministic, ctx.ring)
        return dq, dk, dv, None, None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   softmax_scale: Optional[float] = None, group=None, deterministic: bool = False,
                   return_lse: bool = False):
    """softmax(softmax_scale * Q K^T [+ causal mask]) V over a sequence sharded across the ranks of
    `group` (default: the world group; NCCL), for this rank's queries.

    q: (batch, shard_q, heads_q, head_dim), k, v: (batch, shard, heads_kv, head_dim): this rank's
    shard of the sequence (bf16/fp16 CUDA tensors, heads_q a multiple of heads_kv), the same
    positions for q, k and v. With causal=True the shards must be zigzag_shard's (the mask is that
    of the whole sequence). Returns this rank's rows of the output (and with return_lse the fp32
    (batch, heads_q, shard_q) LSE over the whole sequence, not differentiable). Differentiable with
    respect to q, k and v; the ranks must call it (and its backward) together. With
    deterministic=True the gradients are bit-identical from run to run for a given world size
    (hfa's deterministic backward per block; the ring sums in a fixed order).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name}: expected rank 4 (batch, shard, heads, head_dim), got rank {t.dim()}")
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        raise ValueError(f"k, v: shard lengths {k.shape[1]}, {v.shape[1]} differ from q's {q.shape[1]}; "
                         "each rank holds the queries, keys and values of the same positions")
    if not dist.is_initialized():
        raise ValueError("group: torch.distributed is not initialized (init_process_group with the "
                         "NCCL backend first)")
    out, lse = _RingAttention.apply(q, k, v, bool(causal), softmax_scale, group, bool(deterministic))
    return (out, lse) if return_lse else out
