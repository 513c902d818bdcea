"""An exponential moving average of the weights, for every task: Lightning's EMAWeightAveraging, with lab's
checkpoints holding the averaged weights for every later use."""
from __future__ import annotations

import logging
import warnings

from lightning.pytorch.callbacks import EMAWeightAveraging
from lightning.pytorch.trainer.states import TrainerFn

from lab.errors import LabError
from lab.nn.fsdp import ShardsBlocks

log = logging.getLogger("lab")


class EMA(EMAWeightAveraging):
    """ema <- decay * ema + (1 - decay) * weights after every optimizer step from `start_step` on (the first
    update copies the weights). Validation runs on the averaged weights; every checkpoint's `state_dict` holds
    them (the raw weights ride along in `current_model_state` for resuming), so lab.eval, lab.translate,
    lab.generate and the test after training all use the EMA. Buffers are averaged too (use_buffers).

    Lightning's callback, when a checkpoint is loaded for testing after fit (trainer.test(ckpt_path="best")),
    puts the raw weights back into the model; here the averaged weights stay outside of fitting.
    Not for sharded models (trainer=fsdp / deepspeed): the average is a full copy of the model.
    """

    def __init__(self, decay: float = 0.999, start_step: int = 0, every_n_steps: int = 1, device: str | None = None):
        if not 0 < decay < 1:
            raise LabError(f"callbacks.ema.decay={decay}: give a decay in (0, 1), e.g. 0.999 (an average over ~1000 steps)")
        super().__init__(device=device, decay=decay, update_every_n_steps=every_n_steps, update_starting_at_step=start_step)
        self.decay = decay

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            if isinstance(trainer.strategy, ShardsBlocks) or "deepspeed" in type(trainer.strategy).__name__.lower():
                raise LabError("callbacks.ema keeps a full copy of the model and does not work with sharded strategies "
                               "(trainer=fsdp / deepspeed); use trainer=ddp, or average checkpoints afterwards with "
                               "python -m lab.checkpoint average <run dir> out.ckpt --last N")
            log.info("EMA of the weights: decay %s from step %d; validation and checkpoints use the average",
                     self.decay, self.update_starting_at_step)
        with warnings.catch_warnings():  # Task.configure_model shards only under trainer=fsdp, refused above
            warnings.filterwarnings("ignore", message=".*overrides the configure_model.*")
            super().setup(trainer, pl_module, stage)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # resuming: the raw weights continue training
            super().on_load_checkpoint(trainer, pl_module, checkpoint)
