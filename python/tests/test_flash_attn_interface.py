"""hfa's FlashAttention-3 functions (hfa.flash_attn_func and the rest): forward and gradients
against SDPA's math backend by the tolerance rule of test_attention.py, the packed forms against
the unpacked call bit for bit, the kvcache form against hfa.attention_with_kvcache, FP8 against
hfa.attention, and every unsupported argument refused by name."""
import pytest
import torch

import hfa
from hfa import (flash_attn_func, flash_attn_qkvpacked_func, flash_attn_varlen_func,
                 flash_attn_with_kvcache)
from test_attention import ATOL, _grads, quantize_per_head, reference_lse, sdpa_math, straightforward

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_flash_attn_func_forward_and_gradients(causal, dt):
    torch.manual_seed(11 + causal)
    b, sq, sk, hq, hkv, d = 2, 200, 333, 8, 2, 128
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    k, v = (torch.randn(b, sk, hkv, d, device="cuda", dtype=dt) for _ in range(2))
    dout = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    scale = 0.07
    out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_attn_probs=True)
    ref = sdpa_math(q.double(), k.double(), v.double(), causal, scale)
    base = straightforward(q, k, v, causal, scale).double()
    err, base_err = (out.double() - ref).abs().max().item(), (base - ref).abs().max().item()
    assert err <= 2 * base_err + ATOL[dt], f"out: err {err:.3e} > 2 * {base_err:.3e} + atol"
    ref_lse = reference_lse(q, k, causal, scale)
    finite = torch.isfinite(ref_lse)
    assert lse.shape == (b, hq, sq) and torch.equal(torch.isneginf(lse), ~finite)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= 1e-3
    got = _grads(lambda q, k, v: flash_attn_func(q, k, v, softmax_scale=scale, causal=causal), q, k, v, dout)
    want = _grads(lambda q, k, v: sdpa_math(q, k, v, causal, scale), q.float(), k.float(), v.float(), dout.float())
    base = _grads(lambda q, k, v: straightforward(q, k, v, causal, scale), q, k, v, dout)
    for name, g, r, bs in zip(("dq", "dk", "dv"), got, want, base):
        err, base_err = (g.float() - r).abs().max().item(), (bs.float() - r).abs().max().item()
        assert err <= 2 * base_err + ATOL[dt], f"{name}: err {err:.3e} > 2 * {base_err:.3e} + atol"


@pytest.mark.parametrize("gqa", [False, True])
def test_qkvpacked_equals_unpacked(gqa):
    """The packed form runs on views of qkv; with deterministic=True its output and its qkv
    gradient equal flash_attn_func's on the same (copied) q, k, v bit for bit."""
    torch.manual_seed(5)
    b, s, d = 2, 257, 64
    if gqa:
        hq, hkv = 8, 2
        qkv = torch.randn(b, s, hq + 2 * hkv, d, device="cuda", dtype=torch.bfloat16)
        split = lambda t: t.split([hq, hkv, hkv], dim=2)
        kwargs = dict(num_heads_q=hq)
    else:
        qkv = torch.randn(b, s, 3, 4, d, device="cuda", dtype=torch.bfloat16)
        split = lambda t: t.unbind(dim=2)
        kwargs = {}
    dout = torch.randn(b, s, 8 if gqa else 4, d, device="cuda", dtype=torch.bfloat16)
    packed = qkv.clone().requires_grad_()
    out = flash_attn_qkvpacked_func(packed, causal=True, deterministic=True, **kwargs)
    out.backward(dout)
    q, k, v = (t.contiguous().requires_grad_() for t in split(qkv))
    want = flash_attn_func(q, k, v, causal=True, deterministic=True)
    want.backward(dout)
    assert torch.equal(out, want)
    for got, g in zip(split(packed.grad), (q.grad, k.grad, v.grad)):
        assert torch.equal(got, g)


def test_fp8_through_flash_attn_func():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 256, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    (q8, qd), (k8, kd), (v8, vd) = (quantize_per_head(x, 4) for x in (q, k, v))
    out = flash_attn_func(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    want = hfa.attention(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want)


@pytest.mark.parametrize("page", [0, 64])
def test_with_kvcache_equals_attention_with_kvcache(page):
    torch.manual_seed(7)
    b, hq, hkv, d, cap = 3, 16, 4, 128, 1024
    if page:
        kc, vc = (torch.randn(b * cap // page, page, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        table = torch.randperm(b * cap // page, device="cuda").view(b, cap // page).to(torch.int32)
    else:
        kc, vc = (torch.randn(b, cap, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        table = None
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
    out, lse = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=700, page_table=table,
                                       return_softmax_lse=True)
    lens = torch.full((b,), 700, dtype=torch.int32, device="cuda")
    want, want_lse = hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, page_table=table,
                                                return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)  # (checked vs SDPA in test_decode.py)


def _qkv():
    return tuple(torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))


@pytest.mark.parametrize("name, kwargs", [
    ("qv", dict(qv=torch.zeros(1))),
    ("attention_chunk", dict(attention_chunk=64)),
    ("num_splits", dict(num_splits=4)),
    ("pack_gqa", dict(pack_gqa=True)),
    ("sm_margin", dict(sm_margin=8)),
])
def test_unsupported_arguments_are_refused_by_name(name, kwargs):
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match=f"flash_attn_func: {name}="):
        flash_attn_func(q, k, v, **kwargs)
    if name not in ("qv", "num_splits", "pack_gqa"):  # not arguments of the packed form
        with pytest.raises(NotImplementedError, match=f"flash_attn_qkvpacked_func: {name}="):
            flash_attn_qkvpacked_func(torch.stack((q, k, v), dim=2), **kwargs)


def test_varlen_and_kvcache_refusals():
    q, k, v = _qkv()
    cu = torch.tensor([0, 64], dtype=torch.int32, device="cuda")
    for name, kwargs in [("seqused_q", dict(seqused_q=cu[1:])), ("num_splits", dict(num_splits=2))]:
        with pytest.raises(NotImplementedError, match=f"flash_attn_varlen_func: {name}="):
            flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 64, 64, **kwargs)
    kc = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16)
    for name, kwargs in [("rotary_cos", dict(rotary_cos=torch.zeros(1))),
                         ("cache_leftpad", dict(cache_leftpad=torch.zeros(1))),
                         ("scheduler_metadata", dict(scheduler_metadata=torch.zeros(1)))]:
        with pytest.raises(NotImplementedError, match=f"flash_attn_with_kvcache: {name}="):
            flash_attn_with_kvcache(q, kc, kc, cache_seqlens=5, **kwargs)
    with pytest.raises(NotImplementedError, match="q_descale"):
        flash_attn_with_kvcache(q, kc, kc, cache_seqlens=5, q_descale=torch.ones(1, 2, device="cuda"))
    with pytest.raises(ValueError, match="cache_seqlens"):
        flash_attn_with_kvcache(q, kc, kc)
    with pytest.raises(ValueError, match="num_heads_q"):
        flash_attn_qkvpacked_func(torch.randn(1, 64, 6, 64, device="cuda", dtype=torch.bfloat16))


def test_kvcache_variants_window_softcap():
    """flash_attn_with_kvcache's window_size and softcap reach hfa's decode: the float64 reference
    of the definitions (test_variants.py) by the tolerance rule, and hfa.attention_with_kvcache's
    result bit for bit."""
    from test_variants import variant_attention
    gen = torch.Generator(device="cuda").manual_seed(31)
    q = torch.randn(2, 1, 16, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    kc, vc = (torch.randn(2, 600, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    lens = torch.tensor([600, 250], dtype=torch.int32, device="cuda")
    out = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, window_size=(100, 0), softcap=5.0)
    same = hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, window_size=(100, 0), softcap=5.0)
    assert torch.equal(out, same)
    for i, n in enumerate(lens.tolist()):
        args = (q[i:i + 1], kc[i:i + 1, :n], vc[i:i + 1, :n], 128 ** -0.5, (100, 0), False, 5.0)
        ref, _ = variant_attention(*(x.double() for x in args[:3]), *args[3:])
        base, _ = variant_attention(*args, lowp=True)
        err = (out[i:i + 1].double() - ref).abs().max().item()
        assert err <= 2 * (base.double() - ref).abs().max().item() + ATOL[torch.bfloat16], f"sequence {i}: {err:.3e}"
