"""Hugging Face transformers: attn_implementation="hfa".

    import hfa.integrations.transformers as hfa_hf
    hfa_hf.register()                       # once, before building the model
    model = AutoModelForCausalLM.from_config(config, attn_implementation="hfa")

register() adds hfa's attention to transformers' AttentionInterface (and, where transformers has
one, its AttentionMaskInterface: the mask handed to hfa is SDPA's, None when it is purely causal).
hfa's kernels take causal attention (bottom-right aligned) and GQA; padding (a 2-D or 4-D mask that
is causal + key padding) is handled by running each sequence on its valid tokens. Anything else is
refused by name: sliding windows, softcap, dropout, masks that are not causal + padding.
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


def _causal_padding_mask(keys, queries, sq, sk, causal):
    """The mask a causal (bottom-right) + key-padding attention allows, (b, sq, sk)."""
    i = torch.arange(sq, device=keys.device)[:, None]
    j = torch.arange(sk, device=keys.device)[None, :]
    base = (j <= i + (sk - sq)) if causal else torch.ones(sq, sk, dtype=torch.bool, device=keys.device)
    return base[None] & keys[:, None, :] & queries[:, :, None]


def hfa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                          sliding_window=None, softcap=None, **kwargs):
    """transformers' attention-function signature: query (b, heads_q, sq, d), key/value
    (b, heads_kv, sk, d); returns ((b, sq, heads_q, d), None)."""
    if dropout:
        raise NotImplementedError(f"hfa attention: dropout={dropout} is not supported")
    if sliding_window is not None:
        raise NotImplementedError(f"hfa attention: sliding_window={sliding_window} is not supported yet (issue 22)")
    if softcap is not None:
        raise NotImplementedError(f"hfa attention: softcap={softcap} is not supported yet (issue 22)")
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("hfa attention: attention sinks (s_aux) are not supported yet (issue 22)")
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    sq, sk = query.shape[2], key.shape[2]
    causal = bool(causal) and sq > 1  # one query token sees every cached key either way
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # (b, s, h, d) views
    if attention_mask is None:
        return attention(q, k, v, causal=causal, softmax_scale=scaling), None
    keys, queries = _key_and_query_validity(attention_mask, sq, sk)
    if attention_mask.dim() == 4:  # only causal + padding can be run as per-sequence attention
        allowed = attention_mask[:, 0] if attention_mask.dtype == torch.bool else attention_mask[:, 0] == 0
        if not torch.equal(allowed & queries[:, :, None], _causal_padding_mask(keys, queries, sq, sk, causal)):
            raise NotImplementedError("attention_mask: a mask other than causal + key padding is not "
                                      "supported by hfa")
    if bool(keys.all()) and bool(queries.all()):
        return attention(q, k, v, causal=causal, softmax_scale=scaling), None
    # Padding: each sequence on its own valid tokens (queries past the last valid one are padding
    # and come back as zeros).
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        kb, qb = keys[b].nonzero().squeeze(1), queries[b].nonzero().squeeze(1)
        if qb.numel() == 0:
            continue
        if kb.numel() == 0:
            continue  # no key: O = 0
        o = attention(q[b : b + 1, qb], k[b : b + 1, kb], v[b : b + 1, kb], causal=causal,
                      softmax_scale=scaling)
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
