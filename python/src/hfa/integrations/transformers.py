"""Hugging Face transformers: attn_implementation="hfa".

    import hfa.integrations.transformers as hfa_hf
    hfa_hf.register()                       # once, before building the model
    model = AutoModelForCausalLM.from_config(config, attn_implementation="hfa")

register() adds hfa's attention to transformers' AttentionInterface (and, where transformers has
one, its AttentionMaskInterface: the mask handed to hfa is SDPA's, None when it is purely causal).
hfa's kernels take causal attention (bottom-right aligned), GQA, sliding windows (Mistral,
Gemma 2: the last sliding_window tokens, the query's own included), softcap (Gemma 2) and
attention sinks (gpt-oss's s_aux); padding (a 2-D or 4-D mask that is causal [+ window] + key
padding) is handled by running each sequence on its valid tokens. Anything else is refused by
name: dropout, a bidirectional sliding window, masks that are not of that form.
"""
import torch

from .. import attention

NAME = "hfa"


def _key_and_query_validity(mask: torch.Tensor, sq: int, sk: int):
    """(keys (b, sk), queries (b, sq)) as bool from a 2-D (b, sk) padding mask or a 4-D
    (b, 1 or h, sq, sk) boolean / additive one. A key is valid if some query may attend to it
    (padding is masked for every query); the queries are the last sq tokens, valid where their
    token is (a padding token's output is never used: it comes back as zeros)."""
    if mask.dim() == 2:
        keys = mask if mask.dtype == torch.bool else mask != 0
    elif mask.dim() == 4:
        allowed = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] == 0
        keys = allowed.any(dim=1)
    else:
        raise NotImplementedError(f"attention_mask: rank {mask.dim()} is not supported by hfa (2 or 4)")
    return keys, keys[:, sk - sq:]


def _causal_padding_mask(keys, queries, sq, sk, causal, window):
    """The mask a causal (bottom-right) [+ sliding window of `window` keys] + key-padding attention
    allows, (b, sq, sk)."""
    i = torch.arange(sq, device=keys.device)[:, None]
    j = torch.arange(sk, device=keys.device)[None, :]
    base = (j <= i + (sk - sq)) if causal else torch.ones(sq, sk, dtype=torch.bool, device=keys.device)
    if window is not None:
        base = base & (j > i + (sk - sq) - window)
    return base[None] & keys[:, None, :] & queries[:, :, None]


def hfa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                          sliding_window=None, softcap=None, **kwargs):
    """transformers' attention-function signature: query (b, heads_q, sq, d), key/value
    (b, heads_kv, sk, d); returns ((b, sq, heads_q, d), None)."""
    if dropout:
        raise NotImplementedError(f"hfa attention: dropout={dropout} is not supported")
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    sq, sk = query.shape[2], key.shape[2]
    causal = bool(causal)
    # transformers' sliding window of W keys: key j is seen by query i iff i - W < j <= i, so
    # hfa's window (W - 1, 0) (which is also right for a single query against a cache).
    window = (-1, -1)
    if sliding_window is not None:
        if not causal:
            raise NotImplementedError(f"hfa attention: sliding_window={sliding_window} without a causal "
                                      "mask is not supported")
        window = (int(sliding_window) - 1, 0)
    variants = dict(window_size=window, softcap=float(softcap or 0.0))
    s_aux = kwargs.get("s_aux")
    if s_aux is not None:  # gpt-oss's sinks, one logit per query head
        variants["sinks"] = s_aux.float()
    run = lambda q, k, v: attention(q, k, v, causal=causal and q.shape[1] > 1,
                                    softmax_scale=scaling, **variants)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # (b, s, h, d) views
    if attention_mask is None:
        return run(q, k, v), None
    keys, queries = _key_and_query_validity(attention_mask, sq, sk)
    if attention_mask.dim() == 4:  # only causal + padding can be run as per-sequence attention
        allowed = attention_mask[:, 0] if attention_mask.dtype == torch.bool else attention_mask[:, 0] == 0
        expected = _causal_padding_mask(keys, queries, sq, sk, causal and sq > 1, sliding_window)
        if not torch.equal(allowed & queries[:, :, None], expected):
            raise NotImplementedError("attention_mask: a mask other than causal [+ sliding window] + key "
                                      "padding is not supported by hfa")
    if bool(keys.all()) and bool(queries.all()):
        return run(q, k, v), None
    # Padding: each sequence on its own valid tokens (queries past the last valid one are padding
    # and come back as zeros).
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        kb, qb = keys[b].nonzero().squeeze(1), queries[b].nonzero().squeeze(1)
        if qb.numel() == 0:
            continue
        if kb.numel() == 0:
            continue  # no key: O = 0
        if sliding_window is not None and kb[-1] - kb[0] + 1 != kb.numel():
            # The window counts positions: dropping padding from the middle would move it.
            raise NotImplementedError("attention_mask: padding between valid tokens with a "
                                      "sliding window is not supported by hfa")
        o = run(q[b : b + 1, qb], k[b : b + 1, kb], v[b : b + 1, kb])
        out[b, qb] = o[0]
    return out, None


def register(name: str = NAME) -> None:
    """Registers hfa as attn_implementation=name (default "hfa") with transformers."""
    import transformers
    transformers.AttentionInterface.register(name, hfa_attention_forward)
    mask_interface = getattr(transformers, "AttentionMaskInterface", None)
    if mask_interface is not None:
        from transformers.masking_utils import sdpa_mask
        mask_interface.register(name, sdpa_mask)
