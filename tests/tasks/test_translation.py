"""Seq2seq translator: decoding equivalences, padding invariance, loss, BLEU, learning, data, CLI."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess

import pytest
import sacrebleu
import torch

from lab.data.parallel import ParallelTextDataModule, ding_pairs, strip_annotations
from lab.data.sources.packages import DebianPackage, sha256_of
from lab.data.sources.reading import DataReport
from lab.errors import DataError
from lab.models.decoding import beam_search, greedy_translate
from lab.models.seq2seq import EncoderDecoder
from lab.tasks.optim import inverse_sqrt
from lab.tasks.translation import corpus_scores, label_smoothed_cross_entropy
from tests.conftest import TINY_TRANSLATOR, read_metrics, run_dirs, run_module, train, translator_eval

PAD, BOS, EOS = 0, 1, 2
LAYOUTS = {
    "modern": dict(norm_placement="pre", positions="rotary", ffn="swiglu"),
    "vanilla": dict(norm_placement="post", positions="sinusoidal", ffn="relu", scale_embeddings=True),
}


def tiny_model(layout: str = "modern", seed: int = 0, vocab: int = 40, **kw) -> EncoderDecoder:
    torch.manual_seed(seed)
    arch = dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=32, **LAYOUTS[layout], **kw)
    return EncoderDecoder(vocab, PAD, BOS, EOS, **arch).eval()


def padded_sources(seed: int = 0, vocab: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (5, 9), generator=g)
    src[:, -1] = EOS
    for row, length in ((1, 4), (3, 6), (4, 2)):  # ragged batch: eos then padding
        src[row, length - 1], src[row, length:] = EOS, PAD
    return src


@pytest.mark.parametrize("layout", LAYOUTS)
def test_beam_size_one_equals_greedy(layout):
    model, src = tiny_model(layout), padded_sources()
    assert beam_search(model, src, beam_size=1) == greedy_translate(model, src)


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam4"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cached_decoding_equals_recomputation(layout, beam_size):
    model, src = tiny_model(layout, seed=1), padded_sources(1)
    if beam_size == 1:
        assert greedy_translate(model, src, use_cache=True) == greedy_translate(model, src, use_cache=False)
    else:
        assert beam_search(model, src, beam_size, use_cache=True) == beam_search(model, src, beam_size, use_cache=False)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_source_padding_changes_nothing(layout):
    """A sentence alone, or padded with extra pads in a batch, gives the same logits and translation."""
    model = tiny_model(layout, seed=2)
    sentence = torch.tensor([[5, 9, 11, 7, EOS]])
    padded = torch.cat([sentence, torch.full((1, 6), PAD)], dim=1)
    batch = torch.cat([padded, torch.tensor([[4] * 10 + [EOS]])])  # a longer neighbour forces the padding
    tgt = torch.tensor([[BOS, 6, 8, 3]])
    alone = model(sentence, tgt)
    in_batch = model(batch, tgt.expand(2, -1))[:1]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)
    assert beam_search(model, batch, 3)[0] == beam_search(model, sentence, 3)[0]


def test_encoder_and_cross_attention_ignore_what_sits_in_pad_positions():
    """Garbage in pad positions must not leak: the source mask is applied in encoder and cross-attention."""
    model = tiny_model(seed=3)
    src = torch.tensor([[5, 9, 11, EOS, PAD, PAD]])
    memory, mask = model.encode(src)
    noisy = memory.clone()
    noisy[:, 4:] = torch.randn_like(noisy[:, 4:]) * 100  # what the decoder would see if pads leaked
    tgt = torch.tensor([[BOS, 6, 8]])
    torch.testing.assert_close(model.decode(tgt, noisy, mask), model.decode(tgt, memory, mask))


def test_shared_and_tied_embeddings_are_one_tensor():
    shared = tiny_model(tie_embeddings=True, share_embeddings=True)
    assert shared.src_embed.tokens.weight is shared.tgt_embed.tokens.weight is shared.lm_head.weight
    separate = tiny_model(tie_embeddings=False, share_embeddings=False)
    assert separate.src_embed.tokens.weight is not separate.tgt_embed.tokens.weight
    assert separate.lm_head.weight is not separate.tgt_embed.tokens.weight


def test_label_smoothed_loss_matches_hand_computation():
    logits = torch.tensor([[[2.0, 0.5, -1.0], [0.0, 1.0, 3.0], [1.0, 1.0, 1.0]]])  # [1, 3, V=3]
    target = torch.tensor([[1, 2, PAD]])  # the third position is padding (id 0)
    eps, V = 0.1, 3
    total = 0.0
    for t in range(2):
        logp = [x - math.log(sum(math.exp(v) for v in logits[0, t].tolist())) for x in logits[0, t].tolist()]
        total += (1 - eps) * -logp[int(target[0, t])] + eps * sum(-lp for lp in logp) / V
    expected = total / 2  # mean over the two real tokens only
    assert label_smoothed_cross_entropy(logits, target, eps, PAD).item() == pytest.approx(expected, rel=1e-6)


def test_bleu_and_chrf_of_detokenized_text_equal_sacrebleus_own():
    from lab.data.tokenizers import train_tokenizer

    refs = ["The cat sat on the mat.", "It's raining cats and dogs, isn't it?", "Wie spät ist es?"]
    hyps = ["The cat sat on a mat.", "It is raining cats and dogs, isn't it?", "How late is it?"]
    tok = train_tokenizer("bpe", refs + hyps, ["<pad>", "<s>", "</s>"], 300)
    detok = [tok.decode(tok.encode(h)) for h in hyps]  # the task scores decoded ids
    assert detok == hyps  # byte-level BPE round-trips exactly, spaces and apostrophes included
    bleu, chrf, _, _ = corpus_scores(detok, refs)
    assert bleu.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score)
    assert chrf.score == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert 0 < bleu.score < 100


def test_translator_learns_to_reverse_a_synthetic_language():
    """Reverse sequences of 8 symbols: untrained it gets none right, after 250 steps nearly all."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add contention
    try:
        g = torch.Generator().manual_seed(0)

        def batch(n: int):
            lengths = torch.randint(2, 6, (n,), generator=g)
            body = torch.randint(3, 11, (n, 5), generator=g)
            src, tgt = torch.full((n, 6), PAD), torch.full((n, 7), PAD)
            for i, L in enumerate(lengths.tolist()):
                src[i, :L], src[i, L] = body[i, :L], EOS
                tgt[i, 0], tgt[i, 1 : L + 1], tgt[i, L + 1] = BOS, body[i, :L].flip(0), EOS
            return src, tgt

        torch.manual_seed(0)
        model = EncoderDecoder(11, PAD, BOS, EOS, d_model=64, n_layers=2, n_heads=4, max_seq_len=16)
        test_src, test_tgt = batch(100)
        expected = [row[1 : row.index(EOS)] for row in test_tgt.tolist()]

        def accuracy(beam_size: int = 1) -> float:
            model.eval()
            out = beam_search(model, test_src, beam_size) if beam_size > 1 else greedy_translate(model, test_src)
            return sum(o == e for o, e in zip(out, expected)) / len(expected)

        before = accuracy()
        opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
        schedule = inverse_sqrt(opt, warmup_steps=30)
        model.train()
        for _ in range(250):
            src, tgt = batch(32)
            loss = label_smoothed_cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:], 0.0, PAD)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            schedule.step()
        assert before < 0.05
        assert accuracy() > 0.9
        assert accuracy(beam_size=4) > 0.9
    finally:
        torch.set_num_threads(threads)


# ---- data ----

DING_LINES = [
    "# comment line\n",
    "Hund {m} | Der Hund bellt laut. | Er hat einen Hund. :: dog | The dog barks loudly. | He has a dog [coll.].\n",
    "Es regnet in Strömen. {v}; Es gießt. :: It's raining cats and dogs. (idiom); It's pouring.\n",
    "Der Hund bellt laut. :: The dog is barking loudly.\n",  # the same German again: kept once, first wins
    "Ich komme gleich. :: I'm coming.\n",  # 2 English words (need >= 4)
    "kurz | Das ist zu kurz :: short | That is too short\n",  # no sentence punctuation
    "eins | Das ist gut so. :: one\n",  # misaligned alternatives
]


def test_ding_pairs_keep_first_alternative_strip_annotations_and_dedupe():
    assert strip_annotations("He has a dog [coll.] {m} (sth. (nested)).") == "He has a dog."
    assert ding_pairs(DING_LINES) == [
        ("Der Hund bellt laut.", "The dog barks loudly."),
        ("Er hat einen Hund.", "He has a dog."),
        ("Es regnet in Strömen.", "It's raining cats and dogs."),
    ]


def test_ding_pairs_count_what_they_leave_out():
    """Ding's fixed selection, counted in the data report as the other drops are (checked against a hand count of
    DING_LINES plus a blank line and a line without ' :: '). Catches: an entry or alternative left out uncounted."""
    report = DataReport("translation")
    assert ding_pairs([*DING_LINES, "\n", "nur Deutsch.\n"], report, "de-en") == ding_pairs(DING_LINES)
    found = {(e["action"], e["reason"].split(" (")[0]): (e["count"], e["first"]) for e in report.to_dict()["events"]
             if e["split"] == "train"}
    assert found == {
        ("skipped", "alternatives that are not sentences"): (4, ["de-en:2", "de-en:5", "de-en:6", "de-en:6"]),
        ("dropped", "repeated German sentences"): (1, ["de-en:4"]),
        ("dropped", "entries whose ' | ' alternatives do not line up"): (1, ["de-en:7"]),
        ("skipped", "blank lines"): (1, ["de-en:8"]),
        ("dropped", "lines without ' :: ' between German and English"): (1, ["de-en:9"]),
    }
    assert "data: dropped in train: 1 repeated German sentences (the first translation kept) (first: de-en:4)" in report.lines()


def write_pairs(path, n: int, fmt: str, start: int = 0) -> list[tuple[str, str]]:
    pairs = [(f"quelle nummer {i} hier.", f"target number {i} here.") for i in range(start, start + n)]
    with open(path, "w") as f:
        for s, t in pairs:
            f.write(json.dumps({"de": s, "en": t}) + "\n" if fmt == "jsonl" else f"{s}\t{t}\n")
    return pairs


def user_datamodule(tmp_path, **kw) -> ParallelTextDataModule:
    dm = ParallelTextDataModule(cache_dir=str(tmp_path / "cache"), vocab_size=300, valid_size=10, test_size=10,
                                batch_size=8, eval_batch_size=8, seed=7, **kw)
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("fmt", ["tsv", "jsonl"])
def test_user_pairs_seeded_split_direction_and_dynamic_padding(tmp_path, fmt):
    pairs = write_pairs(tmp_path / f"pairs.{fmt}", 60, fmt)
    fields = {"source_field": "de", "target_field": "en"} if fmt == "jsonl" else {}
    dm = user_datamodule(tmp_path, train_file=str(tmp_path / f"pairs.{fmt}"), **fields)
    splits = {k: set(v.pairs) for k, v in dm.datasets.items()}
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [40, 10, 10]
    assert set().union(*splits.values()) == set(pairs) and not splits["train"] & (splits["valid"] | splits["test"])
    assert dm.vocab["pad_id"] == PAD and dm.vocab["bos_id"] == BOS and dm.vocab["eos_id"] == EOS
    again = user_datamodule(tmp_path, train_file=str(tmp_path / f"pairs.{fmt}"), **fields)
    assert again.datasets["test"].pairs == dm.datasets["test"].pairs  # the seed fixes the split

    reverse = user_datamodule(tmp_path, train_file=str(tmp_path / f"pairs.{fmt}"), reverse=True, **fields)
    assert reverse.datasets["test"].pairs == [(t, s) for s, t in dm.datasets["test"].pairs]

    rows = [dm.datasets["train"][i] for i in range(4)]
    b = dm.collate(rows)
    longest = max(len(r[1]) for r in rows)
    assert b["source"].shape == (4, longest)  # padded to this batch's longest, not to a fixed length
    assert b["target"][:, 0].eq(BOS).all() and (b["source"] == EOS).sum() == 4


def test_token_budget_batches_are_bucketed_seeded_and_cover_every_pair_once(tmp_path):
    with open(tmp_path / "pairs.tsv", "w") as f:  # sentence lengths 1..12 words, shuffled
        for i in range(80):
            words = " ".join(["wort"] * (1 + (i * 7) % 12))
            f.write(f"{words} {i}.\tword {i} {words}.\n")

    def epoch(batch_tokens: int | None, seed: int = 7) -> list[dict]:
        dm = user_datamodule(tmp_path, train_file=str(tmp_path / "pairs.tsv"), batch_tokens=batch_tokens)
        dm.seed = seed
        return list(dm.train_dataloader())

    def padding(batches) -> float:
        tokens = sum(b[k].numel() for b in batches for k in ("source", "target"))
        return sum(b[k].eq(PAD).sum().item() for b in batches for k in ("source", "target")) / tokens

    bucketed = epoch(200)
    seen = [i for b in bucketed for i in b["index"].tolist()]  # training batches carry ids and indices, no text
    assert sorted(seen) == list(range(60))  # every training pair once per epoch
    assert all(b["source"].numel() + b["target"].numel() <= 200 for b in bucketed)
    assert len({len(b["index"]) for b in bucketed}) > 1  # short pairs come more to a batch
    assert padding(bucketed) < 0.5 * padding(epoch(None))
    assert [b["index"].tolist() for b in epoch(200)] == [b["index"].tolist() for b in bucketed]  # data.seed fixes them
    assert [b["index"].tolist() for b in epoch(200, seed=8)] != [b["index"].tolist() for b in bucketed]
    with pytest.raises(DataError, match="data.batch_tokens=0"):
        epoch(0)


def test_user_valid_file_is_used_instead_of_a_split(tmp_path):
    write_pairs(tmp_path / "train.tsv", 50, "tsv")
    valid = write_pairs(tmp_path / "valid.tsv", 5, "tsv", start=50)  # pairs train does not hold (see test_data_files)
    dm = user_datamodule(tmp_path, train_file=str(tmp_path / "train.tsv"), valid_file=str(tmp_path / "valid.tsv"))
    assert dm.datasets["valid"].pairs == valid
    assert len(dm.datasets["train"]) == 40 and len(dm.datasets["test"]) == 10


@pytest.mark.parametrize("content,message", [
    ('{"src": "a", "tgt": "b"}\n', "has no fields 'source' / 'target'"),
    ("only one column\n", "has 1 tab-separated columns, too few for data.source_column / target_column"),
], ids=["jsonl-missing-field", "tsv-one-column"])
def test_malformed_user_pairs_name_the_line_and_the_fix(tmp_path, content, message):
    path = tmp_path / ("bad.jsonl" if content.startswith("{") else "bad.tsv")
    path.write_text(content)
    with pytest.raises(DataError, match=f"{path.name}:1: {message}"):
        user_datamodule(tmp_path, train_file=str(path))


@pytest.fixture
def fake_deb(tmp_path):
    """A real (tiny) .deb holding usr/share/trans/de-en, built with dpkg-deb."""
    if not shutil.which("dpkg-deb"):
        pytest.skip("dpkg-deb is not installed")
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: fake-trans\nVersion: 1.0\nArchitecture: all\n"
                                              "Maintainer: lab <lab@example.org>\nDescription: test\n")
    data = root / "usr/share/trans/de-en"
    data.parent.mkdir(parents=True)
    data.write_text("".join(DING_LINES))
    subprocess.run(["dpkg-deb", "--build", str(root), str(tmp_path / "fake-trans_1.0_all.deb")], check=True,
                   capture_output=True)
    return tmp_path / "fake-trans_1.0_all.deb", sha256_of(data)


def test_debian_package_unpacks_verifies_and_refuses_a_wrong_hash(tmp_path, fake_deb):
    deb, digest = fake_deb
    cache = tmp_path / "cache"
    (cache / "sources" / "fake-trans_1.0").mkdir(parents=True)
    shutil.copy(deb, cache / "sources" / "fake-trans_1.0")
    good = DebianPackage("fake-trans", "1.0", "usr/share/trans/de-en", digest)
    assert (good.fetch(cache) / good.member).read_text() == "".join(DING_LINES)
    bad = DebianPackage("fake-trans", "1.0", "usr/share/trans/de-en", "0" * 64)
    with pytest.raises(DataError, match="expected 0000.*corrupt or not the pinned version"):
        bad.fetch(cache)


def test_missing_apt_lists_say_what_to_run(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package trans-de-en' >&2\nexit 100\n")
    (bin_dir / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    source = DebianPackage("trans-de-en", "1.9-6", "usr/share/trans/de-en", "0" * 64)
    with pytest.raises(DataError, match=r"sudo apt-get update.*put it in"):
        source.fetch(tmp_path / "cache")


# ---- configs and the command line ----

def test_vanilla_is_the_paper_layout_at_the_small_budget(compose):
    small, vanilla = compose(["+experiment=translator_small"]), compose(["+experiment=translator_vanilla"])
    assert (vanilla.model.norm_placement, vanilla.model.positions, vanilla.model.ffn) == ("post", "sinusoidal", "relu")
    assert vanilla.model.scale_embeddings and (small.model.norm_placement, small.model.share_embeddings) == ("pre", True)
    for key in ("d_model", "n_layers", "n_heads"):
        assert small.model[key] == vanilla.model[key]
    assert small.trainer.max_steps == vanilla.trainer.max_steps and small.data.batch_size == vanilla.data.batch_size
    assert compose(["+experiment=translator_small", "task/scheduler=cosine"]).task.scheduler._target_.endswith("warmup_cosine")


@pytest.mark.parametrize("experiment", ["translator_small", pytest.param("translator_vanilla", marks=pytest.mark.slow)])
def test_translator_trains_then_translates_and_evaluates_through_the_cli(request, tmp_path, experiment):
    """translator_small: the run shared with the lab.eval tests below (conftest.translator_run) and its lab.eval."""
    env = {"OMP_NUM_THREADS": "1"}
    if experiment == "translator_vanilla":  # the entry points after training do not depend on the layout
        train([f"+experiment={experiment}", *TINY_TRANSLATOR], tmp_path, env=env)
        (run,) = run_dirs(tmp_path)
    else:
        _, run = request.getfixturevalue("translator_run")
    rows = read_metrics(run)
    assert any(r.get("val/bleu") for r in rows) and any(r.get("test/chrf") for r in rows)
    if experiment == "translator_vanilla":
        return
    ckpt = str(run / "checkpoints" / "last.ckpt")
    tested, _ = request.getfixturevalue("translator_tested")
    assert tested.returncode == 0, tested.stderr[-2000:]
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in tested.stdout

    # n-best through the CLI: per input line 3 (score, translation) pairs, best first, led by the beam's best
    from lab.checkpoints.reading import load_model, trained_length
    from lab.runtime.inference.predict import translate_lines

    texts = ["Wie spät ist es?", "Das Haus ist alt und groß."]
    (tmp_path / "in.de").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    out = run_module("lab.translate", [f"ckpt_path={ckpt}", f"input_file={tmp_path / 'in.de'}", "beam_size=3",
                                       "n_best=3", "max_len_offset=3"], tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    model, tokenizer, meta = load_model(ckpt)
    best = translate_lines(model, tokenizer, texts, 64, 3, trained_length(meta), length_penalty=1.0, max_len_ratio=1.5,
                           max_len_offset=3)  # lab.translate's defaults, without n_best
    lines = out.stdout.splitlines()
    assert len(lines) == len(texts)
    for line, expected in zip(lines, best):
        fields = line.split("\t")
        scores, hyps = [float(x) for x in fields[0::2]], fields[1::2]
        assert len(hyps) == 3 and scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
        assert hyps[0] == expected
    bad = run_module("lab.translate", [f"ckpt_path={ckpt}", "text="], tmp_path, env=env)
    assert bad.returncode == 2 and 'text="" is empty' in bad.stderr


# ---- lab.eval on a translator: paired bootstrap against another system, the validation split ----------------

def test_eval_compares_with_a_system_output_file_by_sacrebleus_paired_bootstrap(translator_run, translator_tested, tmp_path):
    tested, outputs = translator_tested
    assert tested.returncode == 0, tested.stderr[-2000:]
    refs = (outputs / "test.reference").read_text().splitlines()
    hyps = (outputs / "test.hypothesis").read_text().splitlines()
    assert len(refs) == len(hyps) == 40
    # the other system: the references themselves for the first half, this checkpoint's output for the rest
    (tmp_path / "other.en").write_text("".join(line + "\n" for line in refs[:20] + hyps[20:]))
    out = translator_eval(translator_run, f"compare_to={tmp_path / 'other.en'}", "bootstrap_samples=200")
    assert out.returncode == 0, out.stderr[-2000:]
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score
    other = sacrebleu.corpus_bleu(refs[:20] + hyps[20:], [refs], tokenize="13a").score
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("BLEU: ckpt_path"))
    assert f"ckpt_path {bleu:.2f}" in line and f"compare_to {other:.2f}" in line
    p = float(line.rsplit("p = ", 1)[1])
    assert p < 0.05  # half the sentences perfect: a real difference
    assert "BLEU|nrefs:1|bs:200|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:" in out.stdout
    assert "chrF2|nrefs:1|bs:200|seed:12345" in out.stdout

    (tmp_path / "short.en").write_text("only one line\n")
    bad = translator_eval(translator_run, f"compare_to={tmp_path / 'short.en'}")
    assert bad.returncode == 2 and "has 1 lines, but the test split has 40 sentences" in bad.stderr


def test_eval_compares_two_checkpoints_on_the_same_test_split(translator_run):
    _, run = translator_run
    best = next((run / "checkpoints").glob("best-step*.ckpt"))
    out = translator_eval(translator_run, f"compare_to={best}", "bootstrap_samples=100")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "paired bootstrap resampling (sacreBLEU), 40 test sentences" in out.stdout
    assert "BLEU|nrefs:1|bs:100" in out.stdout


def test_eval_on_the_validation_split_decodes_the_validation_sentences(translator_run, translator_tested, tmp_path):
    out = translator_eval(translator_run, "split=valid", f"outputs_dir={tmp_path / 'valid'}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "on the validation split (the metrics below are named test/*)" in out.stdout
    tested, test_outputs = translator_tested
    assert tested.returncode == 0, tested.stderr[-2000:]
    valid_sources = (tmp_path / "valid" / "test.source").read_text().splitlines()
    test_sources = (test_outputs / "test.source").read_text().splitlines()
    assert len(valid_sources) == len(test_sources) == 40 and not set(valid_sources) & set(test_sources)
