"""Held-out splits of bounded size (issue 50): under its cap a fraction is each file's tail (the plan and cache
key of before the caps); over it, each split is its capped size in stretches of whole lines spread over the files
(lab.data.corpora.spread), seeded; the sizes are recorded and said, and a share far from the one asked is warned
about."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import lab.data.shards as shards
import lab.data.sources.stream as stream
from lab.data.corpora import FilePlan, TextFiles, spread, stat_key
from lab.data.lm import LMDataModule
from lab.data.mlm import MLMDataModule
from lab.data.sources.reading import DataReport, FileFormat
from lab.errors import DataError


def lines_corpus(tmp_path: Path, counts: tuple[int, ...] = (3000, 1000)) -> list[str]:
    """Files of 10-byte lines `line 0042\\n` numbered across the files, so a byte offset c of the files laid end
    to end falls in line c // 10."""
    files, n = [], 0
    for i, count in enumerate(counts):
        path = tmp_path / f"{i}.txt"
        path.write_text("".join(f"line {n + k:04d}\n" for k in range(count)))
        files.append(str(path))
        n += count
    return files


def datamodule(tmp_path: Path, files: list[str], **corpus) -> LMDataModule:
    return LMDataModule(TextFiles(files, **corpus), tokenizer="char", block_size=16, batch_size=4,
                        cache_dir=str(tmp_path / "cache"))


def split_lines(dm: LMDataModule, tokens) -> list[int]:
    eos = dm.vocab["eos_id"]
    text = dm.tokenizer.decode([t for t in tokens[0 : len(tokens)].tolist() if t != eos])
    return [int(line.split()[1]) for line in text.splitlines()]


def test_spread_puts_one_stretch_of_each_split_in_each_stratum_at_its_seeded_offset():
    """Hand computation: 90 held-out bytes in pieces of 40 -> 3 strata of the 1,500 bytes; in stratum j a val
    stretch of 20 then a test stretch of 10 bytes at lo_j + randrange(500 - 30 + 1) of random.Random(7).
    Catches a wrong number of strata, an offset drawn over a range one short, a stretch put in the wrong file."""
    rng = random.Random(7)
    at = [j * 500 + rng.randrange(471) for j in range(3)]
    plans = spread([1000, 500], {"val": 60, "test": 30}, seed=7, piece=40)
    assert at[0] > 0 and at[2] > 1000  # (this seed's draw: each file starts with training text)
    assert plans[0] == (("train", "val", "test", "train", "val", "test", "train"),
                        (at[0], at[0] + 20, at[0] + 30, at[1], at[1] + 20, at[1] + 30))
    b = at[2] - 1000  # the third stratum is the second file
    assert plans[1] == (("train", "val", "test", "train"), (b, b + 20, b + 30))


@pytest.mark.parametrize("seed", range(12))
def test_a_stretch_over_a_file_boundary_is_split_between_the_files(seed):
    """One stretch of 50 bytes in 200 bytes of two files of 100: each file holds its intersection with it."""
    o = random.Random(seed).randrange(151)
    plans = spread([100, 100], {"val": 50}, seed=seed, piece=1000)

    def part(lo: int, hi: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """A naive reference: the file's bytes [0, 100) with val on [lo, hi)."""
        bounds = [(s, e) for s, e in (("train", lo), ("val", hi), ("train", 100)) if e > 0]
        bounds = [b for i, b in enumerate(bounds) if b[1] > (bounds[i - 1][1] if i else 0)]
        return tuple(s for s, _ in bounds), tuple(e for _, e in bounds[:-1])

    assert plans[0] == part(min(o, 100), min(o + 50, 100))
    assert plans[1] == part(max(o - 100, 0), max(o - 50, 0))


def test_a_budget_the_size_of_its_stratum_takes_all_of_it():
    """The one place a stretch that fills its stratum fits is the stratum's start (randrange(1)): catches the
    offset drawn over one place too few (otherwise it differs only when the draw is the last place)."""
    assert spread([60, 40], {"val": 100}, seed=3, piece=1000) == [(("val",), ()), (("val",), ())]
    assert spread([100], {"val": 60, "test": 40}, seed=3, piece=50) == [(("val", "test", "val", "test"), (30, 50, 80))]


def test_under_the_cap_the_plan_and_cache_key_are_the_file_tails_of_before(tmp_path):
    """A corpus whose fractions are within the caps keeps the plan (and so the cache) it had before the caps:
    the last fractions of each file's bytes, cut anywhere. Catches a cap that applies to every corpus, or that
    enters every cache key."""
    files = lines_corpus(tmp_path, (4000,))
    size = 40000
    corpus = TextFiles(files, val_fraction=0.2, test_fraction=0.1)
    plans = corpus.files(tmp_path)
    fmt = FileFormat(prefix="data.corpus.")
    before = [FilePlan(Path(files[0]), files[0], ("train", "val", "test"), (int(size * 0.7), int(size * 0.9)),
                       "train_files", fmt)]
    assert plans == before and corpus.before_caps is None
    assert stat_key(plans, "stat") == stat_key(before, "stat")
    assert {s: h["drawn"] for s, h in corpus.held_out.items()} == {"val": "tails", "test": "tails"}


def test_over_the_cap_each_split_is_its_capped_size_of_whole_lines_at_the_seeded_offset(tmp_path, caplog):
    """4,000 lines (40,000 bytes), 10% asked for each split, capped at 2,000 and 1,000 bytes: one stratum (under
    PIECE_BYTES); the val stretch starts at o = randrange(40,000 - 3,000 + 1) of random.Random(0), and a cut
    falling in a line moves to that line's end, so val holds lines o // 10 < L <= (o + 2,000) // 10, test the
    100 after. The data report and manifest record the sizes, one line says them; another seed, other lines."""
    files = lines_corpus(tmp_path)
    dm = datamodule(tmp_path, files, test_fraction=0.1, val_max_mb=0.002, test_max_mb=0.001)
    with caplog.at_level("INFO", logger="lab"):
        dm.setup()
    o = random.Random(0).randrange(37001)
    val, test = range(o // 10 + 1, (o + 2000) // 10 + 1), range((o + 2000) // 10 + 1, (o + 3000) // 10 + 1)
    assert split_lines(dm, dm.val_tokens) == list(val)
    assert split_lines(dm, dm.test_tokens) == list(test)
    assert split_lines(dm, dm.train_tokens) == [n for n in range(4000) if n not in val and n not in test]
    held = dm.report["held_out"]
    assert (held["val"]["planned_bytes"], held["test"]["planned_bytes"], held["val"]["drawn"]) == (2000, 1000, "spread")
    assert dm.report["manifest"]["val"]["bytes"] == 10 * len(val) + dm.report["manifest"]["val"]["documents"]  # + EOS
    manifest = json.loads((Path(dm.report["prepared"]) / "manifest.json").read_text())
    assert manifest["settings"]["held_out"] == held
    said = [r.message for r in caplog.records if r.message.startswith("data: held out")]
    assert len(said) == 1 and f"val 2.0 kB ({len(dm.val_tokens):,} tokens, 5.00% of the text; 10% asked" in said[0]
    assert "capped at data.corpus.val_max_mb=0.002" in said[0]
    assert "data.corpus.split_seed=0" in said[0]
    other = datamodule(tmp_path, files, test_fraction=0.1, val_max_mb=0.002, test_max_mb=0.001, split_seed=1)
    other.setup()
    assert split_lines(other, other.val_tokens) != list(val)


def test_the_tokenizer_sample_of_a_spread_plan_is_its_training_text_only(tmp_path):
    """Catches held-out text leaking into the tokenizer, or training parts after a held-out stretch lost."""
    files = lines_corpus(tmp_path, (4000,))
    plans = TextFiles(files, val_max_mb=0.002).files(tmp_path)
    assert plans[0].lines and len(plans[0].splits) == 3
    sample = "".join(shards.tokenizer_sample(plans, None))
    dm = datamodule(tmp_path, files, val_max_mb=0.002)
    dm.setup()
    assert [int(x.split()[1]) for x in sample.splitlines() if x] == split_lines(dm, dm.train_tokens)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_a_cut_moves_to_the_end_of_its_line_in_any_chunk(tmp_path, monkeypatch, chunk):
    """Lines end at bytes 8, 13, 18. Cut 2 moves to 9 (its line goes before it); cut 4 falls in the line cut 2
    moved to the end of: an empty part; cut 10 moves to 14. Catches a cut left inside its line, a newline put
    after the cut, or a second cut in one line taking the next line."""
    path = tmp_path / "a.txt"
    path.write_bytes(b"aaaaaaaa\nbbbb\ncccc\n")
    monkeypatch.setattr(stream, "CHUNK", chunk)
    parts = [""] * 4
    for part, text in stream.stream_text(path, FileFormat(), "train", DataReport(), (2, 4, 10), at_lines=True):
        parts[part] += text
    assert parts == ["aaaaaaaa\n", "", "bbbb\n", "cccc\n"]


def test_sample_parts_take_the_training_parts_up_to_the_share():
    """Hand computation: train [0, 10), val, train [20, 50), test, train: 25 bytes of training text are
    [0, 10) and [20, 35)."""
    plan = FilePlan(Path("x"), "x", ("train", "val", "train", "test", "train"), (10, 20, 50, 60), "train_files",
                    FileFormat())
    assert plan.sample_parts(25) == ((10, 20, 35), (True, False, True, False))
    assert plan.sample_parts(None) == ((10, 20, 50, 60), (True, False, True, False, True))


def test_a_cache_prepared_before_the_caps_is_named_when_the_capped_split_is_prepared(tmp_path, caplog):
    files = lines_corpus(tmp_path, (4000,))
    with caplog.at_level("INFO", logger="lab"):
        datamodule(tmp_path / "fresh", files, val_max_mb=0.002).prepare_data()
    assert "is not used" not in caplog.text  # no earlier cache: nothing to say
    old = datamodule(tmp_path, files, val_max_mb=None)
    old.setup()
    caplog.clear()
    with caplog.at_level("INFO", logger="lab"):
        new = datamodule(tmp_path, files, val_max_mb=0.002)
        new.prepare_data()
        new.setup()
    assert f"the cache {old.report['prepared']} (held-out file tails) is not used" in caplog.text
    assert new.report["prepared"] != old.report["prepared"]


def test_the_mlm_records_and_says_its_held_out_splits_and_names_a_cache_of_before_the_caps(tmp_path, caplog):
    """The MLM streams TextFiles with the same caps as the LM: 4,000 lines, 10% asked for each split, capped at
    2,000 bytes each, so both are spread; its manifest and data report record that, one line says it, and the
    cache it prepared without caps (the file tails) is named. Catches the MLM recording or saying none of it."""
    files = lines_corpus(tmp_path, (4000,))

    def mlm(cap: float | None) -> MLMDataModule:
        return MLMDataModule([TextFiles(files, test_fraction=0.1, val_max_mb=cap, test_max_mb=cap)], vocab_size=200,
                             max_length=16, batch_size=4, cache_dir=str(tmp_path / "cache"))

    old = mlm(None)
    old.setup()
    assert (old.report["held_out"]["val"]["drawn"], old.report["held_out"]["val"]["capped"]) == ("tails", False)
    caplog.clear()
    with caplog.at_level("INFO", logger="lab"):
        new = mlm(0.002)
        new.prepare_data()
        new.setup()
    held = new.report["held_out"]
    assert [(held[s]["planned_bytes"], held[s]["drawn"], held[s]["capped"]) for s in ("val", "test")] == [(2000, "spread", True)] * 2
    manifest = json.loads((Path(new.report["prepared"]) / "manifest.json").read_text())
    assert manifest["settings"]["held_out"] == held
    said = [r.message for r in caplog.records if r.message.startswith("data: held out")]
    assert len(said) == 1 and f"val 2.0 kB ({new.report['manifest']['val']['tokens']:,} tokens" in said[0]
    assert "capped at data.corpora[0]'s val_max_mb=0.002" in said[0] and "data.corpus." not in said[0]
    assert f"the cache {old.report['prepared']} (held-out file tails) is not used" in caplog.text


def test_an_mlm_of_several_corpora_says_and_records_what_each_held_out_under_its_own_path(tmp_path, caplog):
    """Two streamed corpora prepared into the same splits: each one's line gives the bytes planned from its own
    text and its own place in the list (data.corpora[i]), and data_report.json records both. 4,000 lines (40,000
    bytes), 10% capped at 2,000 bytes: 5.00%; 1,000 lines, uncapped: 10% of 10,000 bytes = 1.0 kB. Catches the
    lines going silent with several corpora, naming data.corpus.*, or a share of the wrong text."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    big, small = lines_corpus(tmp_path / "a", (4000,)), lines_corpus(tmp_path / "b", (1000,))
    dm = MLMDataModule([TextFiles(big, test_fraction=0.1, val_max_mb=0.002, test_max_mb=0.002),
                        TextFiles(small, test_fraction=0.1)], vocab_size=200, max_length=16, batch_size=4,
                       cache_dir=str(tmp_path / "cache"))
    with caplog.at_level("INFO", logger="lab"):
        dm.setup()
    said = [r.message for r in caplog.records if r.message.startswith("data: held out")]
    assert len(said) == 2
    assert said[0].startswith("data: held out from data.corpora[0] val 2.0 kB (planned, 5.00% of the text; 10% asked, "
                              "capped at data.corpora[0]'s val_max_mb=0.002)")
    assert said[1].startswith("data: held out from data.corpora[1] val 1.0 kB (planned, 10.00% of the text)")
    assert "change with data.corpora[1]'s val_max_mb= / test_max_mb=" in said[1]
    by_corpus = dm.report["held_out"]["by_corpus"]
    assert {k: v["val"]["planned_bytes"] for k, v in by_corpus.items()} == {"data.corpora[0]": 2000, "data.corpora[1]": 1000}


def test_a_held_out_split_far_from_the_share_asked_is_warned_about_with_its_share(tmp_path, caplog):
    """Three records: the last 10% of the file holds the end of the last record, which goes to val whole (a
    third of the text). Catches the warning missing, or only warning about too little."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": f"record {i} " + "word " * 30}) + "\n" for i in range(3)))
    dm = datamodule(tmp_path, [str(path)])
    with caplog.at_level("INFO", logger="lab"):
        dm.setup()
    share = dm.report["manifest"]["val"]["bytes"] / sum(s["bytes"] for s in dm.report["manifest"].values())
    warned = [r.message for r in caplog.records if r.levelname == "WARNING" and "far from" in r.message]
    assert warned == [f"data: the val split is {share:.2%} of the text (1 documents), far from the 10.00% asked: "
                      "held-out text is cut at whole documents (records, or lines when capped) and this corpus has "
                      "few or long ones; give data.corpus.val_files= to choose it"]


def test_a_cap_that_is_not_positive_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"data.corpus.test_max_mb=0 must be a positive number of MB"):
        TextFiles(lines_corpus(tmp_path, (10,)), test_fraction=0.1, test_max_mb=0).files(tmp_path)
