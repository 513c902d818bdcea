"""One training run: data, model and task from the config, fit, test; the heart of `python -m lab.train`."""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from lab.runtime.callbacks.progress import progress_bar_setting
from lab.runtime.cli.errors import print_config_tree
from lab.runtime.trainer.intervals import count_optimizer_steps

log = logging.getLogger("lab")


def build_loggers(cfg: DictConfig) -> list:
    from hydra.utils import instantiate  # noqa: PLC0415

    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    return [lg for lg in loggers if lg is not None]


def fit_validation_into_budget(trainer_cfg: DictConfig) -> None:
    """trainer.max_steps=100 with the experiment's val_check_interval=250 would be a Lightning error;
    validate at the end instead, and say so."""
    interval, steps = trainer_cfg.get("val_check_interval"), trainer_cfg.get("max_steps", -1)
    if isinstance(interval, int) and 0 < steps < interval:
        log.info("trainer.val_check_interval=%d > trainer.max_steps=%d: validating at step %d", interval, steps, steps)
        with open_dict(trainer_cfg):
            trainer_cfg.val_check_interval = steps


def train(cfg: DictConfig) -> float | None:
    """Prepare data, build model + task from what the data says, fit, test; return the optimized metric."""
    import lightning as L  # noqa: PLC0415 - heavy imports after Hydra has parsed the command line
    import torch  # noqa: PLC0415
    from hydra.utils import instantiate  # noqa: PLC0415
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    from lab.models import build_model  # noqa: PLC0415
    from lab.runtime.cli.config_checks import check_config  # noqa: PLC0415
    from lab.runtime.cli.console import phase, single_console  # noqa: PLC0415
    from lab.runtime.rundir.ranks import set_global_rank  # noqa: PLC0415
    from lab.runtime.sweeps.jobs import record_final_metrics  # noqa: PLC0415
    from lab.runtime.trainer.loggers import decide_wandb, finish_loggers  # noqa: PLC0415
    from lab.runtime.trainer.memory import keep_freed_memory  # noqa: PLC0415
    from lab.runtime.trainer.resume import check_resume, check_vocabulary  # noqa: PLC0415
    from lab.runtime.trainer.strategies import check_trainer, compile_model, job_processes, pin_child_processes_to_job  # noqa: PLC0415

    t_start = time.perf_counter()
    single_console()  # each Lightning message once, no adverts
    set_global_rank(cfg.trainer)  # before anything is printed or written: NODE_RANK / torchrun / SLURM launches
    check_config(cfg)  # types, ranges, unknown arguments, ??? values: one line each, before anything heavy
    check_trainer(cfg)
    decide_wandb(cfg)  # W&B reachable? key valid? before any data is fetched; rank 0 only
    # --- preemption (lab.runtime.rundir.autoresume, rundir, signals): one run per directory, ckpt_path=auto ---
    from lab.runtime.rundir import signals  # noqa: PLC0415
    from lab.runtime.rundir.autoresume import claim_run_dir, pin_wandb_run  # noqa: PLC0415

    signals.reset()
    claim_run_dir(cfg, is_rank_zero=rank_zero_only.rank == 0)
    # --- end preemption ---
    out_dir = Path(cfg.paths.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if rank_zero_only.rank != 0:  # DDP/FSDP children: warnings and errors only, rank 0 reports
        log.setLevel(logging.WARNING)
    resume = check_resume(cfg, resolved)  # a bad file, another task or model shape: one error before any work
    if rank_zero_only.rank == 0:
        print_config_tree(cfg)
        out_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(resolved, out_dir / "config.yaml")
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    torch.set_float32_matmul_precision("high")
    if note := keep_freed_memory():  # large CPU tensors reused, not page-faulted anew each step
        log.info(note)

    datamodule = instantiate(cfg.data)
    with phase(f"data: {type(datamodule).__name__} (a first run fetches the corpus and trains the tokenizer, "
               f"cached in {cfg.paths.cache_dir})"):
        datamodule.prepare_data()
        datamodule.setup("fit")
    check_vocabulary(resume, datamodule.vocab)
    data_report = getattr(datamodule, "report", {})  # what was read, dropped, truncated (lab.data.reading.DataReport)
    if rank_zero_only.rank == 0:
        (out_dir / "data_report.json").write_text(json.dumps(data_report, indent=1, ensure_ascii=False))
    model = build_model(cfg.model, datamodule.vocab)
    task = instantiate(cfg.task, model=model)
    task.lab_metadata = {
        "config": resolved,
        "vocab": datamodule.vocab,
        "tokenizer": datamodule.tokenizer.to_json(),
        # anything else inference needs from the data (e.g. label names), if the datamodule offers it
        "data": datamodule.checkpoint_metadata() if hasattr(datamodule, "checkpoint_metadata") else {},
    }
    if cfg.get("compile"):
        log.info("compile=true: torch.compile compiles the model during the first training step (a minute or more on CPU)")
    compile_model(cfg, model)
    counts = task.parameter_counts()
    log.info("parameters: %s total, %s active per token", f"{counts['total']:,}", f"{counts['active']:,}")

    fit_validation_into_budget(cfg.trainer)
    count_optimizer_steps(cfg.trainer)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    if rank_zero_only.rank == 0:
        pin_wandb_run(cfg, out_dir)  # preemption: every launch of this run logs to one W&B run
    loggers = build_loggers(cfg)
    # a datamodule that gives each rank its share itself (shards_batches) must not get Lightning's sampler
    shards_itself = getattr(datamodule, "shards_batches", False)
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, use_distributed_sampler=not shards_itself,
                          **progress_bar_setting(cfg.trainer, callbacks))
    for lg in loggers:
        lg.log_hyperparams({**resolved, "data_report": data_report, "params/total": counts["total"], "params/active": counts["active"]})

    log.info("setup took %.1fs; training in %s", time.perf_counter() - t_start, out_dir)
    pin_child_processes_to_job()
    exit_code = 1  # W&B records a job that did not get to the end (interrupted, failed) as non-zero
    try:
        with job_processes():
            # --- preemption: a stop signal ends fit after a checkpoint of the current step; exit resumable ---
            from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: PLC0415

            try:
                # weights_only: resuming from a file runs no code in it
                trainer.fit(task, datamodule=datamodule, ckpt_path=resume.path if resume else None, weights_only=True)
            except SIGTERMException:
                if signals.received() is None:
                    raise
            if signals.received() is not None:
                last = getattr(trainer.checkpoint_callback, "last_model_path", None)
                signals.exit_resumable(trainer.global_step, out_dir, last, rank_zero_only.rank == 0)
            # --- end preemption ---
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            if cfg.get("test") and not trainer.fast_dev_run:
                best = "best" if trainer.checkpoint_callback else None
                results = trainer.test(task, datamodule=datamodule, ckpt_path=best, weights_only=True)
                metrics.update({k: float(v) for k, v in (results[0] if results else {}).items()})
            if hasattr(task, "log_samples") and task.samples and getattr(task, "samples_step", None) != trainer.global_step:
                task.log_samples()  # every rank generates (FSDP gathers shards collectively); rank 0 logs
        exit_code = 0
    finally:
        if resume:
            resume.cleanup()
        finish_loggers(loggers, exit_code)  # the next job of a sweep starts its own W&B run
        from lab.runtime.rundir.lock import release_run_dirs  # noqa: PLC0415

        release_run_dirs()  # preemption: the next job of a sweep locks its own directory
    record_final_metrics({**metrics, "params/total": counts["total"], "params/active": counts["active"]})
    log.info("finished in %.1fs; run dir %s", time.perf_counter() - t_start, out_dir)
    value = metrics.get(cfg.get("optimized_metric") or "")
    return value if value is not None and math.isfinite(value) else None
