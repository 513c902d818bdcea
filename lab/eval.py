"""Re-run the test evaluation of a checkpoint (any task): python -m lab.eval ckpt_path=<run dir or .ckpt>; or of
each variant's best run of a sweep: python -m lab.eval sweep_dir=<sweep dir> [metric=val/loss mode=min]"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from lab.errors import LabError
from lab.runtime.cli.errors import quiet_warnings, user_errors_exit
from lab.runtime.cli.help import exit_with_help


@hydra.main(config_path="../conf", config_name="eval", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from omegaconf import open_dict  # noqa: PLC0415

    from lab.checkpoints.reading import resolve_checkpoint  # noqa: PLC0415
    from lab.runtime.inference.evaluation import evaluate  # noqa: PLC0415

    quiet_warnings()
    check_settings(cfg)
    if cfg.get("sweep_dir"):  # each variant's best run of a sweep, instead of one checkpoint
        from lab.runtime.inference.evaluation import evaluate_sweep  # noqa: PLC0415

        evaluate_sweep(cfg)
        return
    with open_dict(cfg):
        cfg.ckpt_path = str(resolve_checkpoint(cfg.ckpt_path))  # a run directory: its best, else last checkpoint
        if cfg.get("compare_to"):
            cfg.compare_to = compared_to(str(cfg.compare_to))
    for name, value in sorted(evaluate(cfg).items()):
        print(f"{name}: {value:.4f}")


def check_settings(cfg: DictConfig) -> None:
    """The settings, before the checkpoint is read or the data prepared (which writes the cache)."""
    from lab.checkpoints.export_dir import check_out_dir  # noqa: PLC0415
    from lab.runtime.inference.evaluation import OUTPUTS  # noqa: PLC0415

    if cfg.split not in ("test", "valid"):
        raise LabError(f"split={cfg.split!r}: evaluate the test or the valid split; write split=test or split=valid")
    samples = cfg.bootstrap_samples
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise LabError(f"bootstrap_samples={samples!r} must be an integer >= 1 (sacreBLEU's default: 1000)")
    if not isinstance(cfg.get("overwrite"), bool):
        raise LabError(f"overwrite={cfg.get('overwrite')!r} must be true or false")
    if cfg.get("outputs_dir"):  # export's rule: a new or empty folder, or lab.eval's earlier outputs (replaced whole)
        check_out_dir(Path(str(cfg.outputs_dir)).expanduser(), overwrite=cfg.overwrite, **OUTPUTS)


def compared_to(value: str) -> str:
    """compare_to, checked before the evaluation runs: a run directory -> its checkpoint (as for ckpt_path); a
    checkpoint or a file of hypotheses must exist."""
    from lab.checkpoints.reading import is_sharded_checkpoint, resolve_checkpoint  # noqa: PLC0415

    path = Path(value).expanduser()
    give = "give a run directory, a checkpoint (.ckpt) or a file with one hypothesis per line in the test split's order"
    if path.is_dir() and not is_sharded_checkpoint(path):
        try:
            return str(resolve_checkpoint(path))
        except LabError:
            raise LabError(f"compare_to={value} is a directory without checkpoints; {give}") from None
    if not path.exists():
        raise LabError(f"compare_to={value} does not exist; {give}")
    return value


if __name__ == "__main__":
    exit_with_help("eval")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
