"""hfa's torch binding against torch SDPA's math backend, its error paths, and torch.compile.

Tolerance (DESIGN.md): max|hfa - ref| <= 2 * max|base - ref| + atol, where ref is the math backend
on fp64-upcast inputs (bottom-right causal mask built explicitly) and base is attention computed
straightforwardly in the inputs' dtype (bf16/fp16 matmuls, fp32 softmax).
"""
import math
import random
import zlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import hfa

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

KERNELS = [k["name"] for k in hfa.list_kernels() if not k["fp8"]] + ["auto"]
ATOL = {torch.bfloat16: 1 / 512, torch.float16: 1 / 4096}


def bottom_right_mask(sq, sk, device):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (sk - sq)


def visible_mask(sq, sk, causal, device):
    """(mask, row_has_key): the bottom-right causal mask, except that rows with no visible key see
    every key (so softmax and its gradient stay finite); their output is zeroed afterwards, which
    also zeroes every gradient through them: hfa's definition (O = 0, no gradient)."""
    if not causal:
        return None, None
    mask = bottom_right_mask(sq, sk, device)
    row_has_key = mask.any(dim=1)
    return mask | ~row_has_key[:, None], row_has_key


def sdpa_math(q, k, v, causal, scale):
    """The reference: (batch, seqlen, heads, d) in and out, SDPA's math backend, bottom-right
    causal. Rows that see no key come back as 0 (SDPA gives NaN there), hfa's definition."""
    sq, sk, hq, hkv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    mask, row_has_key = visible_mask(sq, sk, causal, q.device)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale,
                                           enable_gqa=hq != hkv)
    o = o.transpose(1, 2)
    if mask is not None:
        o = o.masked_fill(~row_has_key[None, :, None, None], 0.0)
    return o


def straightforward(q, k, v, causal, scale):
    """The tolerance baseline: attention as a framework computes it in the inputs' dtype: scores
    from a bf16/fp16 matmul, softmax in fp32, P cast to the dtype, P V as a bf16/fp16 matmul."""
    sq, sk, hq, hkv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    kr, vr = (x.repeat_interleave(hq // hkv, dim=2).transpose(1, 2) for x in (k, v))
    s = (q.transpose(1, 2) @ kr.transpose(-1, -2)).float() * scale
    mask, row_has_key = visible_mask(sq, sk, causal, q.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype)
    o = (p @ vr).transpose(1, 2)
    if mask is not None:
        o = o.masked_fill(~row_has_key[None, :, None, None], 0.0)
    return o


def reference_lse(q, k, causal, scale):
    sq, sk, hq, hkv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    kr = k.double().repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q.double(), kr) * scale
    if causal:
        s = s.masked_fill(~bottom_right_mask(sq, sk, q.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)  # -inf for rows with no visible key


def random_case(rng):
    d = rng.choice([64, 128, 256])
    hkv = rng.choice([1, 2, 3])
    hq = hkv * rng.choice([1, 2, 6, 8])
    return dict(b=rng.choice([1, 2]), sq=rng.choice([1, 17, 129, 300, 1000]),
                sk=rng.choice([1, 17, 129, 257, 1000]), hq=hq, hkv=hkv, d=d,
                causal=rng.choice([False, True]),
                dtype=rng.choice([torch.bfloat16, torch.float16]))


CASES = [random_case(random.Random(seed)) for seed in range(24)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{b}_sq{sq}_sk{sk}_h{hq}x{hkv}_d{d}_c{causal:d}_{dtype}".format(**c).replace("torch.", ""))
@pytest.mark.parametrize("kernel", ["auto", "k1"])
def test_forward_matches_sdpa_math(case, kernel):
    torch.manual_seed(zlib.crc32(repr((kernel, str(case))).encode()))
    b, sq, sk, hq, hkv, d = (case[x] for x in ("b", "sq", "sk", "hq", "hkv", "d"))
    dt, causal = case["dtype"], case["causal"]
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    scale = 1 / math.sqrt(d)
    out, lse = hfa.attention(q, k, v, causal=causal, kernel=kernel, return_lse=True)
    ref = sdpa_math(q.double(), k.double(), v.double(), causal, scale)
    base = straightforward(q, k, v, causal, scale).double()
    err = (out.double() - ref).abs().max().item()
    base_err = (base - ref).abs().max().item()
    assert not out.isnan().any()
    assert err <= 2 * base_err + ATOL[dt], f"err {err:.3e} > 2 * {base_err:.3e} + atol"
    ref_lse = reference_lse(q, k, causal, scale)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~finite), "rows with no key must have LSE = -inf"
    if finite.any():
        assert (lse.double() - ref_lse)[finite].abs().max().item() < 1e-3


def test_non_contiguous_layouts():
    # q, k, v as slices of one packed (b, s, 3, h, d) buffer, and a (b, h, s, d) transposed view.
    qkv = torch.randn(2, 100, 3, 4, 64, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv.unbind(2)
    out = hfa.attention(q, k, v, causal=True)
    ref = sdpa_math(q.double(), k.double(), v.double(), True, 1 / 8)
    assert (out.double() - ref).abs().max().item() < 2e-2
    qt = torch.randn(2, 4, 100, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    out = hfa.attention(qt, qt, qt)
    ref = sdpa_math(qt.double(), qt.double(), qt.double(), False, 1 / 8)
    assert (out.double() - ref).abs().max().item() < 2e-2


def test_softmax_scale():
    q, k, v = (torch.randn(1, 50, 2, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = hfa.attention(q, k, v, softmax_scale=0.3)
    ref = sdpa_math(q.double(), k.double(), v.double(), False, 0.3)
    assert (out.double() - ref).abs().max().item() < 4e-3


def _qkv(**over):
    t = dict(q=(1, 64, 4, 64), k=(1, 64, 2, 64), v=(1, 64, 2, 64))
    t.update(over)
    return [torch.randn(*t[n], device="cuda", dtype=torch.bfloat16) for n in ("q", "k", "v")]


@pytest.mark.parametrize("mutate, message", [
    (lambda q, k, v: (q.cpu(), k, v), "q: tensor is on cpu"),
    (lambda q, k, v: (q, k.cpu(), v), "k: tensor is on cpu"),
    (lambda q, k, v: (q.float(), k.float(), v.float()), "q: dtype fp32 is not supported; use bf16, fp16 or e4m3"),
    (lambda q, k, v: (q.double(), k, v), "q: dtype Double is not supported"),
    (lambda q, k, v: (q, k.half(), v), "k: dtype fp16 does not match q's dtype bf16"),
    (lambda q, k, v: (q, k, v[:, :32]), "v: shape is 32 but k's is 64"),
    (lambda q, k, v: (q[..., ::2], k[..., ::2], v[..., ::2]), "q: head_dim stride is 2"),
    (lambda q, k, v: (q[:, :, :3], k, v), "heads_q (3) must be a multiple of heads_kv (2)"),
    (lambda q, k, v: (q[0], k, v), "q: expected rank 4"),
])
def test_errors_carry_the_library_message(mutate, message):
    q, k, v = mutate(*_qkv())
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hfa.attention(q, k, v)


def test_unknown_and_unsupported_kernel():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match='unknown forward kernel "k42"'):
        hfa.attention(q, k, v, kernel="k42")
    q, k, v = _qkv(q=(1, 64, 4, 96), k=(1, 64, 2, 96), v=(1, 64, 2, 96))
    with pytest.raises(ValueError, match='head_dim: 96 is not supported by kernel "k2"'):
        hfa.attention(q, k, v, kernel="k2")


def test_list_and_select_kernel():
    names = [k["name"] for k in hfa.list_kernels()]
    assert names[:2] == ["k1", "k2"]
    q, k, v = _qkv()
    assert hfa.select_kernel(q, k, v) in names


def test_torch_compile_fullgraph_matches_eager():
    q, k, v = _qkv()

    def block(q, k, v):
        return hfa.attention(q * 0.5, k, v, causal=True).float().sum(dim=-1)

    eager = block(q, k, v)
    compiled = torch.compile(block, fullgraph=True)(q, k, v)
    torch.testing.assert_close(compiled, eager)


def test_opcheck():
    q, k, v = _qkv()
    torch.library.opcheck(torch.ops.hfa.attention_fwd.default, (q, k, v, True, None, "auto"))


def test_export_matches_eager():
    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return hfa.attention(q, k, v, causal=True, window_size=(48, 0), softcap=30.0)

    q, k, v = _qkv()
    program = torch.export.export(Block(), (q, k, v))
    assert any(n.target is torch.ops.hfa.attention_fwd.default for n in program.graph.nodes)
    assert torch.equal(program.module()(q, k, v), Block()(q, k, v))


def test_ops_and_autograd_are_cpp_kernels():
    # The eager path never enters Python below hfa.attention: the op's CUDA and Autograd kernels
    # are libhfa_torch.so's (a torch.library.custom_op would show Python kernels here).
    for name in ("attention_fwd", "attention_varlen_fwd"):
        lines = torch._C._dispatch_dump(f"hfa::{name}").splitlines()
        for key in ("CUDA:", "Autograd[alias]:"):
            line = next((x for x in lines if x.startswith(key)), f"{key} none")
            assert "csrc/ops_attention.cpp" in line, line


# ---- Backward: gradients against SDPA's math backend in fp32 ------------------------------------

BWD_CASES = [
    dict(b=2, sq=129, sk=129, hq=4, hkv=4, d=64, causal=False, dtype=torch.bfloat16),
    dict(b=1, sq=300, sk=257, hq=6, hkv=2, d=128, causal=True, dtype=torch.bfloat16),
    dict(b=1, sq=17, sk=300, hq=8, hkv=1, d=128, causal=True, dtype=torch.float16),
    dict(b=2, sq=200, sk=70, hq=3, hkv=3, d=256, causal=True, dtype=torch.bfloat16),
    dict(b=1, sq=1000, sk=1000, hq=4, hkv=2, d=64, causal=False, dtype=torch.float16),
]


def _grads(fn, q, k, v, dout):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    fn(q, k, v).backward(dout)
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("case", BWD_CASES, ids=lambda c: "b{b}_sq{sq}_sk{sk}_h{hq}x{hkv}_d{d}_c{causal:d}_{dtype}".format(**c).replace("torch.", ""))
@pytest.mark.parametrize("backward_kernel", ["auto", "fa2", "bwd_sm90"])
def test_backward_matches_sdpa_math(case, backward_kernel):
    torch.manual_seed(zlib.crc32(repr(str(case)).encode()))
    b, sq, sk, hq, hkv, d = (case[x] for x in ("b", "sq", "sk", "hq", "hkv", "d"))
    dt, causal, scale = case["dtype"], case["causal"], 1 / math.sqrt(case["d"])
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    dout = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    fn = lambda q, k, v: hfa.attention(q, k, v, causal=causal, backward_kernel=backward_kernel)
    got = _grads(fn, q, k, v, dout)
    ref = _grads(lambda q, k, v: sdpa_math(q, k, v, causal, scale),
                 q.float(), k.float(), v.float(), dout.float())
    base = _grads(lambda q, k, v: straightforward(q, k, v, causal, scale), q, k, v, dout)
    for name, g, r, bs in zip(("dq", "dk", "dv"), got, ref, base):
        assert g.dtype == dt and g.shape == r.shape and not g.isnan().any(), name
        err = (g.float() - r).abs().max().item()
        base_err = (bs.float() - r).abs().max().item()
        assert err <= 2 * base_err + ATOL[dt], f"{name}: err {err:.3e} > 2 * {base_err:.3e} + atol"


def test_backward_kernels_listed_and_unknown_refused():
    names = [k["name"] for k in hfa.list_backward_kernels()]
    assert "fa2" in names and "bwd_sm90" in names
    q, k, v = (x.requires_grad_() for x in _qkv())
    out = hfa.attention(q, k, v, backward_kernel="k6")  # a forward-only kernel
    with pytest.raises(ValueError, match="unknown backward kernel"):
        out.float().sum().backward()


def test_workspace_memory_kept_until_released():
    # The backward's fp32 dQ accumulator comes from hfa's pool, kept across synchronizations.
    q, k, v = (x.requires_grad_() for x in _qkv())
    torch.cuda.synchronize()
    hfa.release_workspace_memory()
    assert hfa.workspace_memory_reserved() == 0
    hfa.attention(q, k, v).float().sum().backward()
    torch.cuda.synchronize()
    assert hfa.workspace_memory_reserved() >= 4 * q.numel()  # the dQ accumulator, fp32
    hfa.release_workspace_memory(q.device)
    assert hfa.workspace_memory_reserved(q.device.index) == 0
    with pytest.raises(ValueError, match="CUDA"):
        hfa.workspace_memory_reserved("cpu")


def test_backward_through_lse_is_an_error():
    q, k, v = (x.requires_grad_() for x in _qkv())
    out, lse = hfa.attention(q, k, v, return_lse=True)
    with pytest.raises(NotImplementedError, match="lse"):
        (out.float().sum() + lse.sum()).backward()


def test_backward_expanded_dout_and_compile():
    # out.sum().backward() hands an expanded (stride 0) dout; torch.compile traces the backward.
    q, k, v = (x.requires_grad_() for x in _qkv())
    hfa.attention(q, k, v, causal=True).sum().backward()
    eager = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    torch.compile(lambda q, k, v: hfa.attention(q, k, v, causal=True).sum(), fullgraph=True)(q, k, v).backward()
    for e, x in zip(eager, (q, k, v)):
        torch.testing.assert_close(x.grad, e, atol=2e-2, rtol=0)  # dq's fp32 atomics may reorder


def test_deterministic_backward_repeats_bit_for_bit():
    # GQA 4:1, sq != sk, causal, several KV blocks per Q block: dq sums over many KV blocks.
    torch.manual_seed(5)
    q = torch.randn(2, 700, 8, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(2, 900, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    fn = lambda q, k, v: hfa.attention(q, k, v, causal=True, deterministic=True)
    runs = [_grads(fn, q, k, v, dout) for _ in range(3)]
    for name, a, b, c in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(a, b) and torch.equal(b, c), name
    fast = _grads(lambda q, k, v: hfa.attention(q, k, v, causal=True), q, k, v, dout)
    for name, d, f in zip(("dq", "dk", "dv"), runs[0], fast):  # the same sums, another order
        torch.testing.assert_close(d, f, atol=2e-2, rtol=0, msg=name)
    # torch.compile runs the same deterministic backward: equal to eager bit for bit.
    compiled = torch.compile(fn, fullgraph=True)
    for name, d, c in zip(("dq", "dk", "dv"), runs[0], _grads(compiled, q, k, v, dout)):
        assert torch.equal(d, c), name


def test_fp32_gradients_are_the_unrounded_sums():
    """attention_bwd(grad_dtype=torch.float32): float32 dq, dk, dv that round to the bf16/fp16 call's
    gradients (deterministic mode: the same sums) and are not all representable in that dtype."""
    torch.manual_seed(6)
    for dt in (torch.bfloat16, torch.float16):
        q = torch.randn(2, 300, 8, 128, device="cuda", dtype=dt)
        k, v = (torch.randn(2, 333, 2, 128, device="cuda", dtype=dt) for _ in range(2))
        dout = torch.randn_like(q)
        out, lse = torch.ops.hfa.attention_fwd(q, k, v, True, None, "auto")
        bwd = lambda **kw: torch.ops.hfa.attention_bwd(q, k, v, out, dout, lse, True, None, True, **kw)  # noqa: E731
        low, f32 = bwd()[:3], bwd(grad_dtype=torch.float32)[:3]
        for name, a, b in zip(("dq", "dk", "dv"), low, f32):
            assert b.dtype == torch.float32 and b.shape == a.shape, name
            assert torch.equal(b.to(dt), a), name
            assert not torch.equal(b.to(dt).float(), b), name  # not rounded before the store
        with pytest.raises(ValueError, match="grad_dtype"):
            bwd(grad_dtype=torch.float16 if dt == torch.bfloat16 else torch.bfloat16)
        torch.library.opcheck(torch.ops.hfa.attention_bwd.default,
                              (q, k, v, out, dout, lse, True, None, True),
                              {"grad_dtype": torch.float32}, test_utils=("test_schema", "test_faketensor"))


def test_opcheck_autograd():
    q, k, v = (x.requires_grad_() for x in _qkv())
    torch.library.opcheck(torch.ops.hfa.attention_fwd.default, (q, k, v, True, None, "auto"),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


# ---- FP8 (k7): float8_e4m3fn q/k/v with per-(batch, KV head) descales ------------------------------

def quantize_per_head(x, heads_kv):
    """x (b, s, h, d) -> (e4m3 tensor, fp32 (b, heads_kv) descale), one scale per KV head's group."""
    b, s, h, d = x.shape
    g = x.float().reshape(b, s, heads_kv, h // heads_kv, d)
    descale = g.abs().amax(dim=(1, 3, 4)).clamp(min=1e-6) / 448
    x8 = (g / descale[:, None, :, None, None]).reshape(b, s, h, d).to(torch.float8_e4m3fn)
    return x8, descale


def dequantize(x8, descale):
    b, s, h, d = x8.shape
    hkv = descale.shape[1]
    return (x8.double().reshape(b, s, hkv, h // hkv, d) * descale.double()[:, None, :, None, None]).reshape(b, s, h, d)


FP8_CASES = [
    dict(b=2, sq=129, sk=129, hq=4, hkv=4, d=64, causal=False),
    dict(b=1, sq=300, sk=1000, hq=8, hkv=1, d=128, causal=True),
    dict(b=1, sq=1000, sk=257, hq=6, hkv=2, d=256, causal=True),
    dict(b=2, sq=17, sk=300, hq=4, hkv=2, d=128, causal=False),
]


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", FP8_CASES, ids=lambda c: "b{b}_sq{sq}_sk{sk}_h{hq}x{hkv}_d{d}_c{causal:d}".format(**c))
def test_fp8_matches_dequantized_reference(case, out_dtype):
    """k7 against SDPA math on the dequantized inputs (fp64); the yardstick is the straightforward
    FP8 attention: fp32 scores and softmax, P rounded to e4m3, fp32 P V."""
    torch.manual_seed(zlib.crc32(repr(str(case)).encode()))
    b, sq, sk, hq, hkv, d = (case[x] for x in ("b", "sq", "sk", "hq", "hkv", "d"))
    causal = case["causal"]
    (q8, qd), (k8, kd), (v8, vd) = (quantize_per_head(torch.randn(b, s, h, d, device="cuda"), hkv)
                                    for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    out, lse = hfa.attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                             out_dtype=out_dtype, return_lse=True)
    assert out.dtype == out_dtype and out.shape == q8.shape
    qr, kr, vr = dequantize(q8, qd), dequantize(k8, kd), dequantize(v8, vd)
    scale = 1 / math.sqrt(d)
    ref = sdpa_math(qr, kr, vr, causal, scale)
    # The yardstick, in fp32 with P through e4m3.
    krep, vrep = (x.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2) for x in (kr, vr))
    s = (qr.float().transpose(1, 2) @ krep.transpose(-1, -2)) * scale
    mask, row_has_key = visible_mask(sq, sk, causal, q8.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - m)
    base = ((p.to(torch.float8_e4m3fn).float() @ vrep) / p.sum(dim=-1, keepdim=True)).transpose(1, 2)
    if mask is not None:
        base = base.masked_fill(~row_has_key[None, :, None, None], 0.0)
    base = base.to(out_dtype).double()
    err = (out.double() - ref).abs().max().item()
    base_err = (base - ref).abs().max().item()
    assert not out.isnan().any()
    assert err <= 2 * base_err + ATOL[out_dtype], f"err {err:.3e} > 2 * {base_err:.3e} + atol"
    ref_lse = reference_lse(qr, kr, causal, scale)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~finite)
    if finite.any():
        # Hopper's FP8 tensor cores truncate the accumulation of Q K^T. On these N(0, 1) inputs each
        # row's LSE may be off by scale * max_j sum_c |q_c k_jc| / 2048 (measured on k7, with a factor
        # of 2; src/check/check.cpp holds every distribution to a model of the hardware instead).
        abs_dot = torch.einsum("bihd,bjhd->bhij", qr.abs(), kr.abs().repeat_interleave(hq // hkv, dim=2))
        allowance = scale * abs_dot.amax(dim=-1) / 2048
        excess = ((lse.double() - ref_lse).abs() - allowance)[finite]
        assert excess.max().item() < 1e-3, f"LSE off by {excess.max().item():.3e} beyond the allowance"


def test_fp8_errors():
    q, k, v = (torch.randn(1, 64, 2, 64, device="cuda").to(torch.float8_e4m3fn) for _ in range(3))
    d = torch.ones(1, 2, device="cuda")
    with pytest.raises(ValueError, match="q_descale: e4m3 inputs need fp32"):
        hfa.attention(q, k, v)
    with pytest.raises(ValueError, match='kernel "k6" takes bf16/fp16 inputs, not e4m3'):
        hfa.attention(q, k, v, q_descale=d, k_descale=d, v_descale=d, kernel="k6")
    with pytest.raises(ValueError, match="out_dtype"):
        hfa.attention(q, k, v, q_descale=d, k_descale=d, v_descale=d, out_dtype=torch.float32)
    qb = torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q_descale: only e4m3 inputs take descale factors"):
        hfa.attention(qb, qb, qb, q_descale=d)
    with pytest.raises(ValueError, match='kernel "k7" takes e4m3 inputs only'):
        hfa.attention(qb, qb, qb, kernel="k7")


def test_fp8_compiles():
    q, k, v = (torch.randn(1, 64, 2, 64, device="cuda").to(torch.float8_e4m3fn) for _ in range(3))
    d = torch.full((1, 2), 0.5, device="cuda")
    eager = hfa.attention(q, k, v, q_descale=d, k_descale=d, v_descale=d)
    compiled = torch.compile(lambda q, k, v: hfa.attention(q, k, v, q_descale=d, k_descale=d, v_descale=d),
                             fullgraph=True)(q, k, v)
    assert eager.dtype == torch.bfloat16
    torch.testing.assert_close(compiled, eager)


# ---- quantize_fp8 and k8 (block descales) -----------------------------------------------------------

QUANTIZE_OPTIONS = [dict(block=b, hadamard=h, subtract_mean_key=m)
                    for b, h, m in ((False, False, False), (True, False, False), (False, True, False),
                                    (True, True, False), (True, True, True))]


def dequantize_blocks(x8, descale):
    """x8 (b, s, h, d) e4m3, descale (b, h, ceil(s / 128)) -> fp64 values."""
    rows = descale.double().repeat_interleave(128, dim=2)[:, :, :x8.shape[1]]  # (b, h, s)
    return x8.double() * rows.transpose(1, 2)[..., None]


@pytest.mark.parametrize("opts", QUANTIZE_OPTIONS, ids=lambda o: "-".join(k for k, v in o.items() if v) or "per_head")
@pytest.mark.parametrize("causal", [False, True])
def test_quantize_fp8_then_attention(opts, causal):
    """quantize_fp8's outputs through hfa.attention ("auto": k8 for block scales, k7 otherwise)
    give the attention of the original bf16 inputs up to FP8 error; the scales are amax / 448."""
    torch.manual_seed(7)
    b, sq, sk, hq, hkv, d = 2, 300, 333, 6, 2, 128
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16) + 0.5  # a mean key to remove
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
    x = hfa.quantize_fp8(q, k, v, hadamard_seed=3, **opts)
    assert x.q.dtype == torch.float8_e4m3fn and x.q.shape == q.shape and x.k.shape == k.shape
    vd = dequantize(x.v, x.descales["v_descale"])
    torch.testing.assert_close(x.descales["v_descale"],
                               v.float().abs().amax(dim=(1, 3)) / 448, rtol=1e-6, atol=0)
    assert ((vd - v.double()).abs() <= v.double().abs() / 16 + 1e-4).all()
    if opts["block"]:
        qd = dequantize_blocks(x.q, x.descales["q_block_descale"])
        kd = dequantize_blocks(x.k, x.descales["k_block_descale"])
    else:
        qd, kd = dequantize(x.q, x.descales["q_descale"]), dequantize(x.k, x.descales["k_descale"])
    if not opts["hadamard"] and not opts["subtract_mean_key"]:
        assert ((qd - q.double()).abs() <= q.double().abs() / 16 + 1e-4).all()
    if opts["hadamard"]:  # orthogonal along head_dim: row norms are kept (up to e4m3 rounding)
        torch.testing.assert_close(qd.norm(dim=-1), q.double().norm(dim=-1), rtol=0.03, atol=0)
    out, lse = hfa.attention(x.q, x.k, x.v, causal=causal, return_lse=True, **x.descales)
    ref = sdpa_math(q.double(), k.double(), v.double(), causal, 1 / math.sqrt(d))
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    assert rel < 0.06, f"relative RMS error {rel:.3e}"
    # The kernel's LSE is that of the quantized (transformed, mean-subtracted) inputs exactly, up
    # to the FP8 tensor cores' truncated accumulation (test_fp8_matches_dequantized_reference).
    scale = 1 / math.sqrt(d)
    exact_lse = reference_lse(qd, kd, causal, scale)
    abs_dot = torch.einsum("bihd,bjhd->bhij", qd.abs(), kd.abs().repeat_interleave(hq // hkv, dim=2))
    allowance = scale * abs_dot.amax(dim=-1) / 2048
    excess = ((lse.double() - exact_lse).abs() - allowance).max().item()
    assert excess < 1e-3, f"LSE off by {excess:.3e} beyond the allowance"
    if not opts["subtract_mean_key"]:  # and near the original inputs' LSE (quantization error)
        ref_lse = reference_lse(q.double(), k.double(), causal, scale)
        assert (lse.double() - ref_lse).abs().max().item() < 0.15


def test_quantize_fp8_errors_and_compile():
    q = torch.randn(1, 64, 2, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q: head_dim is 96; quantize_fp8 takes 64, 128 or 256"):
        hfa.quantize_fp8(q, q, q)
    with pytest.raises(ValueError, match="q: dtype fp32; quantize_fp8 takes bf16 or fp16"):
        hfa.quantize_fp8(q.float(), q.float(), q.float())
    q = torch.randn(1, 200, 4, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 150, 2, 64, device="cuda", dtype=torch.float16)
    x = hfa.quantize_fp8(q, k, k)
    with pytest.raises(ValueError, match='q_block_descale: kernel "k7" takes per-\\(batch, heads_kv\\)'):
        hfa.attention(x.q, x.k, x.v, kernel="k7", **x.descales)
    with pytest.raises(ValueError, match="q_descale: give q_descale or q_block_descale, not both"):
        hfa.attention(x.q, x.k, x.v, q_descale=x.descales["v_descale"], **x.descales)
    eager = hfa.attention(x.q, x.k, x.v, **x.descales)
    f = torch.compile(lambda q, k, v: (lambda y: hfa.attention(y.q, y.k, y.v, **y.descales))(hfa.quantize_fp8(q, k, v)),
                      fullgraph=True)
    torch.testing.assert_close(f(q, k, k), eager)
    torch.library.opcheck(torch.ops.hfa.quantize_fp8.default, (q, k, k, True, True, 0, False),
                          test_utils=("test_schema", "test_faketensor"))
