"""hfa.attention_with_kvcache against SDPA's math backend on the gathered keys of each sequence
(the tolerance rule of test_attention.py), with contiguous and paged caches, appended keys,
cache_batch_idx, causal speculative tokens, e4m3 caches with descales; sliding windows, softcap
and sinks (against test_variants.py's reference); its error paths, torch.compile, opcheck and a
CUDA graph replay."""
import math
import zlib

import pytest
import torch

import hfa
from test_attention import ATOL, sdpa_math, straightforward, reference_lse
from test_variants import variant_attention

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def make_cache(b, cap, hkv, d, dt, page_size, gen):
    """(k_cache, v_cache, page_table, gather): gather(cache, b, n) returns sequence b's first n
    keys as (n, hkv, d)."""
    if page_size:
        pages_per_seq = -(-cap // page_size)
        n_pages = b * pages_per_seq + 2
        kc, vc = (torch.randn(n_pages, page_size, hkv, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
        table = torch.randperm(n_pages, device="cuda", generator=gen)[: b * pages_per_seq]
        table = table.view(b, pages_per_seq).to(torch.int32)

        def gather(cache, i, n):
            return cache[table[i].long()].reshape(-1, hkv, d)[:n]
        return kc, vc, table, gather
    kc, vc = (torch.randn(b, cap, hkv, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    return kc, vc, None, lambda cache, i, n: cache[i, :n]


CASES = [  # b, sq, hq, hkv, d, cap, page_size, new, causal, dtype
    (3, 1, 32, 8, 128, 700, 0, 0, False, torch.bfloat16),
    (3, 1, 32, 8, 128, 700, 16, 1, False, torch.bfloat16),
    (2, 4, 8, 1, 64, 333, 64, 4, True, torch.float16),
    (2, 16, 4, 4, 256, 513, 0, 16, True, torch.bfloat16),
    (4, 2, 12, 2, 128, 2100, 256, 2, True, torch.float16),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}_sq{}_h{}x{}_d{}_cap{}_page{}_new{}_c{:d}".format(*c[:9]))
def test_matches_sdpa_math(case):
    b, sq, hq, hkv, d, cap, page, new, causal, dt = case
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    kc, vc, table, gather = make_cache(b, cap, hkv, d, dt, page, gen)
    capacity = table.shape[1] * page if page else cap
    lens = torch.randint(0, capacity - new + 1, (b,), device="cuda", generator=gen, dtype=torch.int32)
    lens[0] = 0
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
    k = v = None
    if new:
        k, v = (torch.randn(b, new, hkv, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    kc_before, vc_before = kc.clone(), vc.clone()
    out, lse = hfa.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, page_table=table,
                                          causal=causal, return_lse=True)
    scale = 1 / math.sqrt(d)
    for i in range(b):
        n = int(lens[i]) + new
        ki, vi = gather(kc, i, n)[None], gather(vc, i, n)[None]
        if new:  # the appended keys are in their slots, the rest of the sequence as before
            torch.testing.assert_close(ki[0, int(lens[i]):], k[i], rtol=0, atol=0)
            torch.testing.assert_close(vi[0, int(lens[i]):], v[i], rtol=0, atol=0)
            torch.testing.assert_close(ki[0, : int(lens[i])], gather(kc_before, i, int(lens[i])), rtol=0, atol=0)
            torch.testing.assert_close(vi[0, : int(lens[i])], gather(vc_before, i, int(lens[i])), rtol=0, atol=0)
        qi = q[i : i + 1]
        ref = sdpa_math(qi.double(), ki.double(), vi.double(), causal, scale)
        base = straightforward(qi, ki, vi, causal, scale).double()
        err = (out[i : i + 1].double() - ref).abs().max().item()
        base_err = (base - ref).abs().max().item()
        assert err <= 2 * base_err + ATOL[dt], f"sequence {i}: err {err:.3e} > 2 * {base_err:.3e} + atol"
        ref_lse = reference_lse(qi, ki, causal, scale)
        got = lse[i : i + 1].double()
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isneginf(got), ~finite)
        if finite.any():
            assert (got[finite] - ref_lse[finite]).abs().max().item() <= 1e-3


VARIANT_CASES = [  # window, causal, softcap, sinks, sq, page, num_splits
    ((300, -1), False, 0.0, False, 1, 0, 0),
    ((100, 0), True, 0.0, False, 4, 64, 0),
    ((64, 5), False, 0.0, False, 3, 16, 3),
    ((-1, -1), False, 30.0, False, 1, 0, 0),
    ((-1, -1), True, 0.0, True, 2, 64, 0),
    ((200, -1), True, 20.0, True, 16, 0, 7),
]


@pytest.mark.parametrize("case", VARIANT_CASES, ids=lambda c: "w{}_{}_c{:d}_cap{}_s{:d}_sq{}_p{}_n{}".format(
    c[0][0], c[0][1], c[1], c[2], c[3], c[4], c[5], c[6]))
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_variants_match_reference(case, dt):
    """Sliding windows, softcap and sinks in decode (new tokens appended): each sequence against
    the float64 reference from the definitions over its gathered keys, by the tolerance rule."""
    window, causal, softcap, with_sinks, sq, page, splits = case
    b, hq, hkv, d, cap, new = 3, 16, 4, 128, 1500, min(sq, 2)
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((case, dt)).encode()))
    kc, vc, table, gather = make_cache(b, cap, hkv, d, dt, page, gen)
    capacity = table.shape[1] * page if page else cap
    lens = torch.randint(0, capacity - new + 1, (b,), device="cuda", generator=gen, dtype=torch.int32)
    lens[0] = 0  # with sinks: rows that see no key get O = 0, LSE = the sink
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
    k, v = (torch.randn(b, new, hkv, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    sinks = torch.rand(hq, device="cuda", generator=gen) * 5 - 1 if with_sinks else None
    out, lse = hfa.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, page_table=table,
                                          causal=causal, return_lse=True, num_splits=splits,
                                          window_size=window, softcap=softcap, sinks=sinks)
    scale = 1 / math.sqrt(d)
    for i in range(b):
        n = int(lens[i]) + new
        ki, vi = gather(kc, i, n)[None], gather(vc, i, n)[None]
        qi = q[i : i + 1]
        ref, ref_lse = variant_attention(qi.double(), ki.double(), vi.double(), scale, window, causal,
                                         softcap, None if sinks is None else sinks.double())
        base, _ = variant_attention(qi, ki, vi, scale, window, causal, softcap, sinks, lowp=True)
        err = (out[i : i + 1].double() - ref.double()).abs().max().item()
        base_err = (base.double() - ref.double()).abs().max().item()
        assert err <= 2 * base_err + ATOL[dt], f"sequence {i}: err {err:.3e} > 2 * {base_err:.3e} + atol"
        got = lse[i : i + 1].double()
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isneginf(got), ~finite)
        if finite.any():
            assert (got[finite] - ref_lse[finite]).abs().max().item() <= 1e-3


def test_variant_errors_name_the_argument():
    q = torch.randn(1, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(1, 64, 2, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((1,), 10, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="window_left"):
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, window_size=(-5, 0))
    with pytest.raises(ValueError, match="window_right"):
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, causal=True, window_size=(4, 3))
    with pytest.raises(ValueError, match="softcap"):
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, softcap=-1.0)
    with pytest.raises(ValueError, match="sinks"):
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, sinks=torch.zeros(3, device="cuda"))
    with pytest.raises(ValueError, match="window_size"):
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, window_size=(1, 2, 3))


@pytest.mark.parametrize("page", [0, 64])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_e4m3_cache_matches_sdpa_math(page, dt):
    """An e4m3 cache (and appended e4m3 keys) with per-(batch, KV head) descales: the reference
    attends to the dequantized keys and values in fp64."""
    b, sq, hq, hkv, d, cap, new = 3, 2, 16, 4, 128, 900, 2
    gen = torch.Generator(device="cuda").manual_seed(77 + page)
    kc, vc, table, gather = make_cache(b, cap, hkv, d, dt, page, gen)
    kc, vc = ((x.float() * 64).to(torch.float8_e4m3fn) for x in (kc, vc))
    k, v = ((torch.randn(b, new, hkv, d, device="cuda", generator=gen) * 64).to(torch.float8_e4m3fn)
            for _ in range(2))
    k_descale, v_descale = ((torch.rand(b, hkv, device="cuda", generator=gen) * 0.5 + 0.75) / 64
                            for _ in range(2))
    capacity = table.shape[1] * page if page else cap
    lens = torch.randint(0, capacity - new + 1, (b,), device="cuda", generator=gen, dtype=torch.int32)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=gen)
    out, lse = hfa.attention_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, page_table=table,
                                          causal=True, return_lse=True, k_descale=k_descale,
                                          v_descale=v_descale)
    assert out.dtype == dt
    scale = 1 / math.sqrt(d)
    for i in range(b):
        n = int(lens[i]) + new
        raw_k, raw_v = gather(kc, i, n), gather(vc, i, n)
        assert torch.equal(raw_k[int(lens[i]):].view(torch.uint8), k[i].view(torch.uint8))
        ki = (raw_k.double() * k_descale[i, :, None].double())[None]
        vi = (raw_v.double() * v_descale[i, :, None].double())[None]
        qi = q[i : i + 1]
        ref = sdpa_math(qi.double(), ki, vi, True, scale)
        base = straightforward(qi, ki.to(dt), vi.to(dt), True, scale).double()
        err = (out[i : i + 1].double() - ref).abs().max().item()
        base_err = (base - ref).abs().max().item()
        assert err <= 2 * base_err + ATOL[dt], f"sequence {i}: err {err:.3e} > 2 * {base_err:.3e} + atol"
        ref_lse = reference_lse(qi, ki, True, scale)
        assert (lse[i : i + 1].double() - ref_lse).abs().max().item() <= 1e-3
    with pytest.raises(ValueError, match="k_descale"):
        hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, page_table=table, v_descale=v_descale)
    with pytest.raises(ValueError, match="only e4m3 caches"):
        hfa.attention_with_kvcache(q, q, q, cache_seqlens=lens, k_descale=k_descale, v_descale=v_descale)


def test_cache_batch_idx_and_plan_reuse():
    gen = torch.Generator(device="cuda").manual_seed(5)
    kc, vc = (torch.randn(5, 300, 2, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    q = torch.randn(3, 1, 8, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    idx = torch.tensor([4, 0, 2], device="cuda", dtype=torch.int32)
    lens = torch.tensor([300, 17, 0], device="cuda", dtype=torch.int32)
    plan = hfa.plan_decode(q, kc, vc, lens, cache_batch_idx=idx, num_splits=3)
    assert plan.num_splits == 3
    out = hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, cache_batch_idx=idx, plan=plan)
    again = hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, cache_batch_idx=idx, num_splits=1)
    for i in range(3):
        n = int(lens[i])
        ki, vi = kc[idx[i].long(), :n][None], vc[idx[i].long(), :n][None]
        ref = sdpa_math(q[i : i + 1].double(), ki.double(), vi.double(), False, 1 / 8)
        if n == 0:
            assert out[i].abs().max().item() == 0
            continue
        base = straightforward(q[i : i + 1], ki, vi, False, 1 / 8).double()
        bound = 2 * (base - ref).abs().max().item() + ATOL[torch.bfloat16]
        assert (out[i : i + 1].double() - ref).abs().max().item() <= bound
        assert (again[i : i + 1].double() - ref).abs().max().item() <= bound


def test_errors_name_the_argument():
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(2, 128, 2, 64, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([5, 6], device="cuda", dtype=torch.int32)
    with pytest.raises(ValueError, match="cache_seqlens"):
        hfa.attention_with_kvcache(q, kc, kc)
    with pytest.raises(ValueError, match="cache_seqlens: dtype"):
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens.long())
    with pytest.raises(ValueError, match="page_size"):
        pk = torch.randn(8, 24, 2, 64, device="cuda", dtype=torch.bfloat16)
        hfa.attention_with_kvcache(q, pk, pk, cache_seqlens=lens,
                                   page_table=torch.zeros(2, 4, device="cuda", dtype=torch.int32))
    with pytest.raises(ValueError, match="v_new"):
        hfa.attention_with_kvcache(q, kc, kc, k=torch.randn(2, 1, 2, 64, device="cuda", dtype=torch.bfloat16),
                                   cache_seqlens=lens)
    with pytest.raises(ValueError, match="workspace"):
        small = hfa.DecodePlan(4, torch.empty(0, dtype=torch.uint8, device="cuda"))
        hfa.attention_with_kvcache(q, kc, kc, cache_seqlens=lens, plan=small)


def test_compile_opcheck_and_graph():
    gen = torch.Generator(device="cuda").manual_seed(9)
    kc, vc = (torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    q = torch.randn(2, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    lens = torch.tensor([1000, 333], device="cuda", dtype=torch.int32)
    eager = hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens)
    # Under torch.compile the plan is made outside the compiled region (plan_decode is host code).
    plan = hfa.plan_decode(q, kc, vc, lens)
    compiled = torch.compile(lambda q: hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, plan=plan),
                             fullgraph=True)(q)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    torch.library.opcheck(torch.ops.hfa.attention_with_kvcache.default,
                          (q, kc, vc, None, None, lens, None, None, False, None, plan.num_splits,
                           plan.workspace))
    sinks = torch.randn(32, device="cuda", generator=gen)  # the variants' arguments too
    torch.library.opcheck(torch.ops.hfa.attention_with_kvcache.default,
                          (q, kc, vc, None, None, lens, None, None, False, None, plan.num_splits,
                           plan.workspace, None, None, 100, 0, 30.0, sinks))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, plan=plan)
    lens.copy_(torch.tensor([17, 1024], dtype=torch.int32))
    graph.replay()
    torch.testing.assert_close(captured, hfa.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, plan=plan),
                               rtol=0, atol=0)
