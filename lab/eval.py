"""Re-run the test evaluation of a checkpoint (any task): python -m lab.eval ckpt_path=<run dir or .ckpt>"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.runtime.cli import quiet_warnings, user_errors_exit
from lab.runtime.help import exit_with_help


@hydra.main(config_path="../conf", config_name="eval", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from omegaconf import open_dict  # noqa: PLC0415

    from lab.runtime.checkpoints import resolve_checkpoint  # noqa: PLC0415
    from lab.runtime.evaluation import evaluate  # noqa: PLC0415

    quiet_warnings()
    with open_dict(cfg):
        cfg.ckpt_path = str(resolve_checkpoint(cfg.ckpt_path))  # a run directory: its best, else last checkpoint
    for name, value in sorted(evaluate(cfg).items()):
        print(f"{name}: {value:.4f}")


if __name__ == "__main__":
    exit_with_help("eval")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
