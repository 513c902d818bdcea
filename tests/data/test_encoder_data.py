"""Sentence data: BERT masking, the stratified split, length bucketing, user files, real learning on MR."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lab.data.batching import BucketBatchSampler, pad_batch
from lab.data.classification import LabelledFilesDataModule, MovieReviews, TextClassificationDataModule, load_split
from lab.data.mlm import IGNORE, MaskingCollator
from lab.errors import DataError

PAD, UNK, CLS, SEP, MASK = range(5)
V = 1000


def masked_sample(seed: int | None = None):
    torch.manual_seed(0)
    lengths = torch.randint(5, 60, (400,))
    items = [(i, [CLS, *torch.randint(5, V, (int(n) - 2,)).tolist(), SEP]) for i, n in enumerate(lengths)]
    items[0][1][3] = UNK  # specials inside a text are never chosen either
    collate = MaskingCollator(PAD, MASK, V, [PAD, UNK, CLS, SEP, MASK], seed=seed)
    inputs, targets = collate(items)
    return pad_batch([s for _, s in items], PAD), inputs, targets


def test_masking_proportions_hold_and_never_touch_special_tokens():
    original, inputs, targets = masked_sample()
    special = torch.isin(original, torch.tensor([PAD, UNK, CLS, SEP, MASK]))
    chosen = targets != IGNORE
    assert not (chosen & special).any(), "a special token or padding was chosen"
    assert torch.equal(inputs[special], original[special]), "a special token or padding was changed"
    assert torch.equal(targets[chosen], original[chosen]), "targets must be the original tokens"
    n = int(chosen.sum())
    assert abs(n / int((~special).sum()) - 0.15) < 0.01
    to_mask = (inputs[chosen] == MASK).float().mean()
    unchanged = (inputs[chosen] == original[chosen]).float().mean()
    random = 1 - to_mask - unchanged
    assert abs(to_mask - 0.8) < 0.02 and abs(random - 0.1) < 0.015 and abs(unchanged - 0.1) < 0.015
    assert not ((inputs != original) & ~chosen).any(), "a token that was not chosen was changed"
    assert not torch.isin(inputs[chosen & (inputs != original) & (inputs != MASK)], torch.arange(5)).any()


def test_validation_masks_are_fixed_by_seed_training_masks_are_not():
    _, a, _ = masked_sample(seed=7)
    _, b, _ = masked_sample(seed=7)
    assert torch.equal(a, b)
    torch.manual_seed(1)
    _, c, _ = masked_sample()
    assert not torch.equal(a, c)


def test_bucketing_covers_every_sentence_once_with_less_padding():
    torch.manual_seed(0)
    lengths = torch.randint(3, 80, (2000,)).tolist()

    def padding(sampler):
        batches = list(sampler)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(lengths)))
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)

    bucketed = BucketBatchSampler(lengths, 32, shuffle=True, seed=0)
    plain = BucketBatchSampler([0] * len(lengths), 32, shuffle=True, seed=0)
    assert padding(bucketed) < 0.2 * padding(plain)
    first = list(bucketed)
    bucketed.set_epoch(1)
    assert first != list(bucketed), "every epoch must draw new batches"


def test_movie_reviews_count_blank_lines_and_unrated_sentences(tmp_path, monkeypatch):
    """VADER's file read from a constructed copy (5 lines: 2 rated, 2 blank, 1 rated 0), counted by hand.
    Catches: blank lines skipped without a count."""
    from types import SimpleNamespace

    import lab.data.classification as classification
    from lab.data.sources.packages import COMPLETE
    from lab.data.sources.reading import DataReport

    inner = tmp_path / "vader" / "additional_resources" / "hutto_ICWSM_2014.tar.gz"
    text = inner.parent / "hutto_ICWSM_2014" / "hutto_ICWSM_2014" / "movieReviewSnippets_GroundTruth.txt"
    text.parent.mkdir(parents=True)
    inner.write_bytes(b"the archive, already extracted")
    (inner.parent / "hutto_ICWSM_2014" / COMPLETE).write_text(inner.name)
    text.write_text("1\t2.5\tA fine film.\n\n2\t-1.0\tA dull film.\n   \n3\t0\tA film.\n")
    monkeypatch.setattr(classification, "VADER", SimpleNamespace(name="vader", fetch=lambda cache_dir: tmp_path))
    report = DataReport("classification")
    rows = MovieReviews().load(tmp_path, report)["all"]
    assert [r[:2] for r in rows] == [("A fine film.", "positive"), ("A dull film.", "negative")]
    events = {(e["action"], e["reason"]): (e["count"], e["first"]) for e in report.to_dict()["events"]}
    assert events == {("skipped", "blank lines"): (2, [f"{text.name}:2", f"{text.name}:4"]),
                      ("dropped", "sentences rated exactly 0 (no sentiment sign)"): (1, [f"{text.name}:5"])}


def test_movie_review_split_is_stratified_disjoint_and_cached():
    cache = Path(os.environ.get("LAB_CACHE_DIR", "~/.cache/lab")).expanduser()  # the real corpus, fetched once
    splits, report = load_split(MovieReviews(), cache, split_seed=0)
    sizes = {k: len(v) for k, v in splits.items()}
    assert sum(sizes.values()) == 10568 and abs(sizes["train"] / 10568 - 0.8) < 0.001
    assert report.count("dropped", "all", "sentences rated exactly 0 (no sentiment sign)") == 37
    assert report.count("dropped", "val") == report.count("dropped", "test") == 0  # MR has no cross-split duplicates
    texts = {k: {t for t, _, _ in v} for k, v in splits.items()}
    assert not texts["train"] & texts["test"] and not texts["val"] & texts["test"]
    pos = {k: sum(y == "positive" for _, y, _ in v) / len(v) for k, v in splits.items()}
    assert max(pos.values()) - min(pos.values()) < 0.005  # stratified
    assert load_split(MovieReviews(), cache, split_seed=0)[0] == splits  # the cached copy is what was computed
    assert load_split(MovieReviews(), cache, split_seed=1)[0]["test"] != splits["test"]


@pytest.mark.parametrize("ext", ["tsv", "csv", "jsonl"])
def test_user_files_give_labels_and_a_stratified_split(tmp_path, ext):
    rows = [(f"{w} movie number {i}", lab) for i in range(60) for w, lab in [("great", "pos"), ("awful", "neg"), ("odd", "meh")]]
    path = tmp_path / f"reviews.{ext}"
    if ext == "jsonl":
        path.write_text("".join(json.dumps({"review": t, "y": y}) + "\n" for t, y in rows))
    else:
        sep = "\t" if ext == "tsv" else ","
        path.write_text(f"review{sep}y\n" + "".join(f"{t}{sep}{y}\n" for t, y in rows))
    dm = LabelledFilesDataModule(str(path), text_field="review", label_field="y", cache_dir=str(tmp_path),
                                 vocab_size=200, batch_size=8)
    dm.setup()
    assert dm.checkpoint_metadata()["labels"] == ["meh", "neg", "pos"]
    assert dm.vocab["num_labels"] == 3
    assert [len(dm.encoded[s][1]) for s in ("train", "val", "test")] == [144, 18, 18]
    assert torch.tensor(dm.encoded["val"][1]).bincount().tolist() == [6, 6, 6]
    ids, _labels = next(iter(dm.val_dataloader()))
    assert ids[:, 0].eq(dm.tokenizer.token_id("[CLS]")).all() and ids.shape[0] == 8


def test_user_file_with_a_wrong_field_gives_a_clear_error(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text("text\tlabel\nfine\tpos\n")
    dm = LabelledFilesDataModule(str(path), label_field="sentiment", cache_dir=str(tmp_path))
    with pytest.raises(DataError, match="header line has no .sentiment. column"):
        dm.setup()


def test_classifier_beats_the_majority_class_on_a_tiny_slice(tmp_path):
    """Real learning: 2,000 MR training sentences, a 1-layer encoder, ~190 steps, judged on 600 held-out ones."""
    from lab.models.encoder import EncoderClassifier

    torch.manual_seed(0)
    dm = TextClassificationDataModule(MovieReviews(), vocab_size=3000, max_length=64, batch_size=32)
    dm.setup()
    ids, labels = dm.encoded["train"]
    keep = torch.randperm(len(ids))[:2000].tolist()
    dm.encoded["train"] = ([ids[i] for i in keep], [labels[i] for i in keep])
    ids, labels = dm.encoded["val"]
    keep = torch.randperm(len(ids))[:600].tolist()
    dm.encoded["val"] = ([ids[i] for i in keep], [labels[i] for i in keep])
    model = EncoderClassifier(**dm.vocab, pooling="mean", d_model=64, n_layers=1, n_heads=4, max_seq_len=64, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    for _ in range(3):
        for x, y in dm.train_dataloader():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in dm.val_dataloader():
            correct += int((model(x).argmax(-1) == y).sum())
            total += len(y)
    val_labels = torch.tensor(dm.encoded["val"][1])
    majority = val_labels.bincount().max().item() / len(val_labels)
    assert correct / total > majority + 0.08, f"accuracy {correct / total:.3f} vs majority class {majority:.3f}"
