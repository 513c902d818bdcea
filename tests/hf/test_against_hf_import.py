"""Hugging Face directories into lab: models made here from transformers' config classes with random weights (no
hub) import with logits equal to transformers' (1e-4, fp32); lab -> HF -> lab is bit-exact for every family; a
directory lab cannot reproduce is one error naming what is supported."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_against_hf_export import (
    CASES,
    MARIAN_LAYOUT,
    PAIRS,
    SPECIALS,
    TEXT,
    TRANSLATORS,
    _model,
    _perturbed,
    _tokenizer,
)

from lab.data.tokenizers import HFTokenizer
from lab.errors import LabError
from lab.hf.exporting import export
from lab.hf.importing import load
from lab.models.encoder import EncoderClassifier, MaskedLM
from lab.models.seq2seq import EncoderDecoder

transformers = pytest.importorskip("transformers")

BERT_LAYOUT = dict(positions="learned", norm="layernorm", norm_placement="post", ffn="gelu", embed_norm=True)


def _same_model(a, b):
    """Every tensor bit-for-bit, and the settings (the init stds are not part of a saved model)."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert [k for k in sa if not torch.equal(sa[k], sb[k])] == []
    ca, cb = vars(a.cfg).copy(), vars(b.cfg).copy()
    for init in ("init_std", "embed_init_std"):  # how training starts: not part of a saved model
        ca.pop(init), cb.pop(init)
    moe_a, _ = ca.pop("moe"), cb.pop("moe")
    assert ca == cb
    if moe_a is not None:  # the settings that change the function (the rest are training settings)
        for layer_a, layer_b in zip(a.decoder.layers, b.decoder.layers):
            if not hasattr(layer_a.ffn, "router"):  # a dense layer between MoE ones (every_n > 1)
                assert not hasattr(layer_b.ffn, "router")
                continue
            assert layer_a.ffn.renormalize == layer_b.ffn.renormalize
            for k in ("num_experts", "top_k", "capacity_factor_eval", "gate", "router", "num_shared"):
                assert getattr(layer_a.ffn.moe, k) == getattr(layer_b.ffn.moe, k), k


@pytest.mark.parametrize("case", list(CASES))
def test_lm_round_trip_is_bit_exact(case, tmp_path):
    _, kind, layout = CASES[case]
    tok = _tokenizer(kind)
    model = _model(tok.vocab_size, **layout)
    export(model, tok, {}, tmp_path)
    back = load(tmp_path)
    _same_model(model, back.model)
    ids = torch.randint(0, tok.vocab_size, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(back.model(ids), model(ids))
    assert back.tokenizer.encode(TEXT) == tok.encode(TEXT)


@pytest.mark.parametrize(("ffn", "placement"), [("relu", "post"), ("gelu", "post"), ("relu", "pre"), ("gelu", "pre")])
def test_translator_round_trip_is_bit_exact(ffn, placement, tmp_path):
    """Marian (post-norm) and Pegasus (pre-norm, its final norms too)."""
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    torch.manual_seed(0)
    model = _perturbed(EncoderDecoder(tok.vocab_size, 0, 1, 2, d_model=32, n_layers=2, n_heads=4, max_seq_len=64,
                                      init_std=0.1, ffn=ffn, bias=ffn == "relu", tie_embeddings=ffn == "relu",
                                      **{**MARIAN_LAYOUT, "norm_placement": placement}))
    export(model, tok, {}, tmp_path)
    back = load(tmp_path).model
    _same_model(model, back)
    assert (back.pad_id, back.bos_id, back.eos_id) == (0, 1, 2)


@pytest.mark.parametrize("case", [c for c in TRANSLATORS if c.startswith(("t5", "switch"))])
def test_t5_and_switch_round_trip_is_bit_exact(case, tmp_path):
    """T5's layout, with Switch experts or not: the relative position tables, the experts and the shared embedding
    (tied: the file's lm_head is its own copy, which comes back as the one tied parameter) come back bit for bit."""
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    layout, _ = TRANSLATORS[case]
    torch.manual_seed(0)
    model = _perturbed(EncoderDecoder(tok.vocab_size, 0, 1, 2, d_model=32, n_layers=4, n_heads=4, max_seq_len=64,
                                      **{"init_std": 0.1, **layout}))
    export(model, tok, {}, tmp_path)
    back = load(tmp_path).model
    _same_model(model, back)
    assert (back.lm_head.weight is back.src_embed.tokens.weight) == model.cfg.tie_embeddings
    src = torch.randint(3, tok.vocab_size, (2, 15), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(3, tok.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(back(src, tgt), model(src, tgt))


@pytest.mark.parametrize("kind", ["mlm", "classifier", "mlm-erf-eps"])
def test_encoder_round_trip_is_bit_exact(kind, tmp_path):
    tok = HFTokenizer.train([TEXT] * 20, SPECIALS, vocab_size=200, kind="wordpiece")
    torch.manual_seed(0)
    erf = dict(ffn="gelu_erf", norm_eps=1e-12) if kind == "mlm-erf-eps" else {}  # released BERT's settings
    common = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=64, init_std=0.1, dropout=0.1, **{**BERT_LAYOUT, **erf})
    model = _perturbed(EncoderClassifier(tok.vocab_size, 0, 3, pooling="bert", classifier_dropout=0.1, **common)
                       if kind == "classifier" else MaskedLM(tok.vocab_size, 0, 4, tie_embeddings=False, **common))
    export(model, tok, {}, tmp_path)
    back = load(tmp_path).model
    _same_model(model, back)
    if kind.startswith("mlm"):
        assert back.mask_id == 4
        assert (back.mlm_head.approximate, back.mlm_head.norm.eps) == (model.mlm_head.approximate, model.mlm_head.norm.eps)


# ------------------------------------------------------------------ models made by transformers, random weights


def _randomised(model):
    """transformers initialises norms to 1 and biases to 0: random values so a mapping error shows."""
    torch.manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # Marian's sinusoidal table: computed, not learned
                continue
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if p.dim() == 1 and (p == 1).all() else 0.0))
    return model.eval()


def _save(hf, tok, out, shard=None):
    hf.save_pretrained(out, **({"max_shard_size": shard} if shard else {}))
    assert (out / "model.safetensors.index.json").is_file() == bool(shard)
    tok.backend.save(str(out / "tokenizer.json"))
    return out


def _compare(out, inputs, hf):
    imported = load(out)
    with torch.no_grad():
        ours = imported.model(*inputs)
        theirs = hf(*inputs).logits
    assert ours.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    return imported


@pytest.fixture(scope="module")
def bpe():
    return HFTokenizer.train([TEXT] * 20, ["<|endoftext|>"], vocab_size=300, kind="bpe")


@pytest.mark.parametrize("name", ["gpt2", "gpt2-eps", "gpt2-erf", "llama", "llama-bias-tied", "llama-eps-rope",
                                  "llama-gqa-bias", "llama3-rope-scaling", "llama-head-dim", "mixtral", "mixtral-gqa",
                                  "mistral-gqa", "mistral-window", "qwen3", "qwen3-tied-eps-rope", "qwen3-window",
                                  "apertus", "apertus-tanh-tied-eps-rope"])
def test_a_transformers_lm_imports_with_its_logits(name, bpe, tmp_path, caplog):
    """-eps / -rope: a norm epsilon and a rotary base far from lab's defaults (Llama 2's 1e-5, Llama 3's 5e5);
    -gqa: grouped-query attention (Llama 3, Mistral, Mixtral), 4 query heads sharing 2 key/value heads;
    mistral-window: a sliding window shorter than the positions (Mistral 7B v0.1's 4096 of 32768) is the context;
    llama3-rope-scaling: Llama 3.1's rope_type llama3 (head_dim 8, 64 original positions: a rotary pair in each of
    its three regimes), with GQA; -head-dim / qwen3: heads of head_dim 16, not hidden_size / heads = 8 (Qwen3-0.6B:
    128, not 1024 / 16); qwen3: QK-norm (its gains random, as every norm's here), GQA, untied;
    qwen3-window: use_sliding_window with the second layer sliding (max_window_layers=1), a window of 16;
    apertus: QK-norm, ReLU², GQA, head_dim 16, untied, ApertusConfig's own rotary settings (llama3 scaling, theta
    1.2e7), then its config.json without them (ApertusConfig's defaults); -tanh: the tanh GELU."""
    V = bpe.vocab_size
    small = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                 num_key_value_heads=4, max_position_embeddings=64, rms_norm_eps=1e-6)
    if name == "gpt2":
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                                                                  n_positions=64, activation_function="gelu_new"))
    elif name == "gpt2-erf":  # activation_function "gelu": the exact GELU of released GPT-2 checkpoints
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                                  activation_function="gelu"))
    elif name == "gpt2-eps":
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                                  activation_function="gelu_new", layer_norm_epsilon=0.01))
    elif name == "llama-eps-rope":
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**small, "rms_norm_eps": 0.01}, rope_theta=50.0))
    elif name == "llama3-rope-scaling":
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**small, "num_key_value_heads": 2,
                                                                       "max_position_embeddings": 128}, rope_parameters=rope))
    elif name == "llama-head-dim":
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**small, "num_key_value_heads": 2}, head_dim=16))
    elif name.startswith("qwen3"):
        over = {"qwen3": dict(num_key_value_heads=2, tie_word_embeddings=False),
                "qwen3-tied-eps-rope": dict(rms_norm_eps=0.01, tie_word_embeddings=True, rope_theta=50.0),
                "qwen3-window": dict(use_sliding_window=True, sliding_window=16, max_window_layers=1)}[name]
        hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**{**small, "head_dim": 16, **over}))
    elif name.startswith("apertus"):
        over = {"apertus": dict(hidden_act="relu2", head_dim=16, num_key_value_heads=2, tie_word_embeddings=False,
                                rms_norm_eps=1e-5),  # ApertusConfig's
                "apertus-tanh-tied-eps-rope": dict(hidden_act="gelu_pytorch_tanh", rms_norm_eps=0.01, tie_word_embeddings=True,
                                                   rope_parameters={"rope_type": "default", "rope_theta": 50.0})}[name]
        hf = transformers.ApertusForCausalLM(transformers.ApertusConfig(**{**small, **over}))
    elif name == "llama-gqa-bias":
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**small, "num_key_value_heads": 2},
                                                                    attention_bias=True, mlp_bias=True))
    elif name.startswith("llama"):
        bias = name == "llama-bias-tied"
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**small, attention_bias=bias, mlp_bias=bias,
                                                                    tie_word_embeddings=bias))
    elif name.startswith("mistral"):  # MistralConfig's own sliding window (4096) is longer than these 64 positions
        window = {"sliding_window": 16} if name == "mistral-window" else {}
        hf = transformers.MistralForCausalLM(transformers.MistralConfig(**{**small, "num_key_value_heads": 2}, **window))
    else:
        kv = 2 if name == "mixtral-gqa" else 4
        hf = transformers.MixtralForCausalLM(transformers.MixtralConfig(**{**small, "num_key_value_heads": kv},
                                                                        num_local_experts=4, num_experts_per_tok=2,
                                                                        rope_theta=10000.0))
    hf = _randomised(hf)
    out = _save(hf, bpe, tmp_path, shard="40KB" if name == "llama" else None)  # a large model's several files
    length = 16 if name.endswith("-window") else 40
    ids = torch.randint(0, V, (2, length), generator=torch.Generator().manual_seed(1))
    with caplog.at_level("INFO", logger="lab"):
        imported = _compare(out, (ids,), hf)
    assert imported.tokenizer.encode(TEXT) == bpe.encode(TEXT)
    if name.startswith("mistral"):  # export picks the Llama class for this layout: Mistral's mapping back, here
        from lab.hf.mistral import Mistral

        config, back = Mistral().to_hf(imported.model, {})
        assert config["num_key_value_heads"] == 2 and back.keys() == hf.state_dict().keys()
        assert [k for k, v in back.items() if not torch.equal(v, hf.state_dict()[k])] == []
    if name == "llama3-rope-scaling":  # Llama 3.1's released config.json form: rope_theta + rope_scaling
        config = json.loads((out / "config.json").read_text())
        rope = config.pop("rope_parameters")
        config |= {"rope_theta": rope.pop("rope_theta"), "rope_scaling": rope}
        (out / "config.json").write_text(json.dumps(config))
        assert load(out).model.cfg.rope_scaling == imported.model.cfg.rope_scaling is not None
    if name.startswith("qwen3"):
        assert (imported.hf_class, imported.model.cfg.head_dim, imported.model.cfg.qk_norm) == ("Qwen3ForCausalLM", 16, True)
    if name == "qwen3":  # the released config.json form (Qwen3-0.6B's keys): a window that use_sliding_window turns off
        config = json.loads((out / "config.json").read_text())
        rope = config.pop("rope_parameters")
        config |= {"rope_theta": rope["rope_theta"], "rope_scaling": None, "sliding_window": 4,
                   "use_sliding_window": False, "max_window_layers": 1, "torch_dtype": "bfloat16"}
        del config["layer_types"]
        (out / "config.json").write_text(json.dumps(config))
        _compare(out, (ids,), hf)
    if name == "apertus":  # the rotary settings left to ApertusConfig (Apertus-8B's: rope_type llama3, theta 1.2e7)
        assert imported.model.cfg.rope_base == 1.2e7 and imported.model.cfg.rope_scaling["factor"] == 8
        config = json.loads((out / "config.json").read_text())
        del config["rope_parameters"], config["rms_norm_eps"]  # ApertusConfig's defaults, not Llama's
        (out / "config.json").write_text(json.dumps(config))
        _compare(out, (ids,), hf)
    if name.endswith("-window"):
        assert imported.model.cfg.max_seq_len == 16
        assert "sliding_window=16 < max_position_embeddings=64: imported with model.max_seq_len=16" in caplog.text


@pytest.mark.parametrize("name", ["mlm", "classifier", "mlm-erf-eps", "classifier-erf"])
def test_a_transformers_bert_imports_with_its_logits(name, tmp_path):
    """-erf: BertConfig's defaults, as released BERT checkpoints have them (hidden_act "gelu", the exact GELU, in
    the FFN and the MLM head; layer_norm_eps 1e-12); -eps: an epsilon far from 1e-5 (0.1), so ignoring it shows."""
    tok = HFTokenizer.train([TEXT] * 20, SPECIALS, vocab_size=200, kind="wordpiece")
    act = {} if "erf" in name else {"hidden_act": "gelu_new", "layer_norm_eps": 1e-5}
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=64, type_vocab_size=2, num_labels=3,
                                     **act, **({"layer_norm_eps": 0.1} if name.endswith("-eps") else {}))
    cls = transformers.BertForMaskedLM if name.startswith("mlm") else transformers.BertForSequenceClassification
    hf = _randomised(cls(config))  # token type 0's row non-zero: folded into the positions
    out = _save(hf, tok, tmp_path)
    ids = torch.randint(5, tok.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1))
    _compare(out, (ids,), hf)


@pytest.mark.parametrize("name", ["marian", "marian-erf", "marian-swish", "pegasus"])
def test_a_transformers_translator_imports_with_its_logits(name, tmp_path):
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    config_class, model_class = {"marian": (transformers.MarianConfig, transformers.MarianMTModel),
                                 "marian-erf": (transformers.MarianConfig, transformers.MarianMTModel),
                                 "marian-swish": (transformers.MarianConfig, transformers.MarianMTModel),
                                 "pegasus": (transformers.PegasusConfig, transformers.PegasusForConditionalGeneration)}[name]
    # "gelu": the exact GELU; "swish": SiLU, the activation of released Marian (opus-mt) checkpoints
    act = {"marian": "relu", "marian-erf": "gelu", "marian-swish": "swish", "pegasus": "gelu_new"}[name]
    config = config_class(vocab_size=tok.vocab_size, d_model=32, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
                          max_position_embeddings=64, activation_function=act,
                          pad_token_id=0, eos_token_id=2, decoder_start_token_id=1, scale_embedding=True)
    hf = _randomised(model_class(config))
    out = _save(hf, tok, tmp_path)
    src = torch.randint(3, tok.vocab_size, (2, 15), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(3, tok.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    imported = load(out)
    with torch.no_grad():
        ours, theirs = imported.model(src, tgt), hf(input_ids=src, decoder_input_ids=tgt).logits
    assert ours.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize("tied", [True, False], ids=["tied-output-scale", "untied"])
def test_a_transformers_switch_model_imports_with_its_logits(tied, tmp_path):
    """SwitchTransformersForConditionalGeneration as transformers makes it: experts on layers 1 and 3 of 4 per stack,
    heads 16 wide over d_model 32, T5's relative bias; tied, its decoder output is scaled by d_model^-0.5 (lab's
    model.output_scale). Its capacity (16 per sequence and expert) is more than these 15 tokens."""
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "</s>", "<unk>"], vocab_size=200, kind="bpe")
    config = transformers.SwitchTransformersConfig(
        vocab_size=tok.vocab_size, d_model=32, d_kv=16, d_ff=48, num_heads=3, num_layers=4, num_decoder_layers=4,
        num_sparse_encoder_layers=2, num_sparse_decoder_layers=2, num_experts=4, expert_capacity=16,
        relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=tied, decoder_start_token_id=0)
    hf = _randomised(transformers.SwitchTransformersForConditionalGeneration(config))
    with torch.no_grad():  # T5's embedding init is N(0, 1); untied, transformers 5 keeps the stacks' own copies
        hf.shared.weight.mul_(10.0)
        hf.encoder.embed_tokens.weight.copy_(hf.shared.weight)
        hf.decoder.embed_tokens.weight.copy_(hf.shared.weight)
    out = _save(hf, tok, tmp_path)
    src = torch.randint(3, tok.vocab_size, (2, 15), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(3, tok.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = 0  # T5 starts the decoder with the pad id
    src[1, 10:] = 0  # a padded source
    model = load(out).model
    assert [hasattr(b.ffn, "router") for b in model.decoder.layers] == [False, True, False, True]
    assert (model.lm_head.weight is model.src_embed.tokens.weight) == tied == model.cfg.output_scale
    with torch.no_grad():
        ours, theirs = model(src, tgt), hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    assert ours.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize("scaled", [True, False], ids=["t5-output-scale", "unscaled"])
def test_a_transformers_t5_model_imports_with_its_logits(scaled, tmp_path):
    """T5ForConditionalGeneration as transformers makes it (T5 v1.0's ReLU, heads 16 wide over d_model 32); by default
    it scales the decoder output by d_model^-0.5 (lab's model.output_scale); with tie_word_embeddings=false it does
    not (transformers 5 ties lm_head to the shared embedding either way, and so does the import)."""
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "</s>", "<unk>"], vocab_size=200, kind="bpe")
    config = transformers.T5Config(
        vocab_size=tok.vocab_size, d_model=32, d_kv=16, d_ff=48, num_heads=3, num_layers=2, dropout_rate=0.0,
        relative_attention_num_buckets=8, relative_attention_max_distance=12, layer_norm_epsilon=1e-5,
        decoder_start_token_id=0, **({} if scaled else {"tie_word_embeddings": False}))
    hf = _randomised(transformers.T5ForConditionalGeneration(config))
    with torch.no_grad():
        hf.shared.weight.mul_(10.0)  # T5's embedding init is N(0, 1)
    out = _save(hf, tok, tmp_path)
    src = torch.randint(3, tok.vocab_size, (2, 15), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(3, tok.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    tgt[:, 0], src[1, 10:] = 0, 0  # T5 starts the decoder with the pad id; a padded source
    model = load(out).model
    assert model.lm_head.weight is model.src_embed.tokens.weight and model.cfg.output_scale == scaled
    with torch.no_grad():
        ours, theirs = model(src, tgt), hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    assert ours.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


def test_a_switch_model_lab_cannot_reproduce_is_refused(tmp_path):
    """Stacks of different depths, or experts not on every n-th layer, would load as another model: refused."""
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "</s>", "<unk>"], vocab_size=200, kind="bpe")
    config = transformers.SwitchTransformersConfig(
        vocab_size=tok.vocab_size, d_model=32, d_kv=8, d_ff=48, num_heads=4, num_layers=2, num_decoder_layers=3,
        num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, num_experts=2)
    out = _save(transformers.SwitchTransformersForConditionalGeneration(config), tok, tmp_path)
    with pytest.raises(LabError, match=r"stacks have 2 and 3 layers, experts on layers \[1\] and \[1\]; lab's"):
        load(out)


# ---------------------------------------------------------------------------------------------- refusals


def test_what_lab_cannot_reproduce_is_one_error_naming_what_it_supports(bpe, tmp_path):
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(  # an activation lab's SwiGLU does not have
        vocab_size=bpe.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        hidden_act="gelu", intermediate_size=48, rms_norm_eps=1e-6))
    out = _save(hf, bpe, tmp_path / "gelu-mlp")
    with pytest.raises(LabError, match="hidden_act='gelu'; lab reproduces 'silu' only"):
        load(out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "architectures": ["BartForConditionalGeneration"]}))
    with pytest.raises(LabError, match="architecture BartForConditionalGeneration is not supported; lab imports "
                                       "GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, "
                                       "ApertusForCausalLM, MarianMTModel"):
        load(out)
    (out / "tokenizer.json").unlink()
    with pytest.raises(LabError, match="lacks tokenizer.json; lab reads a Hugging Face directory with config.json"):
        load(out)


def test_a_bias_where_lab_has_none_is_refused(bpe, tmp_path):
    """A BERT activation lab's FFN and head lack, or a non-zero Marian final_logits_bias, would be silently
    different: refused."""
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    config = transformers.MarianConfig(vocab_size=tok.vocab_size, d_model=32, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                                       decoder_ffn_dim=48, activation_function="relu", pad_token_id=0)
    hf = _randomised(transformers.MarianMTModel(config))
    with torch.no_grad():
        hf.final_logits_bias[0, 5] = 1.0  # a buffer lab has no place for (zero in Marian's own checkpoints)
    with pytest.raises(LabError, match="final_logits_bias holds non-zero values where lab's model has no parameter"):
        load(_save(hf, tok, tmp_path / "marian"))
    qwen3 = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(  # q/k/v/o biases, none in the MLP
        vocab_size=bpe.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=48, attention_bias=True))
    with pytest.raises(LabError, match="attention_bias=true \\(biases on the attention only\\); lab's model.bias puts"):
        load(_save(qwen3, bpe, tmp_path / "qwen3"))
    apertus = transformers.ApertusForCausalLM(transformers.ApertusConfig(  # ApertusConfig's default: xIELU
        vocab_size=bpe.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48))
    with pytest.raises(LabError, match="hidden_act='xielu'; lab reproduces 'relu2' or 'relu' or 'gelu_pytorch_tanh'"):
        load(_save(apertus, bpe, tmp_path / "apertus"))
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48, hidden_act="relu"))
    with pytest.raises(LabError, match="hidden_act='relu'; lab reproduces 'gelu_new' or 'gelu_pytorch_tanh' or 'gelu' only"):
        load(_save(bert, HFTokenizer.train([TEXT], SPECIALS, 50, "wordpiece"), tmp_path / "bert"))


# ---------------------------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def small_bert(tmp_path_factory):
    """A transformers BertForMaskedLM of lab's test sizes with BertConfig's defaults (released BERT's: the exact
    GELU, layer_norm_eps 1e-12), with its WordPiece tokenizer."""
    tok = HFTokenizer.train(["a gorgeous moving film. the worst movie of the year, dull and long."] * 20, SPECIALS,
                            vocab_size=120, kind="wordpiece")
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=128, max_position_embeddings=32, type_vocab_size=2)
    return _save(_randomised(transformers.BertForMaskedLM(config)), tok, tmp_path_factory.mktemp("bert")), tok


def test_init_from_another_layout_names_the_overrides_to_type(small_bert):
    from lab.hf.importing import init_from

    bert, tok = small_bert
    model = EncoderClassifier(tok.vocab_size, 0, 2, d_model=32, n_layers=1, n_heads=2, max_seq_len=32)  # pre-norm
    keys = dict.fromkeys(("d_model", "n_layers", "n_heads", "max_seq_len", "norm_placement", "positions"))
    with pytest.raises(LabError) as e:
        init_from(model, str(bert), {"config": {"model": keys}})
    assert str(e.value).endswith("; add +model.norm_eps=1e-12 model.norm_placement=post +model.ffn=gelu_erf "
                                 "+model.embed_norm=true")
    gpt = _model(tok.vocab_size, **CASES["gpt2-char"][2])
    with pytest.raises(LabError, match="is a BertForMaskedLM, which a GPT cannot start from"):
        init_from(gpt, str(bert), {})


def test_init_from_a_qwen3_names_overrides_that_work_pasted(bpe, tmp_path):
    """The hint, applied to the run's model config (null head_dim / n_kv_heads / d_ff / norm_eps resolve anew from
    the pasted d_model, n_heads, ffn, norm), builds the directory's model: the head width is named although it
    equals this model's (32 / 2 = 16), since 16 is not the 64 / 2 that null would give after the paste."""
    from omegaconf import OmegaConf

    from lab.hf.importing import init_from
    from lab.models.gpt import GPT

    hf = _randomised(transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=bpe.vocab_size, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, intermediate_size=48, max_position_embeddings=64)))
    out = _save(hf, bpe, tmp_path / "qwen3")
    run = dict(d_model=32, n_layers=1, n_heads=2, max_seq_len=64, head_dim=None, n_kv_heads=None, d_ff=None,
               norm_eps=None)  # conf/model/gpt.yaml's nulls
    with pytest.raises(LabError) as e:
        init_from(GPT(bpe.vocab_size, **run), str(out), {})
    hints = str(e.value).split("; add ")[1].split()
    assert "model.head_dim=16" in hints and "model.qk_norm=true" in hints
    pasted = OmegaConf.to_container(OmegaConf.from_dotlist(hints))["model"]  # as Hydra reads the overrides
    model = GPT(bpe.vocab_size, **{**run, **pasted})
    init_from(model, str(out), {})
    ids = torch.randint(0, bpe.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(ids), hf(ids).logits, atol=1e-4, rtol=0)


@pytest.mark.slow  # lab.train and lab.export in subprocesses
def test_docs_fine_tune_a_bert_classifier_then_export(small_bert, tmp_path):
    """docs/export.md's walkthrough as typed (a tiny BertForMaskedLM for hf/bert, a labelled reviews.tsv): the shape
    from its config.json (no model.* override), the encoder loaded through the directory's tokenizer, the pooler and
    head for the data's labels new; the export loads in transformers with the checkpoint's logits."""
    from conftest import run_dirs, run_module, train

    from lab.checkpoints.reading import load_model

    bert, _ = small_bert
    words = ["a", "gorgeous", "moving", "film", ".", "the", "worst", "movie", "of", "the", "year", ",", "dull", "and", "long"]
    rows = [f"{' '.join(words[i % 5:i % 5 + 3 + i % 7])}\t{('good', 'bad')[i % 2]}" for i in range(60)]
    (tmp_path / "reviews.tsv").write_text("review\tsentiment\n" + "\n".join(rows) + "\n")
    train(["+experiment=encoder_classifier_pretrained", "data=text_classification",
           f"data.train_file={tmp_path / 'reviews.tsv'}", "data.text_field=review", "data.label_field=sentiment",
           f"model.init_from={bert}", "model.pooling=bert", "data.batch_size=16", "data.max_length=32",
           "trainer.max_steps=2", "trainer.val_check_interval=2", "data.eval_batches=1", "test=false",
           "logger.wandb.mode=disabled", "callbacks.progress=null"], tmp_path / "runs")
    (run,) = run_dirs(tmp_path / "runs")
    log = (run / "train.log").read_text()
    encoder = 4 + 12  # embeddings (tokens, positions, norm weight and bias) + one block's 12 tensors
    assert f"init_from {bert} (BertForMaskedLM): loaded {encoder} tensors; new (trained from init): " \
           "pool.dense.weight, pool.dense.bias, classifier.weight, classifier.bias" in log
    out = tmp_path / "exports" / "bert_reviews"
    result = run_module("lab.export", [f"ckpt_path={run}", f"out_dir={out}"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    model, tok, _ = load_model(best)
    ids = torch.tensor([[tok.token_id("[CLS]"), *tok.encode("the worst film of the year"), tok.token_id("[SEP]")]])
    with torch.no_grad():
        exported = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
        torch.testing.assert_close(exported(ids).logits, model(ids), atol=1e-4, rtol=0)
    assert transformers.AutoTokenizer.from_pretrained(out)("the worst film of the year").input_ids == ids[0].tolist()


def test_an_lm_continues_from_its_export_and_refuses_another_tokenizer(bpe, tmp_path):
    """Export, then init_from into a fresh model of the same settings: every tensor loaded, bit for bit."""
    from lab.hf.importing import init_from

    layout = CASES["mixtral-bpe-top2"][2]
    trained = _model(bpe.vocab_size, **layout)
    export(trained, bpe, {}, tmp_path)
    torch.manual_seed(5)
    fresh = _model(bpe.vocab_size, **layout)
    init_from(fresh, str(tmp_path), {"tokenizer": bpe.to_json()})
    _same_model(trained, fresh)
    other = HFTokenizer.train([TEXT] * 20, ["<|endoftext|>"], vocab_size=290, kind="bpe")
    with pytest.raises(LabError, match="the data's tokenizer is not the model's"):
        init_from(_model(bpe.vocab_size, **layout), str(tmp_path), {"tokenizer": other.to_json()})


def test_a_run_model_built_to_fill_is_its_checkpoint_bit_for_bit(bpe, tmp_path):
    """lab.train's model for model.init_from (build_to_fill): no random initialisation (no random number drawn),
    no parameter left meta, and after init_from every parameter is the checkpoint's bit for bit. A resumed run and
    a classifier (whose new head starts from init) are built as usual, the same numbers as without init_from."""
    from lab.hf.importing import build_to_fill, init_from
    from lab.models.gpt import GPT

    layout = CASES["mixtral-bpe-top2"][2]
    trained = _model(bpe.vocab_size, **layout)
    export(trained, bpe, {}, tmp_path)
    lm = lambda: GPT(bpe.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, **layout)  # noqa: E731
    before = torch.random.get_rng_state()
    fresh = build_to_fill(lm, str(tmp_path), resuming=False)
    assert torch.equal(torch.random.get_rng_state(), before) and not any(p.is_meta for p in fresh.parameters())
    init_from(fresh, str(tmp_path), {"tokenizer": bpe.to_json()})
    _same_model(trained, fresh)
    build_to_fill(lm, str(tmp_path), resuming=True)
    assert not torch.equal(torch.random.get_rng_state(), before)  # a resumed run's model: built (and drawn) as usual
    common = dict(d_model=32, n_layers=1, n_heads=4, max_seq_len=64, **BERT_LAYOUT)
    classifier = lambda: EncoderClassifier(200, 0, 3, **common)  # noqa: E731
    torch.manual_seed(3)
    usual = classifier()
    torch.manual_seed(3)
    _same_model(usual, build_to_fill(classifier, str(tmp_path), resuming=False))


def test_a_missing_shard_is_one_error(bpe, tmp_path):
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=bpe.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=48, rms_norm_eps=1e-6))
    out = _save(hf, bpe, tmp_path, shard="40KB")
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    with pytest.raises(LabError, match=f"lacks the shard\\(s\\) {shards[-1].name} its model.safetensors.index.json names"):
        load(out)


def test_an_lm_fine_tunes_from_a_transformers_gpt2_with_its_tokenizer(bpe, tmp_path):
    """data.tokenizer_from=<GPT-2 dir>: the corpus is encoded by the directory's tokenizer (not a trained one), so
    model.init_from=<same dir> passes the vocabulary check and the imported LM's logits on the data's own windows
    are transformers'. Without tokenizer_from, lab trains its own tokenizer and init_from refuses it."""
    from lab.data.corpora import TextFiles
    from lab.data.lm import LMDataModule
    from lab.hf.importing import init_from
    from lab.models.gpt import GPT

    hf = _randomised(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=bpe.vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=64, activation_function="gelu_new")))
    out = _save(hf, bpe, tmp_path / "gpt2")
    text = tmp_path / "corpus.txt"
    text.write_text((TEXT + "\n") * 40)

    def data(**given):
        dm = LMDataModule(TextFiles([str(text)]), block_size=32, batch_size=2, cache_dir=str(tmp_path / "cache"), **given)
        dm.prepare_data()
        dm.setup()
        return dm

    dm = data(tokenizer_from=str(out))
    assert np.asarray(dm.train_tokens)[:60].tolist() == bpe.encode((TEXT + "\n") * 2)[:60]
    imported = load(out)
    model = GPT(dm.vocab["vocab_size"], **{k: v for k, v in vars(imported.model.cfg).items() if k != "init_std"})
    init_from(model, str(out), {"tokenizer": dm.tokenizer.to_json()})
    window = torch.from_numpy(np.asarray(dm.train_tokens)[:32].astype(np.int64))[None]
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(window), hf(window).logits, atol=1e-4, rtol=0)
    own = data(tokenizer="bpe", vocab_size=280)  # the corpus's own tokenizer: another vocabulary
    with pytest.raises(LabError, match=f"the data's tokenizer is not the model's.*data.tokenizer_from={out}"):
        init_from(GPT(own.vocab["vocab_size"], **{k: v for k, v in vars(imported.model.cfg).items() if k != "init_std"}),
                  str(out), {"tokenizer": own.tokenizer.to_json()})


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    """A random-weight MarianMTModel with a Marian-style tokenizer.json: </s> = 0, <unk> = 1, <pad> the last id
    and the decoder's start token (as Helsinki-NLP's), no <s>. -> (directory, the model)."""
    out = tmp_path_factory.mktemp("marian")
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["</s>", "<unk>"], vocab_size=200, kind="bpe")
    tok.backend.add_special_tokens(["<pad>"])
    vocab = tok.backend.get_vocab_size(with_added_tokens=True)
    config = transformers.MarianConfig(vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                                       decoder_ffn_dim=48, max_position_embeddings=64, activation_function="relu",
                                       pad_token_id=vocab - 1, eos_token_id=0, decoder_start_token_id=vocab - 1,
                                       scale_embedding=True)
    return _save(_randomised(transformers.MarianMTModel(config)), tok, out), vocab


def _pairs_file(tmp_path):
    rows = [f"{de} {n}\t{en} {n}" for n in ("eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht")
            for de, en in zip(PAIRS, ("What time is it?", "That is a small house by the lake.", "I don't know, maybe tomorrow."))]
    (tmp_path / "pairs.tsv").write_text("\n".join(rows) + "\n")
    return tmp_path / "pairs.tsv"


def test_a_translator_fine_tunes_from_a_transformers_marian_with_its_tokenizer(marian_dir, tmp_path):
    """data.tokenizer_from=<Marian dir>: both sides are encoded by the directory's tokenizer with its own specials
    (sources end in </s> = 0, targets start with <pad>, Marian's decoder start, padded with <pad>), so
    model.init_from=<same dir> passes the vocabulary and special-token checks and lab's logits on the data's own
    batch are transformers'. With lab's own tokenizer init_from refuses, naming data.tokenizer_from."""
    from tokenizers import Tokenizer

    from lab.data.parallel import ParallelDataModule, ParallelFiles
    from lab.data.sources.text import normalize_sentence
    from lab.hf.importing import init_from

    out, vocab = marian_dir
    tsv = _pairs_file(tmp_path)

    def data(**given):
        dm = ParallelDataModule(ParallelFiles(str(tsv)), valid_size=4, test_size=4, max_tokens=64, batch_size=6,
                                cache_dir=str(tmp_path / "cache"), **given)
        dm.prepare_data()
        dm.setup()
        return dm

    dm = data(tokenizer_from=str(out))
    assert dm.vocab == {"vocab_size": vocab, "pad_id": vocab - 1, "bos_id": vocab - 1, "eos_id": 0}
    batch = dm.collate([dm.datasets["valid"][i] for i in range(4)])
    marian_tok = Tokenizer.from_file(str(out / "tokenizer.json"))  # the file itself, as transformers reads it
    for row, src in zip(batch["source"].tolist(), batch["source_text"]):
        ids = marian_tok.encode(normalize_sentence(src), add_special_tokens=False).ids + [0]
        assert row == ids + [vocab - 1] * (len(row) - len(ids))
    assert batch["target"][:, 0].tolist() == [vocab - 1] * 4
    imported = load(out)
    model = EncoderDecoder(**dm.vocab, **{k: v for k, v in vars(imported.model.cfg).items() if k != "init_std"})
    init_from(model, str(out), {"tokenizer": dm.tokenizer.to_json()})
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    src, tgt = batch["source"], batch["target"][:, :-1]
    with torch.no_grad():
        ours = model.eval()(src, tgt)
        theirs = hf(input_ids=src, attention_mask=src != vocab - 1, decoder_input_ids=tgt).logits
    assert ours.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    own = data(vocab_size=260)  # the pairs' own BPE: <pad> <s> </s> = 0, 1, 2
    with pytest.raises(LabError, match=f"the data's tokenizer is not the model's.*data.tokenizer_from={out}"):
        init_from(EncoderDecoder(**own.vocab, **{k: v for k, v in vars(imported.model.cfg).items() if k != "init_std"}),
                  str(out), {"tokenizer": own.tokenizer.to_json()})


def test_a_translator_with_other_special_ids_is_refused(marian_dir):
    """The same vocabulary numbered into other specials (a start token that is not the model's) is one error."""
    from lab.hf.importing import init_from

    out, vocab = marian_dir
    imported = load(out)
    settings = {k: v for k, v in vars(imported.model.cfg).items() if k != "init_std"}
    model = EncoderDecoder(vocab, pad_id=vocab - 1, bos_id=0, eos_id=0, **settings)
    with pytest.raises(LabError, match=f"special tokens are not the model's: bos_id=0 \\(the model's: {vocab - 1}\\)"):
        init_from(model, str(out), {})


@pytest.mark.slow  # a training run (lab.train in a subprocess)
def test_lab_train_fine_tunes_a_transformers_marian(marian_dir, tmp_path):
    """model.init_from + data.tokenizer_from through lab.train on the user's own pairs: every tensor loaded, and
    the imported model trains (the training loss is logged)."""
    from conftest import read_metrics, run_dirs, train

    out, _ = marian_dir
    train(["+experiment=translator_vanilla", "data=parallel_text", f"data.train_file={_pairs_file(tmp_path)}",
           f"model.init_from={out}", f"data.tokenizer_from={out}", "model.d_model=32", "model.n_layers=2",
           "model.n_heads=4", "model.d_ff=48", "model.max_seq_len=64", "data.valid_size=4", "data.test_size=4",
           "data.batch_size=8", "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1",
           "test=false", "logger.wandb.mode=disabled", "callbacks.progress=null"], tmp_path / "runs")
    (run,) = run_dirs(tmp_path / "runs")
    log = (run / "train.log").read_text()
    assert f"init_from {out} (MarianMTModel): loaded " in log and "new (trained from init): -" in log
    assert any(r.get("train/loss") for r in read_metrics(run))


def test_the_exact_gelu_is_for_dense_ffns_only():
    """The experts compute relu, tanh GELU or SwiGLU: gelu_erf with a mixture of experts is one error, not a
    model that silently uses the tanh GELU."""
    from lab.nn.config import ConfigError, TransformerConfig

    TransformerConfig(ffn="gelu_erf")
    with pytest.raises(ConfigError, match="model.ffn=gelu_erf is for dense FFNs"):
        TransformerConfig(ffn="gelu_erf", moe={"num_experts": 4})


# ---------------------------------------------------------------------------------------------- memory and dtype


def test_a_bf16_checkpoint_imports_in_bf16_and_exports_back_bit_exact(bpe, tmp_path):
    """The checkpoint's dtype unless asked: a bf16 Llama comes in as bf16 parameters and goes out as the same bf16
    file, tensor for tensor; asked for float32, its logits are transformers' in float32."""
    from safetensors.torch import load_file

    hf = _randomised(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=bpe.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, max_position_embeddings=64))).to(torch.bfloat16)
    out = _save(hf, bpe, tmp_path / "bf16", shard="20KB")
    imported = load(out)
    assert {p.dtype for p in imported.model.parameters()} == {torch.bfloat16}
    export(imported.model, imported.tokenizer, {}, tmp_path / "back")
    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert json.loads((tmp_path / "back" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert back.keys() == hf.state_dict().keys()
    assert [k for k, v in hf.state_dict().items() if not (back[k].dtype == v.dtype and torch.equal(back[k], v))] == []
    ids = torch.randint(0, bpe.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        # transformers' own fp32 model of the file (hf.float() keeps the rotary frequencies it rounded to bf16)
        theirs = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
        torch.testing.assert_close(load(out, torch.float32).model(ids), theirs(ids).logits, atol=1e-4, rtol=0)


def test_the_mapping_is_traced_by_number_only_where_it_reorders(bpe):
    """No numbered copy of the model: a Llama's tensors are views of its parameters (their strides and offsets)
    except the rotary-reordered query and key rows, traced one parameter at a time."""
    from lab.hf.importing import skeleton
    from lab.hf.llama import Llama
    from lab.hf.mapping import trace

    config = transformers.LlamaConfig(vocab_size=bpe.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=48).to_dict()
    model = skeleton(Llama(), config, {}, bpe)
    assert all(p.is_meta for p in model.parameters())
    plan = trace(model, Llama())
    assert sorted(k for k, s in plan.sources.items() if s.numbered) == \
        [f"model.layers.{i}.self_attn.{n}_proj.weight" for i in range(2) for n in "kq"]


def test_two_different_copies_of_a_tied_parameter_are_refused(bpe, tmp_path):
    from safetensors.torch import load_file, save_file

    hf = _randomised(transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=bpe.vocab_size, n_embd=32, n_layer=1,
                                                                          n_head=4, n_positions=64)))
    out = _save(hf, bpe, tmp_path)
    state = load_file(str(out / "model.safetensors"))
    state["lm_head.weight"] = state["transformer.wte.weight"] + 1.0
    save_file(state, str(out / "model.safetensors"))
    with pytest.raises(LabError, match="lm_head.weight differs from another tensor lab keeps as one parameter"):
        load(out)
