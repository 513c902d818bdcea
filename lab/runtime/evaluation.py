"""Re-run a checkpoint's test evaluation with the data and task settings it was trained with."""
from __future__ import annotations

import logging

from omegaconf import DictConfig, OmegaConf

from lab.errors import LabError

log = logging.getLogger("lab")


def evaluate(cfg: DictConfig) -> dict[str, float]:
    import lightning as L  # noqa: PLC0415
    from hydra.utils import instantiate  # noqa: PLC0415

    from lab.models import build_model  # noqa: PLC0415
    from lab.runtime.checkpoints import lab_metadata, read_checkpoint  # noqa: PLC0415
    from lab.runtime.console import single_console  # noqa: PLC0415
    from lab.runtime.inference import pick_device  # noqa: PLC0415

    single_console()  # no third-party adverts
    device = pick_device(cfg.device)  # device=cuda without CUDA: one error line before any work
    ckpt = read_checkpoint(cfg.ckpt_path)
    meta = lab_metadata(ckpt, cfg.ckpt_path)
    saved = OmegaConf.create(meta["config"])
    if "cache_dir" in saved.get("data", {}):  # this machine's cache, never a directory named by the file
        if saved.data.cache_dir != cfg.paths.cache_dir:
            log.info("data.cache_dir: using %s (the checkpoint's run used %s)", cfg.paths.cache_dir, saved.data.cache_dir)
        saved.data.cache_dir = cfg.paths.cache_dir
    run_cfg = OmegaConf.merge(saved, {"data": cfg.get("data") or {}, "task": cfg.get("task") or {}})
    datamodule = instantiate(run_cfg.data)
    datamodule.prepare_data()
    datamodule.setup("test")
    if datamodule.vocab != meta["vocab"]:
        raise LabError(f"the data now gives vocabulary {datamodule.vocab}, but the checkpoint was trained with "
                       f"{meta['vocab']}; evaluate with the data settings the run used")
    task = instantiate(run_cfg.task, model=build_model(run_cfg.model, meta["vocab"]))
    task.lab_metadata = meta
    task.load_state_dict(ckpt["state_dict"])
    trainer = L.Trainer(accelerator=device.type, devices=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, precision=run_cfg.trainer.get("precision", "32-true"))
    results = trainer.test(task, datamodule=datamodule)
    return {k: float(v) for k, v in (results[0] if results else {}).items()}
