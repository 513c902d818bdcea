"""lab.export's output folder (lab.checkpoints.export_dir) on real directories: a user's files are never
overwritten without overwrite=true, an earlier export is replaced whole, files follow the umask."""
from __future__ import annotations

import os
import stat

import pytest
import torch
from conftest import one_short_line

from lab.checkpoints.export_dir import MARKER, check_out_dir, writing
from lab.errors import LabError

KIND = "huggingface"


def fake_export(folder, weights: float = 0.0) -> None:
    """What lab.hf.exporting.export writes, in miniature: safetensors' own file (created 0600) and a config."""
    from safetensors.torch import save_file

    save_file({"w": torch.full((2,), weights)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(f'{{"w": {weights}}}\n')


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_folder_of_the_users_files_is_refused_before_anything_is_written(tmp_path, caplog):
    """The issue's case: config.json and README.md of the user's; one line naming them and the way out.
    Catches: a check that only refuses when model.safetensors is there."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text("{\"the user's\": 1}")
    (out / "README.md").write_text("my notes")
    before = files(out)
    with pytest.raises(LabError) as e:
        check_out_dir(out, KIND, overwrite=False)
    line = one_short_line(str(e.value))
    assert "README.md, config.json" in line and "overwrite=true" in line
    assert files(out) == before

    with caplog.at_level("INFO", logger="lab"), writing(out, KIND, overwrite=True) as tmp:  # lab's names replaced, the rest kept
        fake_export(tmp)
    assert (out / "README.md").read_text() == "my notes" and (out / "config.json").read_text() == '{"w": 0.0}\n'
    # no marker in a folder of the user's: it would claim their folder as lab's
    assert not (out / MARKER).exists() and f"no {MARKER} there" in caplog.text and "(replaced config.json)" in caplog.text
    with pytest.raises(LabError):
        check_out_dir(out, KIND, overwrite=False)


def test_an_earlier_export_is_replaced_whole_and_a_failed_one_leaves_it_intact(tmp_path):
    """A second export into the folder of the first replaces it (no leftover of the first); an export that fails
    half-way leaves the first one complete and no temporary folder. Catches: writing straight into out_dir."""
    out = tmp_path / "hf"
    with writing(out, KIND, overwrite=False) as tmp:
        fake_export(tmp, 1.0)
        (tmp / "only_in_the_first.json").write_text("{}")
    first = files(out)
    assert set(first) == {"model.safetensors", "config.json", "only_in_the_first.json", MARKER}

    with pytest.raises(RuntimeError), writing(out, KIND, overwrite=False) as tmp:
        fake_export(tmp, 2.0)
        raise RuntimeError("killed half-way")
    assert files(out) == first and sorted(p.name for p in tmp_path.iterdir()) == ["hf"]

    with writing(out, KIND, overwrite=False) as tmp:
        fake_export(tmp, 3.0)
    assert set(files(out)) == {"model.safetensors", "config.json", MARKER}
    assert (out / "config.json").read_text() == '{"w": 3.0}\n'


def test_a_file_or_a_symlink_loop_as_out_dir_is_named_as_such(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(LabError, match=r"is a file, not a folder"):
        check_out_dir(tmp_path / "a_file", KIND, overwrite=False)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(LabError, match=r"symbolic link"):
        check_out_dir(tmp_path / "loop", KIND, overwrite=False)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_exported_files_follow_the_umask(tmp_path, mask):
    """safetensors creates model.safetensors 0600; every exported file gets 0666 & ~umask like the others, the
    folder 0777 & ~umask. Catches: chmod of the config files only."""
    old = os.umask(mask)
    try:
        with writing(tmp_path / "hf", KIND, overwrite=False) as tmp:
            fake_export(tmp)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "hf").iterdir()}
    assert modes == dict.fromkeys(modes, 0o666 & ~mask)
    assert stat.S_IMODE((tmp_path / "hf").stat().st_mode) == 0o777 & ~mask
