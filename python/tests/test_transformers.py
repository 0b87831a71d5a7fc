"""attn_implementation="hfa" in Hugging Face transformers (hfa.integrations.transformers) on tiny
randomly initialised models built from configs (no download): logits of hfa in bf16 against an
fp32 SDPA model of the same weights, by the tolerance rule (error <= 2 x the error of bf16 SDPA +
atol), with and without left padding; greedy generate() equal to bf16 SDPA's (a differing token
must be a near-tie of the fp32 model); Mistral's sliding window, Gemma 2's softcap and
gpt-oss's sinks against the eager reference; what hfa lacks is refused by name."""
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


def gemma2_config():
    # Gemma 2: softcap on the attention logits, every other layer a sliding window.
    return transformers.Gemma2Config(vocab_size=512, hidden_size=256, intermediate_size=512,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=64, sliding_window=16,
                                     attn_logit_softcapping=20.0, max_position_embeddings=256)


def gpt_oss_config():
    # gpt-oss: attention sinks (s_aux), sliding-window layers; tiny MoE.
    return transformers.GptOssConfig(vocab_size=512, hidden_size=256, intermediate_size=256,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=64, sliding_window=16,
                                     num_local_experts=4, num_experts_per_tok=2,
                                     max_position_embeddings=256)


def models(config, reference="sdpa"):
    """(fp32 reference, bf16 reference, bf16 hfa), the same random weights: the reference is SDPA,
    or "eager" for models whose attention SDPA does not express (softcap, sinks). Each model gets
    its own copy of the config: the attention implementation is recorded in it and read at every
    call."""
    torch.manual_seed(0)
    ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=reference)
    if reference == "eager":  # random sinks, so that they matter (they are initialised to zero)
        with torch.no_grad():
            for name, param in ref.named_parameters():
                if name.endswith("sinks"):
                    param.uniform_(-1, 3)
    state = ref.state_dict()
    out = [ref.to("cuda").eval()]
    for impl in (reference, "hfa"):
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


CONFIGS = {
    "llama_gqa": (llama_config, "sdpa"),
    "mistral": (mistral_config, "sdpa"),
    "mistral_window": (lambda: mistral_config(sliding_window=16), "sdpa"),
    "gemma2_softcap_window": (gemma2_config, "eager"),
    "gpt_oss_sinks_window": (gpt_oss_config, "eager"),
}


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_reference(name, pad):
    config, reference = CONFIGS[name]
    if name.startswith("gpt_oss") and not hasattr(transformers, "GptOssConfig"):
        pytest.skip("this transformers has no gpt-oss")
    ref, base, got = models(config(), reference)
    ids, mask = inputs(pad)
    with torch.no_grad():
        r = ref(ids, attention_mask=mask).logits.double()
        b = base(ids, attention_mask=mask).logits.double()
        h = got(ids, attention_mask=mask).logits.double()
    valid = mask.bool()
    err, base_err = (h - r)[valid].abs().max().item(), (b - r)[valid].abs().max().item()
    assert err <= 2 * base_err + LOGIT_ATOL, f"logits: err {err:.3e} > 2 * {base_err:.3e} + {LOGIT_ATOL}"


@pytest.mark.parametrize("name", ["llama_gqa", "mistral_window"])
def test_greedy_generate_matches_sdpa(name):
    config, reference = CONFIGS[name]
    ref, base, got = models(config(), reference)
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
    # A bidirectional sliding window (a module that is not causal) is refused by name.
    module = torch.nn.Module()
    module.is_causal = False
    q = torch.randn(1, 4, 8, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="sliding_window"):
        hfa_hf.hfa_attention_forward(module, q, q, q, None, sliding_window=4)
    with pytest.raises(NotImplementedError, match="dropout"):
        hfa_hf.hfa_attention_forward(module, q, q, q, None, dropout=0.1)
