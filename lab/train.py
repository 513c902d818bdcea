"""Train any task: `python -m lab.train +experiment=gpt_small [overrides]` (add -m for a sweep)."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.runtime.cli.errors import quiet_warnings, user_errors_exit
from lab.runtime.cli.help import exit_with_help
from lab.runtime.sweeps.jobs import sweep_job


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
@user_errors_exit
@sweep_job  # status.json per run; in a multirun: a failure ends its job only, re-runs skip/resume
def main(cfg: DictConfig) -> float | None:
    from lab.runtime.training import train  # noqa: PLC0415 - heavy imports after Hydra has parsed the command line

    quiet_warnings()
    return train(cfg)


if __name__ == "__main__":
    exit_with_help("train")  # --help: this entry point's own options (Hydra's flags: --hydra-help)
    main()
