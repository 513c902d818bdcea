"""lab.prepare's argument checks run before anything is written: a setting lab.train refuses is refused here too
(it prepared data for it), and a refusal leaves no log folder behind in the cache (Hydra made one first), nor the
corpus it prepared when the data itself is refused."""
from __future__ import annotations

from conftest import run_module

TEXT = "".join(f"line {i} of a small corpus, long enough for a few windows.\n" for i in range(400))


def test_a_setting_lab_train_refuses_prepares_nothing(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    cache = tmp_path / "cache"
    args = ["+experiment=gpt_nano_char", "data=text_files", f"paths.cache_dir={cache}",
            f"data.corpus.train_files=[{tmp_path}/a.txt]"]
    bad = run_module("lab.prepare", [*args, "data.batch_size=0"], tmp_path)
    errors = [x for x in bad.stderr.splitlines() if x.startswith("error:")]
    assert bad.returncode == 2 and len(errors) == 1 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "data.batch_size=0 must be" in errors[0], errors[0]
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))  # was: a prepared corpus
    good = run_module("lab.prepare", args, tmp_path)
    assert good.returncode == 0, good.stderr[-2000:]
    assert len(list((cache / "prepare-logs").iterdir())) == 1  # a prepared run keeps its log


def test_a_refused_prepare_leaves_no_log_folder(tmp_path):
    (tmp_path / "tiny.txt").write_text("to be\n" * 20)
    cache = tmp_path / "cache"
    (cache / "prepare-logs" / "earlier").mkdir(parents=True)  # the user's earlier logs stay
    bad = run_module("lab.prepare", ["+experiment=gpt_nano_char", "data=text_files", f"paths.cache_dir={cache}",
                                     f"data.corpus.train_files=[{tmp_path}/tiny.txt]"], tmp_path)
    assert bad.returncode == 2 and "too few" in bad.stderr, bad.stderr[-2000:]
    assert [p.name for p in (cache / "prepare-logs").iterdir()] == ["earlier"]
    # refused by the data itself: the corpus it prepared for the refusal is taken back (it stayed in lm/<key>/)
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == ["prepare-logs", "prepare-logs/earlier"]
