"""python -m lab.export: every supported mapping gives transformers' own class the same logits as lab (1e-4),
the same token ids from AutoTokenizer, and the same greedy continuation; unsupported layouts are one line."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import TINY_GPT as TINY
from conftest import TINY_LM, run_dirs, run_module, train

from lab.checkpoints.export_dir import MARKER
from lab.data.classification import encode_sentence
from lab.data.tokenizers import CharTokenizer, HFTokenizer
from lab.errors import LabError
from lab.hf.exporting import export
from lab.models.decoding import generate, greedy_translate
from lab.models.encoder import EncoderClassifier, MaskedLM
from lab.models.gpt import GPT
from lab.models.seq2seq import EncoderDecoder

transformers = pytest.importorskip("transformers")

TEXT = ("ROMEO. But soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
        "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief. ") * 3
SAMPLES = ["ROMEO. But soft!", "what light, yonder?\n  two spaces", "Juliet zq unseen chars: é ß 日本",
           "special strings are text: <|endoftext|> [PAD] [MASK] <s> </s>"]

GPT2_LAYOUT = dict(positions="learned", norm="layernorm", norm_placement="pre", ffn="gelu")
LLAMA_LAYOUT = dict(positions="rotary", norm="rmsnorm", norm_placement="pre", ffn="swiglu", bias=False)


def _tokenizer(kind: str):
    if kind == "char":
        return CharTokenizer.train([TEXT], ["<|endoftext|>"])
    return HFTokenizer.train([TEXT] * 20, ["<|endoftext|>"], vocab_size=300, kind="bpe")


def _model(vocab: int, **layout) -> GPT:
    torch.manual_seed(0)
    # init_std 0.1: outputs that vary strongly by position and token, so a mapping error cannot hide
    model = GPT(vocab, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, init_std=0.1, **layout)
    with torch.no_grad():  # non-trivial norms and biases (init leaves them at 1 and 0)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


CASES = {
    "gpt2-char": ("GPT2LMHeadModel", "char", GPT2_LAYOUT),
    "gpt2-bpe-untied-nobias": ("GPT2LMHeadModel", "bpe", {**GPT2_LAYOUT, "bias": False, "tie_embeddings": False}),
    "llama-bpe": ("LlamaForCausalLM", "bpe", LLAMA_LAYOUT),
    "llama-char-bias": ("LlamaForCausalLM", "char", {**LLAMA_LAYOUT, "bias": True}),
    # far from the defaults (1e-6, 10000), so a mapping that dropped either would change the logits
    "llama-bpe-eps-rope": ("LlamaForCausalLM", "bpe", {**LLAMA_LAYOUT, "norm_eps": 0.003, "rope_base": 50.0}),
    "gpt2-bpe-eps": ("GPT2LMHeadModel", "bpe", {**GPT2_LAYOUT, "norm_eps": 0.01}),
    "gpt2-bpe-erf": ("GPT2LMHeadModel", "bpe", {**GPT2_LAYOUT, "ffn": "gelu_erf"}),  # the exact GELU
    "mixtral-bpe-top2": ("MixtralForCausalLM", "bpe", {**LLAMA_LAYOUT, "moe": {
        "num_experts": 4, "top_k": 2, "capacity_factor": None, "capacity_factor_eval": None}}),
    # Llama 3.1's rotary scaling: with head_dim 8 and 64 original positions, one pair kept, one smoothed, two slowed
    "llama-char-rope-scaling": ("LlamaForCausalLM", "char", {**LLAMA_LAYOUT, "rope_scaling": {
        "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_len": 64}}),
    # grouped-query attention: 4 query heads share 2 key/value heads (1: multi-query); biases split at the new sizes
    "llama-bpe-gqa-bias": ("LlamaForCausalLM", "bpe", {**LLAMA_LAYOUT, "n_kv_heads": 2, "bias": True}),
    "mixtral-char-mqa": ("MixtralForCausalLM", "char", {**LLAMA_LAYOUT, "n_kv_heads": 1, "moe": {
        "num_experts": 4, "top_k": 2, "capacity_factor": None, "capacity_factor_eval": None}}),
    # heads of model.head_dim 12, not d_model / n_heads = 8 (Qwen3's, some Llama-style files')
    "llama-bpe-head-dim": ("LlamaForCausalLM", "bpe", {**LLAMA_LAYOUT, "head_dim": 12}),
    # QK-norm (its gains perturbed by _model, as every norm's), head_dim 16 != 32 / 4, GQA, untied
    "qwen3-bpe-head-dim-gqa": ("Qwen3ForCausalLM", "bpe", {**LLAMA_LAYOUT, "qk_norm": True, "head_dim": 16,
                                                           "n_kv_heads": 2, "tie_embeddings": False}),
    # tied; an epsilon (the block norms' and the QK-norm's) and a rotary base far from the defaults
    "qwen3-char-tied-eps-rope": ("Qwen3ForCausalLM", "char", {**LLAMA_LAYOUT, "qk_norm": True, "norm_eps": 0.003,
                                                              "rope_base": 50.0}),
    # gpt_*_fast's layout (lab.hf.apertus): QK-norm, a non-gated ReLU² FFN, untied; then the exact GELU,
    # with GQA, head_dim 12 != 32 / 4, an epsilon and a rotary base far from the defaults
    "apertus-bpe-relu2-untied": ("ApertusForCausalLM", "bpe", {**LLAMA_LAYOUT, "qk_norm": True, "ffn": "relu_squared",
                                                               "tie_embeddings": False}),
    "apertus-bpe-erf-gqa-eps-rope": ("ApertusForCausalLM", "bpe", {**LLAMA_LAYOUT, "qk_norm": True, "ffn": "gelu_erf",
                                                                   "n_kv_heads": 2, "head_dim": 12, "norm_eps": 0.003,
                                                                   "rope_base": 50.0}),
}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def exported(request, tmp_path_factory):
    cls, kind, layout = CASES[request.param]
    tok = _tokenizer(kind)
    model = _model(tok.vocab_size, **layout)
    out = tmp_path_factory.mktemp(request.param)
    assert export(model, tok, {}, out).hf_class == cls
    return cls, tok, model, out


def _hf(out):
    model = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    return model


def test_exported_class_and_files(exported):
    cls, _, _, out = exported
    assert json.loads((out / "config.json").read_text())["architectures"] == [cls]
    assert {p.name for p in out.iterdir()} >= {"model.safetensors", "config.json", "generation_config.json",
                                               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert type(_hf(out)).__name__ == cls


def test_logits_equal_lab_on_random_inputs(exported):
    _, tok, model, out = exported
    hf = _hf(out)
    ids = torch.randint(0, tok.vocab_size, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    assert ours.std() > 0.5  # the outputs vary: a mapping error would show
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


def test_tokenizer_gives_labs_ids(exported):
    _, tok, _, out = exported
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    for text in SAMPLES:
        assert hf_tok(text, add_special_tokens=False)["input_ids"] == tok.encode(text), text
        assert hf_tok.decode(tok.encode(text), skip_special_tokens=True) == tok.decode(tok.encode(text))


def test_greedy_generate_reproduces_lab_generate_temperature_0(exported):
    _, tok, model, out = exported
    hf = _hf(out)
    prompt = torch.tensor([tok.encode("ROMEO. But")])
    ours = generate(model, prompt, 20, temperature=0.0)
    theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, min_new_tokens=20,
                         do_sample=False, pad_token_id=0)
    assert theirs.tolist() == ours.tolist()


def test_loading_needs_no_lab(tmp_path):
    """transformers alone (lab's package made unimportable) loads each family's model and tokenizer."""
    outs = []
    for case in ("gpt2-char", "llama-bpe"):
        _, kind, layout = CASES[case]
        tok = _tokenizer(kind)
        export(_model(tok.vocab_size, **layout), tok, {}, tmp_path / case)
        outs.append(str(tmp_path / case))
    code = ("import sys; sys.modules['lab'] = None\n"
            "import transformers, torch\n"
            f"for out in {outs!r}:\n"
            "    m = transformers.AutoModelForCausalLM.from_pretrained(out)\n"
            "    t = transformers.AutoTokenizer.from_pretrained(out)\n"
            "    print(type(m).__name__, m(torch.tensor([t('ROMEO.')['input_ids']])).logits.shape)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["GPT2LMHeadModel", "torch.Size([1,", "6,", "36])",
                                     "LlamaForCausalLM", "torch.Size([1,", f"{len(_tokenizer('bpe').encode('ROMEO.'))},",
                                     f"{_tokenizer('bpe').vocab_size}])"]


# ---------------------------------------------------------------------------------------------- translator

MARIAN_LAYOUT = dict(positions="sinusoidal", norm="layernorm", norm_placement="post", scale_embeddings=True)
PAIRS = ["Wie spät ist es?", "Das ist ein kleines Haus am See.", "Ich weiß es nicht, aber vielleicht morgen."]


# T5's layout (with Switch experts: translator_small_moe's); few buckets, so these sentences reach the logarithmic ones
SWITCH_LAYOUT = dict(positions="relative", relative_buckets=8, relative_max_distance=12, attention_scale=1.0,
                     norm="rmsnorm", norm_placement="pre", bias=False, scale_embeddings=False)
SWITCH_MOE = dict(num_experts=4, top_k=1, capacity_factor_eval=None)
TRANSLATORS = {  # layout, the class that reproduces it
    "relu-tied": ({**MARIAN_LAYOUT, "ffn": "relu"}, "MarianMTModel"),
    "gelu-untied-nobias": ({**MARIAN_LAYOUT, "ffn": "gelu", "bias": False, "tie_embeddings": False}, "MarianMTModel"),
    "prenorm-gelu-tied": ({**MARIAN_LAYOUT, "norm_placement": "pre", "ffn": "gelu"}, "PegasusForConditionalGeneration"),
    "prenorm-relu-untied-nobias": ({**MARIAN_LAYOUT, "norm_placement": "pre", "ffn": "relu", "bias": False,
                                    "tie_embeddings": False}, "PegasusForConditionalGeneration"),
    "t5-relu-output-scale": ({**SWITCH_LAYOUT, "ffn": "relu", "output_scale": True, "embed_init_std": 1.0},
                             "T5ForConditionalGeneration"),
    "t5-gelu-erf-head16-eps": ({**SWITCH_LAYOUT, "ffn": "gelu_erf", "head_dim": 16, "norm_eps": 1e-5},
                               "T5ForConditionalGeneration"),
    "switch-relu-tied-output-scale-every-2nd": ({**SWITCH_LAYOUT, "ffn": "relu", "moe": {**SWITCH_MOE, "every_n": 2},
                                                 "init_std": 0.3, "output_scale": True, "embed_init_std": 1.0},
                                                "SwitchTransformersForConditionalGeneration"),
    # tied without the output scale (lm_head written as its own copy)
    "switch-relu-tied-every-2nd": ({**SWITCH_LAYOUT, "ffn": "relu", "moe": {**SWITCH_MOE, "every_n": 2}, "init_std": 0.3},
                                   "SwitchTransformersForConditionalGeneration"),
    # heads 16 wide over d_model 32 (Switch's d_kv), experts in every layer, an untied output projection
    "switch-gelu-untied-every-layer-head16": ({**SWITCH_LAYOUT, "ffn": "gelu", "head_dim": 16, "tie_embeddings": False,
                                               "norm_eps": 1e-5, "moe": {**SWITCH_MOE, "every_n": 1}},
                                              "SwitchTransformersForConditionalGeneration"),
}


@pytest.fixture(scope="module", params=list(TRANSLATORS))
def translator(request, tmp_path_factory):
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    layout, hf_class = TRANSLATORS[request.param]
    torch.manual_seed(0)
    model = EncoderDecoder(tok.vocab_size, 0, 1, 2, d_model=32, n_layers=2, n_heads=4, max_seq_len=64,
                           **{"init_std": 0.1, **layout}).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
            if "router" in name:  # routers that spread these few tokens over the experts
                p.normal_(0.0, 2.0)
    out = tmp_path_factory.mktemp(request.param)
    assert export(model, tok, {}, out).hf_class == hf_class
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert [hf_tok(p, add_special_tokens=False)["input_ids"] for p in PAIRS] == [tok.encode(p) for p in PAIRS]
    return tok, model, transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()


def test_translator_logits_equal_lab_with_padded_sources(translator):
    tok, model, hf = translator
    rows = [tok.encode(p) + [2] for p in PAIRS]
    src = torch.tensor([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])  # right-padded with pad id 0
    tgt = torch.randint(3, tok.vocab_size, (3, 12), generator=torch.Generator().manual_seed(3))
    tgt[:, 0] = 1  # bos starts the decoder
    with torch.no_grad():
        ours, aux = model(src, tgt, return_aux=True)
        theirs = hf(input_ids=src, attention_mask=src != 0, decoder_input_ids=tgt).logits
    assert ours.std() > 0.5
    # Switch: every MoE layer sent these tokens to at least 3 of its 4 experts, so a wrongly numbered expert shows
    moe = [routing.stats for routing in aux.routing.values()]
    assert all(int((f["expert_fraction"] > 0).sum()) >= 3 for f in moe)
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


def test_translator_greedy_generate_reproduces_lab_greedy(translator):
    tok, model, hf = translator
    for p in PAIRS:
        src = torch.tensor([tok.encode(p) + [2]])
        (ours,) = greedy_translate(model, src)
        limit = min(int(src.shape[1] * 1.5) + 10, model.max_seq_len - 1)  # lab's default max length (eos included)
        theirs = hf.generate(src, attention_mask=torch.ones_like(src), max_new_tokens=limit, num_beams=1,
                             do_sample=False)[0, 1:].tolist()
        assert (theirs[: theirs.index(2)] if 2 in theirs else theirs) == ours, p


# ---------------------------------------------------------------------------------------------- encoders

BERT_LAYOUT = dict(positions="learned", norm="layernorm", norm_placement="post", ffn="gelu", embed_norm=True)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


@pytest.fixture(scope="module")
def wordpiece():
    return HFTokenizer.train([TEXT] * 20, SPECIALS, vocab_size=200, kind="wordpiece")


def _padded(tok, texts):
    rows = [[2, *tok.encode(t)[:40], 3] for t in texts]  # [CLS] ... [SEP]
    return torch.tensor([r + [0] * (max(map(len, rows)) - len(r)) for r in rows])


@pytest.mark.parametrize("kind", ["mlm", "mlm-untied", "classifier", "mlm-erf-eps", "classifier-erf-eps"])
def test_bert_logits_equal_lab_with_padding(kind, wordpiece, tmp_path):
    """-erf-eps: the exact GELU (hidden_act "gelu", released BERT's) in the FFN and the MLM head, and a layer norm
    epsilon far from the default, so a mapping that dropped either would change the logits."""
    torch.manual_seed(0)
    erf = dict(ffn="gelu_erf", norm_eps=0.1) if kind.endswith("-erf-eps") else {}
    common = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=64, init_std=0.1, **{**BERT_LAYOUT, **erf})
    if kind.startswith("classifier"):
        model = _perturbed(EncoderClassifier(wordpiece.vocab_size, 0, 3, pooling="bert", **common))
        with torch.no_grad():
            model.classifier.weight.mul_(30)  # rows of logits that differ clearly from input to input
        meta, cls = {"data": {"labels": ["negative", "neutral", "positive"]}}, "BertForSequenceClassification"
    else:
        model = _perturbed(MaskedLM(wordpiece.vocab_size, 0, 4, tie_embeddings=kind == "mlm", **common))
        meta, cls = {}, "BertForMaskedLM"
    assert export(model, wordpiece, meta, tmp_path).hf_class == cls
    auto = transformers.AutoModelForSequenceClassification if kind.startswith("classifier") else transformers.AutoModelForMaskedLM
    hf = auto.from_pretrained(tmp_path).eval()
    assert (hf.config.hidden_act, hf.config.layer_norm_eps) == (("gelu", 0.1) if erf else ("gelu_new", 1e-5))
    ids = _padded(wordpiece, SAMPLES)
    with torch.no_grad():
        ours, theirs = model(ids), hf(input_ids=ids, attention_mask=ids != 0).logits
    assert (ours - ours.mean(0)).abs().max() > 0.05  # outputs differ from input to input
    if kind.startswith("classifier"):
        assert hf.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
        torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)
    else:  # padded positions are not compared: lab and BERT both leave them unused
        torch.testing.assert_close(theirs[ids != 0], ours[ids != 0], atol=1e-4, rtol=0)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = SAMPLES if kind.startswith("classifier") else SAMPLES[:-1]  # the MLM's tokenizer reads "[PAD]" as the token
    assert [hf_tok(t)["input_ids"] for t in texts] == [encode_sentence(wordpiece, t, 1000) for t in texts]


def test_embed_norm_normalises_what_the_first_block_sees():
    torch.manual_seed(0)
    model = MaskedLM(50, 0, 4, d_model=16, n_layers=1, n_heads=2, max_seq_len=16, embed_norm=True)
    ids = torch.randint(5, 50, (2, 7))
    embed = model.encoder.embed
    raw = embed.tokens(ids) + embed.positions.weight[:7]  # by hand: token + position, then (x - mean) / std
    by_hand = (raw - raw.mean(-1, keepdim=True)) / (raw.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    torch.testing.assert_close(embed(ids), by_hand, atol=1e-5, rtol=0)


def test_a_classifier_without_berts_pooler_is_refused(wordpiece, tmp_path):
    from lab.errors import LabError

    model = EncoderClassifier(wordpiece.vocab_size, 0, 2, pooling="mean", d_model=32, n_layers=1, n_heads=4, **BERT_LAYOUT)
    with pytest.raises(LabError, match="model.pooling=bert"):
        export(model, wordpiece, {}, tmp_path / "out")


@pytest.mark.parametrize("layout, named", [
    ({"positions": "sinusoidal", "norm": "layernorm", "ffn": "gelu"}, "model.positions=learned"),
    ({"positions": "rotary", "norm": "rmsnorm", "ffn": "swiglu", "norm_placement": "post"}, "model.norm_placement=pre"),
    ({**GPT2_LAYOUT, "scale_embeddings": True}, "model.scale_embeddings=false"),
    ({**LLAMA_LAYOUT, "moe": {"num_experts": 4, "top_k": 2}}, "model.moe.capacity_factor_eval=null"),
    ({**LLAMA_LAYOUT, "moe": {"num_experts": 4, "top_k": 1, "capacity_factor_eval": None}}, "model.moe.renormalize=true"),
    ({**GPT2_LAYOUT, "n_kv_heads": 2}, "nearest: GPT2LMHeadModel, which needs model.n_kv_heads=4."),
    ({**GPT2_LAYOUT, "head_dim": 16}, "nearest: GPT2LMHeadModel, which needs model.head_dim=8."),
    # QK-norm is kept: Apertus computes it with GPT-2's GELU (dropping it would be a bigger change than the layout's settings)
    ({**GPT2_LAYOUT, "qk_norm": True}, "nearest: ApertusForCausalLM, which needs model.positions=rotary "
                                       "model.norm=rmsnorm model.bias=false."),
    # gpt_*_fast's layout before the export (LayerNorm, biases, the logit soft-cap lab alone computes)
    ({"positions": "rotary", "norm": "layernorm", "qk_norm": True, "ffn": "relu_squared", "tie_embeddings": False,
      "logit_softcap": 30.0}, "nearest: ApertusForCausalLM, which needs model.norm=rmsnorm model.bias=false "
                              "model.logit_softcap=null."),
    # T5's output scale: no decoder-only class computes it
    ({**GPT2_LAYOUT, "output_scale": True}, "nearest: GPT2LMHeadModel, which needs model.output_scale=false."),
], ids=["sinusoidal-gpt", "post-norm-llama", "scaled-embeddings", "moe-with-eval-capacity", "moe-top1-raw-gate",
        "grouped-query-gpt2", "wide-heads-gpt2", "qk-norm-gpt2", "softcapped-fast-layout", "output-scaled-gpt2"])
def test_a_layout_no_class_reproduces_is_refused_naming_the_fields(layout, named, tmp_path):
    from lab.errors import LabError

    tok = _tokenizer("char")
    with pytest.raises(LabError, match="no Hugging Face class reproduces this model exactly") as e:
        export(_model(tok.vocab_size, **layout), tok, {}, tmp_path / "out")
    assert named in str(e.value) and "nearest:" in str(e.value)
    assert not (tmp_path / "out").exists()  # nothing written


def test_cli_exports_a_trained_run_directory(tmp_path):
    """The real entry point on a run directory: its best checkpoint, said in one line; exit 0; the closing line
    names the Auto class and exactly the files written; the export's logits equal the checkpoint's."""
    runs = tmp_path / "runs"
    train([*TINY_LM, "trainer.max_steps=4", "trainer.val_check_interval=4", "test=false"], runs)
    (run,) = run_dirs(runs)
    out = tmp_path / "hf"
    result = run_module("lab.export", [f"ckpt_path={run}", f"out_dir={out}"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    assert f"using {best} (the run's best checkpoint)" in result.stderr
    (line,) = result.stdout.strip().splitlines()
    files = line.split(": ", 1)[1].split(" (load with")[0].split(", ")
    assert line.startswith("wrote GPT2LMHeadModel") and "AutoModelForCausalLM.from_pretrained(" in line
    assert sorted(files) == sorted(p.name for p in out.iterdir() if p.name != MARKER)  # + the marker of a lab export
    from lab.checkpoints.reading import load_model

    model, tok, _ = load_model(best)
    ids = torch.tensor([tok.encode("ROMEO. What say you?")])
    with torch.no_grad():
        torch.testing.assert_close(_hf(out)(ids).logits, model(ids), atol=1e-4, rtol=0)
    bad = run_module("lab.export", [f"ckpt_path={run}"], tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error:")


def test_the_closing_class_and_files_follow_the_model(wordpiece, tmp_path):
    model = MaskedLM(wordpiece.vocab_size, 0, 4, d_model=32, n_layers=1, n_heads=4, **BERT_LAYOUT)
    done = export(model, wordpiece, {}, tmp_path)
    assert (done.hf_class, done.auto_class) == ("BertForMaskedLM", "AutoModelForMaskedLM")
    assert sorted(done.files) == sorted(p.name for p in tmp_path.iterdir())
    assert "generation_config.json" not in done.files  # an MLM does not generate


def test_a_refusal_hint_is_typed_as_a_user_types_it(wordpiece, tmp_path):
    """A key the run's model config lacks needs Hydra's "+", booleans are YAML's: the hint works pasted as is."""
    from lab.errors import LabError

    layout = {**BERT_LAYOUT, "embed_norm": False, "norm_placement": "pre"}
    model = MaskedLM(wordpiece.vocab_size, 0, 4, d_model=32, n_layers=1, n_heads=4, **layout)
    keys = dict.fromkeys(("d_model", "n_layers", "norm_placement", "positions", "ffn", "norm"))
    with pytest.raises(LabError) as e:
        export(model, wordpiece, {"config": {"model": keys}}, tmp_path / "out")
    assert "needs model.norm_placement=post +model.embed_norm=true." in str(e.value)


def test_an_moe_refusal_names_the_mixtral_settings():
    """A GPT-2-layout MoE (gpt_small_moe) is nearest to Mixtral, not to dropping its experts."""
    from lab.errors import LabError

    tok = _tokenizer("char")
    with pytest.raises(LabError, match="nearest: MixtralForCausalLM") as e:
        export(_model(tok.vocab_size, **GPT2_LAYOUT, moe={"num_experts": 4, "top_k": 2}), tok, {}, None)
    assert "model.positions=rotary" in str(e.value) and "model.moe.capacity_factor_eval=null" in str(e.value)


def test_the_new_options_are_refused_by_export_with_their_names():
    from lab.hf.exporting import pick_family
    from lab.hf.registry import families

    # QK-norm is kept (Apertus computes it), the soft-cap is named
    with pytest.raises(LabError, match=r"nearest: ApertusForCausalLM, which needs model.positions=rotary model.norm=rmsnorm "
                                       r"model.bias=false model.logit_softcap=null\. "):
        pick_family(GPT(11, **TINY, qk_norm=True, logit_softcap=30.0), families("lm"))
    assert pick_family(GPT(11, **TINY, zero_init_proj=True, tie_embeddings=False), families("lm")).hf_class == "GPT2LMHeadModel"


def test_the_registry_has_one_entry_per_class_and_each_model_class_one_kind():
    """One entry per transformers class; a family named by exported_as is of the same kind; kind_of is the
    model's class (lab.hf.registry.MODELS), and a model of no kind is one error."""
    from lab.errors import LabError
    from lab.hf.registry import FAMILIES, MODELS, family_named, kind_of

    names = [f.hf_class for f in FAMILIES]
    assert len(names) == len(set(names)) and {f.kind for f in FAMILIES} == set(MODELS)
    assert all(family_named(f.exported_as).kind == f.kind for f in FAMILIES if f.exported_as)
    assert kind_of(_model(11, **GPT2_LAYOUT)) == "lm"
    tiny = dict(d_model=8, n_layers=1, n_heads=2, max_seq_len=8)
    assert kind_of(EncoderDecoder(11, pad_id=0, bos_id=1, eos_id=2, **tiny)) == "seq2seq"
    assert kind_of(MaskedLM(11, pad_id=0, mask_id=1, **tiny)) == "mlm"
    assert kind_of(EncoderClassifier(11, pad_id=0, num_labels=2, **tiny)) == "encoder"
    with pytest.raises(LabError, match=r"lab.export does not know this model \(Linear\)"):
        kind_of(torch.nn.Linear(2, 2))


def test_two_families_that_reproduce_one_model_need_exported_as():
    """The registry's order never picks the class: two families that both fit are a bug unless one says which
    class it is exported as (Mistral's layout is exported as Llama)."""
    from lab.hf.exporting import pick_family
    from lab.hf.llama import Llama
    from lab.hf.mistral import Mistral

    model = _model(11, **LLAMA_LAYOUT)
    assert pick_family(model, (Mistral(), Llama())).hf_class == "LlamaForCausalLM"

    class Twin(Llama):
        hf_class = "TwinForCausalLM"

    with pytest.raises(RuntimeError, match="TwinForCausalLM, LlamaForCausalLM all reproduce this model"):
        pick_family(model, (Twin(), Llama()))
