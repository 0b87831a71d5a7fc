"""hfa.attention_varlen and flash_attn_varlen_func (packed variable-length batches, issue 22):
every sequence's rows against SDPA's math backend on that sequence alone, by the tolerance rule
of test_attention.py; the same rows as hfa.attention on the padded sequence; causal, GQA,
windows, softcap, sinks, seqused_k; errors by name; torch.compile; the backward refused."""
import pytest
import torch

import hfa
from hfa import flash_attn_varlen_func
from test_attention import ATOL, sdpa_math, straightforward

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def _packed(lens_q, lens_k, hq, hkv, d, dt, seed):
    torch.manual_seed(seed)
    q = torch.randn(sum(lens_q), hq, d, device="cuda", dtype=dt)
    k, v = (torch.randn(sum(lens_k), hkv, d, device="cuda", dtype=dt) for _ in range(2))
    cu = lambda lens: torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    return q, k, v, cu(lens_q), cu(lens_k)


def _sequences(cu_q, cu_k, used=None):
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        n_k = ck[b + 1] - ck[b] if used is None else used[b]
        yield b, slice(cq[b], cq[b + 1]), slice(ck[b], ck[b] + n_k)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_each_sequence_matches_sdpa(causal, dt, d):
    lens_q, lens_k = [17, 300, 1, 129, 64, 700], [33, 300, 5, 128, 200, 650]
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, 8, 2, d, dt, seed=3 + causal)
    scale = 0.09
    out, lse = hfa.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                    softmax_scale=scale, return_lse=True)
    assert out.shape == q.shape and lse.shape == (8, q.shape[0])
    for b, rq, rk in _sequences(cu_q, cu_k):
        qs, ks, vs = (t[r].unsqueeze(0) for t, r in ((q, rq), (k, rk), (v, rk)))
        ref = sdpa_math(qs.double(), ks.double(), vs.double(), causal, scale)[0]
        base = straightforward(qs, ks, vs, causal, scale).double()[0]
        err, base_err = (out[rq].double() - ref).abs().max().item(), (base - ref).abs().max().item()
        assert err <= 2 * base_err + ATOL[dt], f"sequence {b}: err {err:.3e} > 2 * {base_err:.3e} + atol"
        # The same rows as the dense call on that sequence alone (its lse too).
        dense, dense_lse = hfa.attention(qs, ks, vs, causal=causal, softmax_scale=scale, return_lse=True)
        assert (out[rq].float() - dense[0].float()).abs().max().item() <= 2 * ATOL[dt]
        torch.testing.assert_close(lse[:, rq], dense_lse[0], rtol=0, atol=1e-4, equal_nan=True)


def test_variants_and_seqused_k_match_the_dense_call():
    lens_q, lens_k, used = [100, 256, 31], [300, 256, 90], [250, 1, 90]
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, 4, 1, 64, torch.bfloat16, seed=9)
    sinks = torch.randn(4, device="cuda")
    seqused = torch.tensor(used, dtype=torch.int32, device="cuda")
    kw = dict(causal=True, window_size=(40, 0), softcap=3.0, sinks=sinks)
    out = hfa.attention_varlen(q, k, v, cu_q, cu_k, 256, 300, seqused_k=seqused, **kw)
    for b, rq, rk in _sequences(cu_q, cu_k, used):
        dense = hfa.attention(q[rq].unsqueeze(0), k[rk].unsqueeze(0), v[rk].unsqueeze(0), **kw)[0]
        assert (out[rq].float() - dense.float()).abs().max().item() <= 2 * ATOL[torch.bfloat16], b


def test_flash_attn_varlen_func_and_compile():
    lens = [70, 5, 190]
    q, k, v, cu, _ = _packed(lens, lens, 4, 4, 128, torch.bfloat16, seed=1)
    out, lse = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True,
                                      return_attn_probs=True)
    assert torch.equal(out, hfa.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True))
    compiled = torch.compile(lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, 190, 190, causal=True),
                             fullgraph=True)
    assert torch.equal(compiled(q, k, v), out)


def test_errors_name_the_argument():
    q, k, v, cu, _ = _packed([64, 64], [64, 64], 2, 2, 64, torch.bfloat16, seed=2)
    with pytest.raises(ValueError, match="cu_seqlens_q.*int32"):
        hfa.attention_varlen(q, k, v, cu.long(), cu, 64, 64)
    with pytest.raises(ValueError, match="cu_seqlens_k.*batch \\+ 1"):
        hfa.attention_varlen(q, k, v, cu, cu[:2], 64, 64)
    with pytest.raises(ValueError, match="q: expected rank 3"):
        hfa.attention_varlen(q.unsqueeze(0), k, v, cu, cu, 64, 64)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        hfa.attention_varlen(q, k, v, cu, cu, -1, 64)
    with pytest.raises(ValueError, match="cu_seqlens_q: kernel \\\"k5\\\" does not support variable-length"):
        hfa.attention_varlen(q, k, v, cu, cu, 64, 64, kernel="k5")


def test_backward_is_refused_until_it_exists():
    q, k, v, cu, _ = _packed([64, 30], [64, 30], 2, 2, 64, torch.bfloat16, seed=4)
    q.requires_grad_()
    out = hfa.attention_varlen(q, k, v, cu, cu, 64, 64)
    with pytest.raises(NotImplementedError, match="backward of variable-length batches"):
        out.sum().backward()
