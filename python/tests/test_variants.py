"""The score variants from PyTorch (issue 22): sliding window, softcap and attention sinks through
hfa.attention and flash_attn_func, forward and gradients (dq, dk, dv and the sinks' gradient)
against an explicit float64 reference written here from the definitions, by the tolerance rule of
test_attention.py (error <= 2 x the error of the same attention computed straightforwardly in the
inputs' dtype + atol)."""
import zlib

import pytest
import torch

import hfa
from hfa import flash_attn_func
from test_attention import ATOL

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def variant_attention(q, k, v, scale, window=(-1, -1), causal=False, softcap=0.0, sinks=None,
                      lowp=False):
    """(out, lse) from the definitions: scores scale q.k (softcap * tanh(scale q.k / softcap)),
    keys outside [i + sk - sq - left, i + sk - sq + right] (right = 0 with causal) masked, the
    sink's exp added to each row's denominator. Rows that see no key: O = 0 (and LSE = the sink
    or -inf). lowp: the tolerance baseline (scores and P in the inputs' dtype, softmax in fp32);
    else float64 (inputs upcast by the caller)."""
    sq, sk, hq, hkv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    kr, vr = (x.repeat_interleave(hq // hkv, dim=2) for x in (k, v))
    s = torch.einsum("bihd,bjhd->bhij", q, kr)
    s = s.float() if lowp else s
    s = softcap * torch.tanh(s * scale / softcap) if softcap > 0 else s * scale
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    left, right = window[0], 0 if causal else window[1]
    seen = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        seen &= j >= i + sk - sq - left
    if right >= 0:
        seen &= j <= i + sk - sq + right
    s = s.masked_fill(~seen, float("-inf"))
    columns = [s]
    if sinks is not None:
        columns.append(sinks.to(s.dtype)[None, :, None, None].expand(s.shape[0], hq, sq, 1))
    full = torch.cat(columns, dim=-1)
    lse = torch.logsumexp(full, dim=-1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.exp(s - safe[..., None])  # 0 for masked keys and for rows that see none
    if lowp:
        p = p.to(q.dtype)
    out = torch.einsum("bhij,bjhd->bihd", p, vr)
    return out, lse


CASES = [
    dict(window=(64, 0), causal=False, softcap=0.0, sinks=False),
    dict(window=(100, 37), causal=False, softcap=0.0, sinks=False),
    dict(window=(48, -1), causal=True, softcap=0.0, sinks=False),
    dict(window=(-1, -1), causal=False, softcap=3.0, sinks=False),
    dict(window=(-1, -1), causal=True, softcap=0.0, sinks=True),
    dict(window=(96, 0), causal=False, softcap=5.0, sinks=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["auto", "fa2"])  # forward and backward: k6 / bwd_sm90 on Hopper, or fa2
def test_variants_forward_and_gradients(case, d, dt, kernel):
    torch.manual_seed(zlib.crc32(repr((str(case), d, str(dt))).encode()))
    b, sq, sk, hq, hkv = 2, 300, 257, 6, 2
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, requires_grad=True)
    k, v = (torch.randn(b, sk, hkv, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(2))
    sinks = (torch.rand(hq, device="cuda") * 5 - 1).requires_grad_() if case["sinks"] else None
    dout = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    scale = d ** -0.5
    kw = dict(window=case["window"], causal=case["causal"], softcap=case["softcap"])
    out, lse = hfa.attention(q, k, v, causal=case["causal"], window_size=case["window"],
                             softcap=case["softcap"], sinks=sinks, return_lse=True, kernel=kernel,
                             backward_kernel=kernel)
    tensors = [q, k, v] + ([sinks] if sinks is not None else [])
    got = torch.autograd.grad(out, tensors, dout)

    dbl = [t.detach().double().requires_grad_() for t in tensors]
    ref, ref_lse = variant_attention(*dbl[:3], scale, sinks=dbl[3] if sinks is not None else None, **kw)
    want = torch.autograd.grad(ref, dbl, dout.double())
    low = [t.detach().clone().requires_grad_() for t in tensors]
    base, _ = variant_attention(*low[:3], scale, sinks=low[3] if sinks is not None else None, lowp=True, **kw)
    base_grads = torch.autograd.grad(base, low, dout)

    err, base_err = (out.double() - ref).abs().max().item(), (base.double() - ref).abs().max().item()
    assert err <= 2 * base_err + ATOL[dt], f"out: err {err:.3e} > 2 * {base_err:.3e} + atol"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~finite)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= 1e-3
    names = ["dq", "dk", "dv", "dsinks"]
    for name, g, r, bs in zip(names, got, want, base_grads):
        err, base_err = (g.double() - r).abs().max().item(), (bs.double() - r).abs().max().item()
        atol = ATOL[dt] + (sinks_rounding_allowance(ref, ref_lse, dbl[3], dout, dt) if name == "dsinks" else 0)
        assert err <= 2 * base_err + atol, f"{name}: err {err:.3e} > 2 * {base_err:.3e} + atol {atol:.3e}"


def sinks_rounding_allowance(ref_out, ref_lse, sinks, dout, dt):
    """What rounding O to the dtype can do to a sink's gradient, the C++ checker's allowance
    (src/check/check_backward.cpp): each dsinks value is one sum over b x sq rows, so the baseline's
    error can be small by luck (its roundings cancelling); the kernel's D = rowsum(dout * O) is
    computed from its rounded O. unit roundoff x max over heads of sum_rows P_sink |dout * O|."""
    unit = 2.0 ** -11 if dt == torch.float16 else 2.0 ** -8
    p_sink = torch.exp(sinks.detach()[None, :, None] - ref_lse.detach())  # (b, hq, sq)
    size = (dout.double() * ref_out.detach()).abs().sum(dim=-1).transpose(1, 2)  # (b, hq, sq)
    return unit * (p_sink * size).sum(dim=(0, 2)).max().item()


def test_flash_attn_func_takes_window_and_softcap():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 200, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    got = flash_attn_func(q, k, v, causal=True, window_size=(32, -1), softcap=10.0)
    want = hfa.attention(q, k, v, causal=True, window_size=(32, 0), softcap=10.0)
    assert torch.equal(got, want)  # the same call underneath: (32, -1) with causal is (32, 0)


def test_variant_errors_name_the_argument():
    q, k, v = (torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with pytest.raises(ValueError, match="window_right.*causal"):
        hfa.attention(q, k, v, causal=True, window_size=(8, 4))
    with pytest.raises(ValueError, match="softcap"):
        hfa.attention(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match="sinks"):
        hfa.attention(q, k, v, sinks=torch.zeros(3, device="cuda"))
    # a built bf16 kernel without windows (k5 in a full build; a subset build may have none)
    without = [x["name"] for x in hfa.list_kernels() if not x["window"] and not x["fp8"]]
    for name in without[:1]:
        with pytest.raises(ValueError, match=f"window_left.*{name}.*does not support"):
            hfa.attention(q, k, v, window_size=(16, 0), kernel=name)
    with pytest.raises(ValueError, match="window_size"):
        hfa.attention(q, k, v, window_size=(16,))


def test_variants_compile_fullgraph():
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    sinks = torch.zeros(2, device="cuda", requires_grad=True)
    fn = lambda q, k, v, s: hfa.attention(q, k, v, window_size=(32, 0), softcap=8.0, sinks=s)
    eager = fn(q, k, v, sinks)
    compiled = torch.compile(fn, fullgraph=True)(q, k, v, sinks)
    assert torch.equal(eager, compiled)
    compiled.sum().backward()
    assert sinks.grad is not None and q.grad is not None
