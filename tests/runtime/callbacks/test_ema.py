"""The EMA of the weights (lab.runtime.callbacks.ema): what every checkpoint holds, what the test and lab.eval use."""
from __future__ import annotations

import torch

from tests.conftest import TINY_LM, read_metrics, run_dirs, run_module, train


def test_ema_checkpoints_hold_the_hand_computed_average_and_the_test_uses_it(tmp_path):
    """decay 0.5 over 4 steps of a tiny GPT, a checkpoint after every step: each one's raw weights
    (current_model_state) give the EMA by hand, e_1 = w_1, e_k = d e_(k-1) + (1 - d) w_k, which must be its
    state_dict; inference loads that; the test after training and lab.eval see the same (averaged) model."""
    from lab.checkpoints.reading import load_model

    d = 0.5
    train([*TINY_LM, "trainer.max_steps=4", "trainer.val_check_interval=1", "callbacks=ema", f"callbacks.ema.decay={d}",
           "callbacks.checkpoint.monitor=null", "callbacks.checkpoint.save_top_k=-1", "callbacks.progress=null"],
          tmp_path, env={"OMP_NUM_THREADS": "1"})  # a validation, so a kept checkpoint, after every step
    (run,) = run_dirs(tmp_path)
    ckpts = [torch.load(run / "checkpoints" / f"best-step{k}.ckpt", map_location="cpu", weights_only=False)
             for k in range(1, 5)]
    ema = None
    for ckpt in ckpts:
        raw = ckpt["current_model_state"]
        ema = dict(raw) if ema is None else {k: d * ema[k] + (1 - d) * raw[k] for k in raw}
        for k, v in ema.items():
            torch.testing.assert_close(ckpt["state_dict"][k], v, rtol=1e-5, atol=1e-6)
    name = "model.lm_head.weight" if "model.lm_head.weight" in ema else next(iter(ema))
    assert not torch.allclose(ema[name], ckpts[-1]["current_model_state"][name])  # the average is not the last weights

    model, _, _ = load_model(run / "checkpoints" / "last.ckpt")
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, ema[f"model.{k}"], rtol=1e-5, atol=1e-6)
    tested = float(next(r["test/loss"] for r in read_metrics(run) if r.get("test/loss")))
    out = run_module("lab.eval", [f"ckpt_path={run / 'checkpoints' / 'best-step4.ckpt'}"], tmp_path,
                     env={"OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"test/loss: {tested:.4f}" in out.stdout  # lab.eval loads state_dict (the EMA): the same model was tested


def test_ema_decay_outside_0_1_is_one_error_line(tmp_path):
    out = run_module("lab.train", [*TINY_LM, "callbacks=ema", "callbacks.ema.decay=1.5"], tmp_path)
    assert out.returncode == 2 and "callbacks.ema.decay=1.5: give a decay in (0, 1)" in out.stderr
