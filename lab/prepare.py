"""Prepare a training run's data and exit: `python -m lab.prepare <the overrides of lab.train>`.

For a CPU node before a GPU job, or to see what the data holds before training: the corpus is read,
tokenized and written to the cache exactly as lab.train would (which then finds it and starts in seconds).
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lab.runtime.cli.errors import quiet_warnings, user_errors_exit
from lab.runtime.cli.help import exit_with_help


@hydra.main(config_path="../conf", config_name="prepare", version_base="1.3")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from hydra.utils import instantiate  # noqa: PLC0415 - heavy imports after Hydra has parsed the command line

    from lab.runtime.cli.config_checks import check_config  # noqa: PLC0415
    from lab.runtime.cli.console import single_console  # noqa: PLC0415
    from lab.runtime.rundir import journal  # noqa: PLC0415

    quiet_warnings()
    single_console()
    check_config(cfg)  # lab.train's checks: a setting lab.train would refuse prepares nothing
    # refused by the data itself (too few tokens for a window, ...): the corpus prepared for it is taken back
    journal.take_back_cache_entries(cfg.data.get("cache_dir") or cfg.paths.cache_dir)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")  # the checks a run makes (too few tokens for a window, ...) and the data report
    where = f" in {datamodule.report['prepared']}" if "prepared" in datamodule.report else ""
    print(f"prepared {type(datamodule).__name__}{where}; vocabulary {datamodule.vocab}")


if __name__ == "__main__":
    exit_with_help("train")  # --help: the options are lab.train's (Hydra's flags: --hydra-help)
    main()
