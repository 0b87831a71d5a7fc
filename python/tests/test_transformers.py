"""attn_implementation="hfa" in Hugging Face transformers (hfa.integrations.transformers) on tiny
randomly initialised models built from configs (no download): logits of hfa in bf16 against an
fp32 SDPA model of the same weights, by the tolerance rule (error <= 2 x the error of bf16 SDPA +
atol), with and without left padding; greedy generate() equal to bf16 SDPA's (a differing token
must be a near-tie of the fp32 model); models that need what hfa lacks refuse by name."""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
import hfa.integrations.transformers as hfa_hf  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
hfa_hf.register()
LOGIT_ATOL = 1e-2  # logits are O(1) here; bf16 rounding of a logit is ~4e-3


def llama_config():
    return transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, max_position_embeddings=256)


def mistral_config(sliding_window=None):
    return transformers.MistralConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=8,
                                      num_key_value_heads=2, head_dim=32 * 4,
                                      max_position_embeddings=256, sliding_window=sliding_window)


def models(config):
    """(fp32 SDPA reference, bf16 SDPA, bf16 hfa), the same random weights. Each model gets its own
    copy of the config: the attention implementation is recorded in it and read at every call."""
    torch.manual_seed(0)
    ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa")
    state = ref.state_dict()
    out = [ref.to("cuda").eval()]
    for impl in ("sdpa", "hfa"):
        m = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl)
        m.load_state_dict(state)
        out.append(m.to("cuda", torch.bfloat16).eval())
    return out


def inputs(pad):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 512, (3, 48), generator=g).cuda()
    mask = torch.ones_like(ids)
    if pad:
        mask[1, :7] = 0  # left padding
        mask[2, :30] = 0
        ids[mask == 0] = 0
    return ids, mask


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("config", [llama_config, mistral_config], ids=["llama_gqa", "mistral"])
def test_logits_match_sdpa(config, pad):
    ref, base, got = models(config())
    ids, mask = inputs(pad)
    with torch.no_grad():
        r = ref(ids, attention_mask=mask).logits.double()
        b = base(ids, attention_mask=mask).logits.double()
        h = got(ids, attention_mask=mask).logits.double()
    valid = mask.bool()
    err, base_err = (h - r)[valid].abs().max().item(), (b - r)[valid].abs().max().item()
    assert err <= 2 * base_err + LOGIT_ATOL, f"logits: err {err:.3e} > 2 * {base_err:.3e} + {LOGIT_ATOL}"


def test_greedy_generate_matches_sdpa():
    ref, base, got = models(llama_config())
    ids, mask = inputs(pad=True)
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = base.generate(ids, **kw)
        have = got.generate(ids, **kw)
    assert have.shape == want.shape
    for row in range(ids.shape[0]):
        diff = (have[row] != want[row]).nonzero()
        if diff.numel() == 0:
            continue
        t = diff[0].item()  # the first differing token must be a near-tie of the fp32 model
        prefix = want[row : row + 1, :t]
        with torch.no_grad():
            logits = ref(prefix, attention_mask=torch.cat(
                [mask[row : row + 1], torch.ones(1, t - ids.shape[1], dtype=mask.dtype, device="cuda")], 1)).logits[0, -1]
        gap = (logits[want[row, t]] - logits[have[row, t]]).abs().item()
        assert gap <= 2 * LOGIT_ATOL, f"row {row} token {t}: hfa {have[row, t].item()} vs sdpa {want[row, t].item()}, gap {gap:.3e}"


def test_refusals_name_the_feature():
    _, _, got = models(mistral_config(sliding_window=16))
    ids, mask = inputs(pad=False)
    with pytest.raises(NotImplementedError, match="sliding_window"), torch.no_grad():
        got(ids, attention_mask=mask)
    gemma = transformers.Gemma2Config(vocab_size=512, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=64,
                                      max_position_embeddings=256)
    model = transformers.AutoModelForCausalLM.from_config(gemma, attn_implementation="hfa")
    model = model.to("cuda", torch.bfloat16).eval()
    with pytest.raises(NotImplementedError, match="sliding_window|softcap"), torch.no_grad():
        model(ids, attention_mask=mask)
