"""model.init_from=<Hugging Face directory> decides the model's shape (lab.hf.shape.decide): one test per family,
named after it. Each builds a tiny transformers model with random weights and settings off lab's presets'
(sizes, heads, grouped-query attention, epsilons, rotary base, biases, tying), composes a shipped preset of the
matching task with only model.init_from given, and the model lab then builds and loads computes transformers'
logits (1e-4, fp32). A typed override that contradicts the directory is one error naming both values."""
from __future__ import annotations

import pytest
import torch
from test_against_hf_export import PAIRS, SPECIALS, TEXT
from test_against_hf_import import _randomised, _save

from lab.data.tokenizers import HFTokenizer
from lab.errors import LabError
from lab.hf.importing import init_from, load
from lab.hf.shape import decide, given_keys
from lab.models import build_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bpe():
    return HFTokenizer.train([TEXT] * 20, ["<|endoftext|>"], vocab_size=300, kind="bpe")


def _built(compose, experiment, out, typed=()):
    """The preset composed with model.init_from=out (and typed), its shape decided, built with the directory's
    vocabulary facts and loaded as lab.train does. -> (model, what was taken)."""
    overrides = [f"+experiment={experiment}", f"model.init_from={out}", *typed]
    cfg = compose(overrides)
    taken = decide(cfg.model, overrides)
    imported = load(out).model
    facts = {k: getattr(imported, k) for k in ("vocab_size", "pad_id", "bos_id", "eos_id", "mask_id") if hasattr(imported, k)}
    if hasattr(imported, "encoder") and not hasattr(imported, "decoder"):  # an encoder: its vocabulary and padding
        facts |= {"vocab_size": imported.encoder.embed.tokens.num_embeddings, "pad_id": imported.encoder.pad_id,
                  "num_labels": 3}
    model = build_model(cfg.model, facts)
    init_from(model, str(out), {})
    return model.eval(), taken


def _same_logits(ours, theirs):
    assert ours.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


SMALL = dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=6, intermediate_size=40, max_position_embeddings=96,
             rms_norm_eps=1e-5)


def _lm(compose, hf, tok, tmp_path, experiment="gpt_small", shard=None):
    out = _save(_randomised(hf), tok, tmp_path, shard=shard)
    model, taken = _built(compose, experiment, out)
    ids = torch.randint(0, tok.vocab_size, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _same_logits(model(ids), hf(ids).logits)
    return model, taken


def test_against_hf_gpt2(compose, bpe, tmp_path):
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=bpe.vocab_size, n_embd=48, n_layer=3, n_head=6,
                                                              n_positions=96, activation_function="gelu",
                                                              layer_norm_epsilon=1e-3))
    _, taken = _lm(compose, hf, bpe, tmp_path, experiment="gpt_small_fast")  # QK-norm, rotary: all replaced
    assert (taken["positions"], taken["ffn"], taken["norm_eps"], taken["d_ff"]) == ("learned", "gelu_erf", 1e-3, 192)


def test_against_hf_llama(compose, bpe, tmp_path, caplog):
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=bpe.vocab_size, **SMALL, num_key_value_heads=2,
                                                                rope_theta=500.0, tie_word_embeddings=False))
    with caplog.at_level("INFO", logger="lab"):
        _, taken = _lm(compose, hf, bpe, tmp_path, shard="60KB")
    assert {k: taken[k] for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "rope_base",
                                  "tie_embeddings", "bias", "max_seq_len")} == \
        dict(d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, head_dim=8, d_ff=40, rope_base=500.0,
             tie_embeddings=False, bias=False, max_seq_len=96)
    line = next(r.message for r in caplog.records if "decides the model's shape" in r.message)
    assert "(LlamaForCausalLM) decides the model's shape: " in line and "model.n_kv_heads=2" in line


def test_against_hf_mistral(compose, bpe, tmp_path):
    hf = transformers.MistralForCausalLM(transformers.MistralConfig(vocab_size=bpe.vocab_size, **SMALL,
                                                                    num_key_value_heads=3, sliding_window=None))
    _, taken = _lm(compose, hf, bpe, tmp_path, experiment="gpt_nano_char")
    assert (taken["n_kv_heads"], taken["norm"]) == (3, "rmsnorm")


def test_against_hf_mixtral(compose, bpe, tmp_path):
    """The dense preset gets the directory's experts; the MoE preset keeps its training terms for them."""
    hf = transformers.MixtralForCausalLM(transformers.MixtralConfig(vocab_size=bpe.vocab_size, **SMALL, num_key_value_heads=2,
                                                                    num_local_experts=3, num_experts_per_tok=2))
    _, taken = _lm(compose, hf, bpe, tmp_path)
    assert (taken["moe"]["num_experts"], taken["moe"]["top_k"], taken["moe"]["expert_hidden"]) == (3, 2, 40)
    preset = compose(["+experiment=gpt_small_moe"]).model.moe
    model, taken = _built(compose, "gpt_small_moe", tmp_path)
    ids = torch.randint(0, bpe.vocab_size, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _same_logits(model(ids), hf(ids).logits)
    assert taken["moe"]["load_balance_weight"] == preset.load_balance_weight and taken["moe"]["num_experts"] == 3


def test_against_hf_qwen3(compose, bpe, tmp_path):
    hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(vocab_size=bpe.vocab_size, **SMALL, num_key_value_heads=2,
                                                                head_dim=16, tie_word_embeddings=True))
    _, taken = _lm(compose, hf, bpe, tmp_path)
    assert (taken["qk_norm"], taken["head_dim"], taken["tie_embeddings"]) == (True, 16, True)


def test_against_hf_apertus(compose, bpe, tmp_path):
    hf = transformers.ApertusForCausalLM(transformers.ApertusConfig(vocab_size=bpe.vocab_size, **SMALL, hidden_act="relu2",
                                                                    num_key_value_heads=3))
    _, taken = _lm(compose, hf, bpe, tmp_path)
    assert (taken["ffn"], taken["qk_norm"]) == ("relu_squared", True)


def _bert(cls, tmp_path):
    tok = HFTokenizer.train([TEXT] * 20, SPECIALS, vocab_size=200, kind="wordpiece")
    config = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                                     intermediate_size=40, max_position_embeddings=96, type_vocab_size=2, num_labels=3)
    hf = _randomised(cls(config))
    return hf, _save(hf, tok, tmp_path), torch.randint(5, tok.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1))


def test_against_hf_bert(compose, tmp_path):
    """BertForMaskedLM: continued pretraining (encoder_mlm), and the classifier's encoder (encoder_classifier: the
    pooler and the head are the task's own, the encoder's states are BERT's)."""
    hf, out, ids = _bert(transformers.BertForMaskedLM, tmp_path)
    model, taken = _built(compose, "encoder_mlm", out)
    with torch.no_grad():
        _same_logits(model(ids), hf(ids).logits)
    assert (taken["norm_placement"], taken["embed_norm"], taken["ffn"], taken["norm_eps"]) == ("post", True, "gelu_erf", 1e-12)
    classifier, _ = _built(compose, "encoder_classifier", out)
    with torch.no_grad():
        _same_logits(classifier.encoder(ids)[0], hf.bert(ids).last_hidden_state)
    assert classifier.classifier.out_features == 3


def test_against_hf_bert_classifier(compose, tmp_path):
    hf, out, ids = _bert(transformers.BertForSequenceClassification, tmp_path)
    model, _ = _built(compose, "encoder_classifier", out, ["model.pooling=bert"])
    with torch.no_grad():
        _same_logits(model.encoder(ids)[0], hf.bert(ids).last_hidden_state)
        _same_logits(model.pool(model.encoder(ids)[0], ids != 0), hf.bert(ids).pooler_output)


def _translator(compose, hf, tok, tmp_path, start=1):
    hf = _randomised(hf)
    if start == 0:  # T5's embedding init is N(0, 1)
        with torch.no_grad():
            hf.shared.weight.mul_(10.0)
    out = _save(hf, tok, tmp_path)
    model, taken = _built(compose, "translator_small", out)
    src = torch.randint(3, tok.vocab_size, (2, 15), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(3, tok.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = start
    with torch.no_grad():
        _same_logits(model(src, tgt), hf(input_ids=src, decoder_input_ids=tgt).logits)
    return taken


def _bart_like(config_class, tok, act):
    return config_class(vocab_size=tok.vocab_size, d_model=48, encoder_layers=3, decoder_layers=3, encoder_attention_heads=6,
                        decoder_attention_heads=6, encoder_ffn_dim=40, decoder_ffn_dim=40, max_position_embeddings=96,
                        activation_function=act, pad_token_id=0, eos_token_id=2, decoder_start_token_id=1,
                        scale_embedding=True)


def test_against_hf_marian(compose, tmp_path):
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    taken = _translator(compose, transformers.MarianMTModel(_bart_like(transformers.MarianConfig, tok, "relu")), tok, tmp_path)
    assert (taken["positions"], taken["norm_placement"], taken["n_layers"]) == ("sinusoidal", "post", 3)


def test_against_hf_pegasus(compose, tmp_path):
    tok = HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "<s>", "</s>"], vocab_size=200, kind="bpe")
    hf = transformers.PegasusForConditionalGeneration(_bart_like(transformers.PegasusConfig, tok, "gelu_new"))
    assert _translator(compose, hf, tok, tmp_path)["norm_placement"] == "pre"


def _t5_tok():
    return HFTokenizer.train([" ".join(PAIRS)] * 20, ["<pad>", "</s>", "<unk>"], vocab_size=200, kind="bpe")


def test_against_hf_t5(compose, tmp_path):
    tok = _t5_tok()
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=tok.vocab_size, d_model=48, d_kv=16, d_ff=40, num_heads=3, num_layers=2, dropout_rate=0.0,
        relative_attention_num_buckets=8, relative_attention_max_distance=12, layer_norm_epsilon=1e-5,
        decoder_start_token_id=0))
    taken = _translator(compose, hf, tok, tmp_path, start=0)
    assert (taken["positions"], taken["head_dim"], taken["output_scale"]) == ("relative", 16, True)


def test_against_hf_switch(compose, tmp_path):
    tok = _t5_tok()
    hf = transformers.SwitchTransformersForConditionalGeneration(transformers.SwitchTransformersConfig(
        vocab_size=tok.vocab_size, d_model=48, d_kv=16, d_ff=40, num_heads=3, num_layers=2, num_decoder_layers=2,
        num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, num_experts=3, expert_capacity=64,
        relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.0, layer_norm_epsilon=1e-5,
        decoder_start_token_id=0))
    taken = _translator(compose, hf, tok, tmp_path, start=0)
    assert (taken["moe"]["num_experts"], taken["moe"]["every_n"]) == (3, 2)


def test_an_override_that_contradicts_the_directory_is_one_error_naming_both(compose, bpe, tmp_path):
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=bpe.vocab_size, **SMALL))
    out = _save(hf, bpe, tmp_path)
    with pytest.raises(LabError, match=r"LlamaForCausalLM whose config.json decides the model's shape; "
                                       r"model.d_model=64 \(the directory's: 48\): drop the override"):
        _built(compose, "gpt_small", out, ["model.d_model=64"])
    model, _ = _built(compose, "gpt_small", out, ["model.d_model=48", "model.dropout=0.2"])  # agrees; not determined
    assert model.cfg.dropout == 0.2
    with pytest.raises(LabError, match="is a LlamaForCausalLM, which a MaskedLM cannot start from"):
        _built(compose, "encoder_mlm", out)


def test_given_keys_are_the_command_lines_model_keys():
    assert given_keys(["+experiment=x", "model.d_model=3", "+model.norm_eps=1", "++model.moe.top_k=2", "data.x=1",
                       "~model.bias"]) == {"d_model", "norm_eps", "moe.top_k", "bias"}


@pytest.mark.slow  # lab.train and lab.export in subprocesses
def test_docs_continue_pretraining_a_llama_then_export(bpe, tmp_path):
    """docs/export.md's walkthrough as typed (a tiny Llama directory for hf/llama, a text file for notes/*.txt):
    the directory decides the shape, every tensor is loaded, and the export loads in transformers with the
    checkpoint's logits."""
    from conftest import run_dirs, run_module, train

    from lab.checkpoints.reading import load_model

    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=bpe.vocab_size, **SMALL, num_key_value_heads=2))
    llama = _save(_randomised(hf), bpe, tmp_path / "llama")
    (tmp_path / "notes.txt").write_text((TEXT + "\n") * 200)
    train(["+experiment=gpt_small", "data=text_files", f"data.corpus.train_files=[{tmp_path / 'notes.txt'}]",
           f"model.init_from={llama}", f"data.tokenizer_from={llama}", "trainer.max_steps=2", "trainer.val_check_interval=2",
           "data.eval_batches=1", "test=false", "logger.wandb.mode=disabled", "callbacks.progress=null"], tmp_path / "runs")
    (run,) = run_dirs(tmp_path / "runs")
    log = (run / "train.log").read_text()
    assert f"model.init_from={llama} (LlamaForCausalLM) decides the model's shape: model.d_model=48" in log
    assert f"init_from {llama} (LlamaForCausalLM): loaded " in log and "new (trained from init): -" in log
    out = tmp_path / "exports" / "llama_notes"
    result = run_module("lab.export", [f"ckpt_path={run}", f"out_dir={out}"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    model, tok, _ = load_model(best)
    ids = torch.tensor([tok.encode(TEXT)[:40]])
    with torch.no_grad():
        exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
        torch.testing.assert_close(exported(ids).logits, model(ids), atol=1e-4, rtol=0)
