"""lab.eval outputs_dir=<folder> keeps lab.export's rule (lab.checkpoints.export_dir), on real directories: a folder
of the user's files is refused before the checkpoint is read, naming the files and overwrite=true; a new or empty
folder, or lab.eval's own earlier outputs there (replaced whole), is written; overwrite=true keeps the user's other
files."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import one_short_line
from omegaconf import OmegaConf

from lab.checkpoints.export_dir import MARKER
from lab.errors import LabError
from lab.eval import check_settings
from lab.runtime.inference.evaluation import write_outputs

NAMES = ["test.hypothesis", "test.reference", "test.source"]


def settings(outputs_dir, overwrite=False):
    return OmegaConf.create({"split": "test", "bootstrap_samples": 1000, "outputs_dir": str(outputs_dir),
                             "overwrite": overwrite})


def after_its_test_pass(*hypotheses: str):
    """A translator after its test pass, as write_outputs sees it: (source, reference, hypothesis) in split order."""
    return SimpleNamespace(test_outputs=[(f"quelle {i}", f"reference {i}", h) for i, h in enumerate(hypotheses)])


def files(folder) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


def test_a_folder_of_the_users_files_is_refused_and_left_as_it_was(tmp_path):
    """The leftover: the user's own test.hypothesis (another system's output) and notes were overwritten without a
    word. Catches: check_settings that only refuses a file as outputs_dir."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "test.hypothesis").write_text("another system's translations\n")
    (mine / "notes.txt").write_text("my notes\n")
    before = files(mine)
    with pytest.raises(LabError) as e:
        check_settings(settings(mine))
    line = one_short_line(str(e.value))
    assert line.startswith(f"outputs_dir={mine} holds files that are not lab.eval's test sentences (notes.txt, "
                           "test.hypothesis)") and "overwrite=true" in line, line
    assert files(mine) == before

    write_outputs(after_its_test_pass("a", "b"), mine, overwrite=True)  # said explicitly: lab's names replaced, the rest kept
    after = files(mine)
    assert after["notes.txt"] == "my notes\n" and after["test.hypothesis"] == "a\nb\n" and MARKER not in after


def test_its_own_earlier_outputs_are_replaced_whole(tmp_path):
    """A new folder is written (three files and export's marker); a second lab.eval into it passes the check and
    replaces the first outputs. Catches: a check that refuses lab.eval's own earlier outputs."""
    out = tmp_path / "outputs"
    check_settings(settings(out))
    write_outputs(after_its_test_pass("first", "run"), out)
    assert sorted(files(out)) == sorted([*NAMES, MARKER])
    check_settings(settings(out))
    write_outputs(after_its_test_pass("second"), out)
    assert files(out)["test.hypothesis"] == "second\n" and files(out)["test.source"] == "quelle 0\n"


def test_outputs_dir_a_file_and_overwrite_not_a_boolean_are_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(LabError, match=r"outputs_dir=\S+afile is a file, not a folder; give a new or empty folder"):
        check_settings(settings(tmp_path / "afile"))
    with pytest.raises(LabError, match=r"^overwrite='maybe' must be true or false$"):
        check_settings(settings(tmp_path / "new", overwrite="maybe"))
