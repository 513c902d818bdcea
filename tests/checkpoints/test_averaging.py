"""python -m lab.checkpoint average: the element-wise mean of checkpoints' weights, checked by hand."""
from __future__ import annotations

import pytest
import torch
from conftest import run_module

from lab.checkpoints.averaging import average_checkpoints, last_checkpoints
from lab.errors import LabError


def _ckpt(path, w: float, step: int, keys=("model.w", "model.b")):
    state = {k: torch.full((2, 3), w + i) for i, k in enumerate(keys)}
    state["model.count"] = torch.tensor([step])  # an integer buffer: taken from the last, not averaged
    torch.save({"state_dict": state, "global_step": step, "optimizer_states": [{"x": 1}], "lab": {"config": {}}}, path)
    return path


def test_average_is_the_mean_of_the_weights(tmp_path):
    paths = [_ckpt(tmp_path / f"best-step{s}.ckpt", w, s) for s, w in ((100, 1.0), (200, 2.0), (300, 6.0))]
    out = average_checkpoints(paths)
    torch.testing.assert_close(out["state_dict"]["model.w"], torch.full((2, 3), 3.0))  # (1 + 2 + 6) / 3
    torch.testing.assert_close(out["state_dict"]["model.b"], torch.full((2, 3), 4.0))
    assert out["state_dict"]["model.count"].tolist() == [300]
    assert "optimizer_states" not in out and out["lab"]["averaged_from"] == [str(p) for p in paths]


def test_checkpoints_of_different_models_are_refused(tmp_path):
    a = _ckpt(tmp_path / "a-step1.ckpt", 1.0, 1)
    b = _ckpt(tmp_path / "b-step2.ckpt", 1.0, 2, keys=("model.w", "model.other"))
    with pytest.raises(LabError, match="average checkpoints of one run only"):
        average_checkpoints([a, b])


def test_cli_averages_the_last_n_of_a_run(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for s, w in ((10, 0.0), (20, 3.0), (30, 5.0)):
        _ckpt(run / "checkpoints" / f"step-{s}.ckpt", w, s)
    _ckpt(run / "checkpoints" / "last.ckpt", 100.0, 30)  # not a step checkpoint: never averaged
    assert [p.name for p in last_checkpoints(run, 2)] == ["step-20.ckpt", "step-30.ckpt"]
    result = run_module("lab.checkpoint", ["average", str(run), str(tmp_path / "avg.ckpt"), "--last", "2"], tmp_path)
    assert result.returncode == 0, result.stderr
    avg = torch.load(tmp_path / "avg.ckpt", weights_only=True)
    torch.testing.assert_close(avg["state_dict"]["model.w"], torch.full((2, 3), 4.0))
    bad = run_module("lab.checkpoint", ["average", str(run), str(tmp_path / "x.ckpt"), "--last", "5"], tmp_path)
    assert bad.returncode == 2 and "fewer than the 5 to average" in bad.stderr and "Traceback" not in bad.stderr
