"""What every entry point shares: one clear message for user mistakes, the config tree, quiet imports."""
from __future__ import annotations

import functools
import logging
import sys
import time
import warnings
from pathlib import Path

from omegaconf import OmegaConf

from lab.errors import LabError
from lab.nn.config import ConfigError
from lab.runtime.console import record_in_log_files
from lab.runtime.ranks import run_dir

LAUNCH_TIME = time.time()  # entry points import this module first: "time since launch" starts here
log = logging.getLogger("lab")
USER_ERRORS = (LabError, ConfigError)


def _sqlite_url(path: str) -> str:
    """`${lab.sqlite:<file>}`: an sqlite URL for <file>, its directory created (Optuna does not)."""
    p = Path(path).expanduser().resolve()
    p.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{p}"


def _optuna_direction(mode: str) -> str:
    """`${lab.direction:${optimized_mode}}`: min|max -> Optuna's minimize|maximize."""
    directions = {"min": "minimize", "max": "maximize"}
    if mode not in directions:
        raise LabError(f"optimized_mode={mode!r} must be min or max")
    return directions[mode]


# Resolvers the configs use; registered when any entry point imports this module (before Hydra composes).
OmegaConf.register_new_resolver("lab.sqlite", _sqlite_url, replace=True)
OmegaConf.register_new_resolver("lab.direction", _optuna_direction, replace=True)
OmegaConf.register_new_resolver("lab.run_dir", run_dir, replace=True)  # hydra.run.dir: rank 0's, see lab.runtime.ranks


def user_errors_exit(fn):
    """Run an entry point; a LabError/ConfigError prints one line and exits 2 instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            cause = user_error_in(e)
            if cause is None:
                raise
            record_in_log_files(f"error: {cause}")  # on screen once: the line below
            print(f"error: {cause}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def user_error_in(e: BaseException | None) -> BaseException | None:
    """The user error behind e, also when Hydra's instantiate wrapped it in an InstantiationException."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, USER_ERRORS):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def quiet_warnings() -> None:
    """Silence known-harmless library warnings that would bury the useful output."""
    for pattern in (
        ".*does not have many workers.*",
        ".*`isinstance\\(treespec, LeafSpec\\)` is deprecated.*",
        ".*The number of training batches.*is smaller than the logging interval.*",
        ".*Checkpoint directory .* exists and is not empty.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)


def print_config_tree(cfg, fields_first=("task", "model", "data", "trainer", "callbacks", "logger", "paths")) -> None:
    """The resolved config as a rich tree (rank zero only; callers check)."""
    import rich  # noqa: PLC0415
    import rich.syntax  # noqa: PLC0415
    import rich.tree  # noqa: PLC0415
    from omegaconf import OmegaConf  # noqa: PLC0415

    tree = rich.tree.Tree("config", guide_style="dim")
    keys = [k for k in fields_first if k in cfg] + [k for k in cfg if k not in fields_first]
    for key in keys:
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if OmegaConf.is_config(value) else str(value)
        tree.add(key, style="bold").add(rich.syntax.Syntax(text, "yaml", background_color="default"))
    rich.print(tree)
