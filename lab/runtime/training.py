"""One training run, `python -m lab.train`, as its steps: each a call into the package that owns it
(docs/architecture.md follows one run through them). lab/train.py imports this module only after Hydra has
parsed the command line: the heavy imports below are deferred there, once, and nowhere else."""
from __future__ import annotations

import logging
import math
import time

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lab.checkpoints.reading import metadata_for
from lab.hf.importing import build_to_fill
from lab.hf.shape import decide as decide_shape
from lab.models import build_model
from lab.runtime.callbacks.throughput import Throughput
from lab.runtime.cli.config_checks import check_config
from lab.runtime.cli.console import phase, single_console
from lab.runtime.cli.errors import print_config_tree
from lab.runtime.cli.ladder import apply_ladder, parameter_counts
from lab.runtime.rundir import journal
from lab.runtime.rundir.ranks import set_global_rank
from lab.runtime.rundir.run_dir import RunDir
from lab.runtime.trainer.fitting import build_trainer, fit_and_test
from lab.runtime.trainer.loggers import decide_wandb
from lab.runtime.trainer.memory import keep_freed_memory
from lab.runtime.trainer.resume import check_resume, check_vocabulary
from lab.runtime.trainer.strategies import check_trainer, compile_model

log = logging.getLogger("lab")


def train(cfg: DictConfig) -> float | None:
    """Prepare data, build model + task from what the data says, fit, test; return the optimized metric."""
    t_start = time.perf_counter()
    single_console()  # each Lightning message once, no adverts
    set_global_rank(cfg.trainer)  # before anything is printed or written: NODE_RANK / torchrun / SLURM launches
    apply_ladder(cfg)  # +ladder: the rung's shape and budget, before the checks read them
    check_config(cfg)  # types, ranges, unknown arguments, ??? values: one line each, before anything heavy
    decide_shape(cfg.model)  # model.init_from=<Hugging Face directory>: its config.json's settings
    check_trainer(cfg)
    decide_wandb(cfg)  # W&B reachable? key valid? before any data is fetched; rank 0 only
    with RunDir.claim(cfg) as run_dir:  # locked for this process; ckpt_path=auto: the earlier run and its checkpoint
        if not run_dir.owner:  # DDP/FSDP children: warnings and errors only, rank 0 reports
            log.setLevel(logging.WARNING)
        resolved = OmegaConf.to_container(cfg, resolve=True)
        resume = check_resume(cfg, resolved)  # a bad file, another task or model shape: one error before any work
        if run_dir.owner:
            print_config_tree(cfg)
        run_dir.save_config(resolved)
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
        run_dir.save_data_report(datamodule.report)  # what was read, dropped, truncated
        model = build_to_fill(lambda: build_model(cfg.model, datamodule.vocab), cfg.model.get("init_from"), bool(resume))
        task = instantiate(cfg.task, model=model)
        task.lab_metadata = metadata_for(resolved, datamodule)  # what lab.generate & co. rebuild the model from
        compile_model(cfg, task)
        params = parameter_counts(model)
        log.info("parameters: %s total, %s active per token, %s of them outside the vocabulary matrices",
                 *(f"{params[k]:,}" for k in ("params/total", "params/active", "params/non_embedding")))
        trainer, loggers = build_trainer(cfg, datamodule, run_dir, {**resolved, "data_report": datamodule.report, **params})
        log.info("setup took %.1fs; training in %s", time.perf_counter() - t_start, run_dir.path)
        journal.keep_from_first_step(trainer)  # from then on a failure is this run's own, recorded in its directory
        metrics = fit_and_test(cfg, trainer, loggers, task, datamodule, resume, run_dir)
        costs = next((c.costs() for c in trainer.callbacks if isinstance(c, Throughput)), {})
    RunDir.record_final_metrics({**metrics, **params, **costs})  # status.json keeps them; sweeps optimise them
    log.info("finished in %.1fs; run dir %s", time.perf_counter() - t_start, run_dir.path)
    value = metrics.get(cfg.get("optimized_metric") or "")
    return value if value is not None and math.isfinite(value) else None
