"""hfa.attention_varlen and flash_attn_varlen_func (packed variable-length batches, issue 22):
every sequence's rows against SDPA's math backend on that sequence alone, by the tolerance rule
of test_attention.py; the same rows as hfa.attention on the padded sequence; causal, GQA,
windows, softcap, sinks, seqused_k; errors by name; torch.compile. Gradients (dq, dk, dv, the
sinks') against a float64 reference built sequence by sequence from the definitions
(test_variants.variant_attention), zero in rows no score reaches; deterministic mode; the
head dims without a backward refused by name."""
import pytest
import torch

import hfa
from hfa import flash_attn_varlen_func
from test_attention import ATOL, sdpa_math, straightforward
from test_variants import variant_attention

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


def _packed_reference(q, k, v, cu_q, cu_k, scale, used=None, sinks=None, lowp=False, **kw):
    """The packed output from variant_attention run on each sequence alone (float64 unless lowp;
    the caller upcasts), rows past the last sequence 0 (constant: no gradient)."""
    rows = []
    for b, rq, rk in _sequences(cu_q, cu_k, used):
        out, _ = variant_attention(q[rq].unsqueeze(0), k[rk].unsqueeze(0), v[rk].unsqueeze(0), scale,
                                   sinks=sinks, lowp=lowp, **kw)
        rows.append(out[0])
    tail = q.shape[0] - cu_q[-1].item()
    rows.append(q.new_zeros((tail,) + tuple(q.shape[1:])))
    return torch.cat(rows)


GRAD_CASES = [
    dict(causal=False, window=(-1, -1), softcap=0.0, sinks=False, used=None),
    dict(causal=True, window=(-1, -1), softcap=0.0, sinks=False, used=None),
    dict(causal=True, window=(40, -1), softcap=3.0, sinks=True, used=[250, 1, 90, 0]),
]


GRAD_PARAMS = [(c, d) for c in GRAD_CASES for d in (64, 128, 256)]


@pytest.mark.parametrize("case,d", GRAD_PARAMS,
                         ids=lambda x: "-".join(f"{k}={v}" for k, v in x.items()) if isinstance(x, dict) else f"d{x}")
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_gradients_match_reference(case, d, dt):
    lens_q, lens_k = [100, 256, 31, 7], [300, 256, 90, 40]
    q, k, v, cu_q, cu_k = _packed(lens_q, lens_k, 6, 2, d, dt, seed=11 + d)
    # Rows past the last sequence (3 queries, 5 keys): in no sequence, gradient 0.
    q, k, v = (torch.cat([t, torch.randn_like(t[:n])]) for t, n in ((q, 3), (k, 5), (v, 5)))
    sinks = torch.rand(6, device="cuda") * 5 - 1 if case["sinks"] else None
    used = case["used"]
    seqused = torch.tensor(used, dtype=torch.int32, device="cuda") if used else None
    tensors = [t.requires_grad_() for t in [q, k, v] + ([sinks] if sinks is not None else [])]
    dout = torch.randn_like(q)
    kw = dict(window=case["window"], causal=case["causal"], softcap=case["softcap"])
    scale = d ** -0.5
    out = hfa.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), seqused_k=seqused,
                               causal=case["causal"], window_size=case["window"],
                               softcap=case["softcap"], sinks=sinks)
    got = torch.autograd.grad(out, tensors, dout)

    dbl = [t.detach().double().requires_grad_() for t in tensors]
    ref = _packed_reference(*dbl[:3], cu_q, cu_k, scale, used, dbl[3] if sinks is not None else None, **kw)
    want = torch.autograd.grad(ref, dbl, dout.double())
    low = [t.detach().clone().requires_grad_() for t in tensors]
    base = _packed_reference(*low[:3], cu_q, cu_k, scale, used, low[3] if sinks is not None else None,
                             lowp=True, **kw)
    base_grads = torch.autograd.grad(base, low, dout)

    n = cu_q[-1].item()
    err = (out[:n].double() - ref[:n]).abs().max().item()
    base_err = (base[:n].double() - ref[:n]).abs().max().item()
    assert err <= 2 * base_err + ATOL[dt], f"out: err {err:.3e} > 2 * {base_err:.3e} + atol"
    for name, g, r, bs in zip(["dq", "dk", "dv", "dsinks"], got, want, base_grads):
        assert not g.isnan().any(), name
        err, base_err = (g.double() - r).abs().max().item(), (bs.double() - r).abs().max().item()
        atol = ATOL[dt] + (1e-6 * q.shape[0] if name == "dsinks" else 0)
        assert err <= 2 * base_err + atol, f"{name}: err {err:.3e} > 2 * {base_err:.3e} + atol"
    # Rows no score reaches are exactly 0: keys past seqused_k, rows past the last sequence.
    assert torch.all(got[0][n:] == 0) and torch.all(got[1][cu_k[-1]:] == 0)
    if used:
        for b, (u, k0, k1) in enumerate(zip(used, cu_k[:-1].tolist(), cu_k[1:].tolist())):
            assert torch.all(got[1][k0 + u:k1] == 0) and torch.all(got[2][k0 + u:k1] == 0), b


def test_deterministic_backward_and_compile():
    lens = [700, 33, 1300]
    q, k, v, cu, _ = _packed(lens, lens, 8, 2, 128, torch.bfloat16, seed=5)
    dout = torch.randn_like(q)

    def grads(fn):
        x = [t.detach().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(fn(*x), x, dout)

    call = lambda q, k, v, **kw: flash_attn_varlen_func(q, k, v, cu, cu, 1300, 1300, causal=True, **kw)
    runs = [grads(lambda *x: call(*x, deterministic=True)) for _ in range(3)]
    for a, b in zip(runs[0], runs[1]):
        assert torch.equal(a, b)
    for a, b in zip(runs[0], runs[2]):
        assert torch.equal(a, b)
    fast = grads(call)
    for a, b in zip(runs[0], fast):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=0)  # dq's fp32 atomics may reorder
    compiled = torch.compile(lambda q, k, v: call(q, k, v, deterministic=True), fullgraph=True)
    for a, b in zip(runs[0], grads(compiled)):
        assert torch.equal(a, b)


def test_opcheck_autograd():
    q, k, v, cu, _ = _packed([64, 30], [64, 30], 2, 2, 64, torch.bfloat16, seed=4)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch.ops.hfa.attention_varlen_fwd.default,
                          (q, k, v, cu, cu, 64, 64, None, True, None, "auto"),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
