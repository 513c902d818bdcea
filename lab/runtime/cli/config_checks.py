"""Every config mistake in one line, before any data is fetched or model built (the first step of lab.train).

Hydra composes model.*, task.* and data.* onto typed schemas (lab.runtime.cli.schemas): OmegaConf refuses a wrong
type or an unknown key while composing (translated in lab.runtime.cli.errors); what a type cannot say runs here,
from the schemas' side (the model schemas' own validation in check_schemas, the task and data schemas' RANGES).
The other sections have no schema: a wrong type (`trainer.max_steps=abc`), an impossible value, a key added with
`+` that nothing takes, or a `???` left unset would otherwise surface minutes later as a traceback from deep inside
Lightning or torch. check_config raises one LabError
naming the key, what is wrong and how to fix it. A warmup longer than the run is only warned about: every
short test of a real experiment (lab's own tests, benchmarks and documented commands) has one. (Unknown keys without `+`, unknown group options and
parse errors are Hydra's own errors, translated in lab.runtime.cli.errors.)"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from lab.data import config as data_config
from lab.errors import LabError
from lab.tasks import config as task_config

log = logging.getLogger("lab")

PRECISIONS = ("64-true", "64", "32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "16-true", "bf16-true",
              "transformer-engine", "transformer-engine-float16")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
# Sections whose `_target_` nodes are checked against the target's signature (the trainer is check_trainer's).
BUILT_SECTIONS = ("model", "task", "data", "callbacks", "logger")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


# (test, what it must be). Each rule's text completes "<key>=<value> must be ...".
def int_at_least(lo: int) -> tuple[Callable, str]:
    return (lambda v: _is_int(v) and v >= lo), f"an integer >= {lo}"


def number_in(lo: float, hi: float | None = None, lo_open: bool = False, hi_open: bool = True) -> tuple[Callable, str]:
    def ok(v):
        if not _is_number(v):
            return False
        above = v > lo if lo_open else v >= lo
        below = hi is None or (v < hi if hi_open else v <= hi)
        return above and below
    left, right = "(" if lo_open else "[", ")" if hi_open or hi is None else "]"
    return ok, f"a number in {left}{lo}, {'inf' if hi is None else hi}{right}"


def optional(rule: tuple[Callable, str]) -> tuple[Callable, str]:
    return (lambda v: v is None or rule[0](v)), f"{rule[1]} or null"


def one_of(*choices) -> tuple[Callable, str]:
    return (lambda v: v in choices), f"one of {', '.join(map(str, choices))}"


POSITIVE_INT, POSITIVE = int_at_least(1), number_in(0, lo_open=True)
BOOL = (lambda v: isinstance(v, bool)), "true or false"
RULES: dict[str, tuple[Callable, str]] = {
    "seed": int_at_least(0),
    "test": BOOL,
    "compile": BOOL,
    "optimized_mode": one_of("min", "max"),
    "trainer.max_steps": ((lambda v: _is_int(v) and (v >= 1 or v == -1)), "a positive integer (or -1: no step limit)"),
    "trainer.max_epochs": optional(((lambda v: _is_int(v) and (v >= 1 or v == -1)), "a positive integer (or -1)")),
    "trainer.val_check_interval": ((lambda v: (_is_int(v) and v >= 1) or (isinstance(v, float) and 0 < v <= 1)),
                                   "a positive number of steps, or a fraction of an epoch in (0, 1]"),
    "trainer.log_every_n_steps": POSITIVE_INT,
    "trainer.accumulate_grad_batches": POSITIVE_INT,
    "trainer.num_nodes": POSITIVE_INT,
    "trainer.num_sanity_val_steps": optional(int_at_least(-1)),
    "trainer.gradient_clip_val": optional(number_in(0)),
    # Lightning's names; the short forms (32, bf16, ...) are aliases, left out of the line to keep it short
    "trainer.precision": ((lambda v: v in PRECISIONS),
                          "one of 32-true, bf16-mixed, 16-mixed, bf16-true, 16-true, 64-true, transformer-engine"),
    "trainer.accelerator": one_of(*ACCELERATORS),
    "trainer.devices": ((lambda v: v == "auto" or (_is_int(v) and (v >= 1 or v == -1))
                         or (isinstance(v, list | ListConfig) and len(v) > 0 and all(_is_int(d) and d >= 0 for d in v))),
                        "auto, a positive number of devices (-1: all) or a list of device indices"),
    "callbacks.checkpoint.save_top_k": int_at_least(-1),
    "logger.wandb.probe_timeout": POSITIVE,
    "logger.wandb.init_timeout": POSITIVE,
    "logger.wandb.finish_timeout": number_in(0),
    "logger.wandb.require_online": BOOL,
}
PROBABILITY_KEYS = ("dropout",)  # any task key ending in one of these is a probability in [0, 1)


def _value(cfg: DictConfig, key: str) -> tuple[bool, Any]:
    node = OmegaConf.select(cfg, key, default=_MISSING_KEY)
    return node is not _MISSING_KEY, node


_MISSING_KEY = object()


def _refuse(key: str, value: Any, what: str) -> None:
    raise LabError(f"{key}={value!r} must be {what}; set {key}=<that> on the command line (or in the experiment)")


def _within(ok: Callable[[Any], bool], value: Any) -> bool:
    """A RANGES row's test; a value of another type (in an untyped node, e.g. an inline schedule) fails it."""
    try:
        return not isinstance(value, bool) and bool(ok(value))
    except TypeError:
        return False


def check_missing(cfg: DictConfig) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise LabError(f"{missing[0]} is required but not set (??? in the config){more}; give it on the command "
                       f"line, e.g. {missing[0]}=<value>")


def check_resolves(cfg: DictConfig) -> DictConfig:
    """The config with every interpolation resolved, or one line naming the one that does not resolve."""
    from omegaconf.errors import OmegaConfBaseException  # noqa: PLC0415

    try:
        return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "a value"
        raise LabError(f"{key} cannot be resolved: {str(e).splitlines()[0]}; fix the ${{...}} reference or set the "
                       "value directly") from None


def check_values(cfg: DictConfig) -> None:
    """Types and ranges of the known keys, probabilities anywhere in task, and the cross-key rules (model.*: its
    schema's, check_schemas)."""
    for key, (ok, what) in RULES.items():
        present, value = _value(cfg, key)
        if present and not ok(value):
            _refuse(key, value, what)
    for key, ok, what in (*task_config.RANGES, *data_config.RANGES):  # what the schemas' types cannot say
        present, value = _value(cfg, key)
        if present and not _within(ok, value):
            _refuse(key, value, what)
    for section in ("task",):
        for key, value in _walk(cfg.get(section), section):
            if key.rsplit(".", 1)[-1].endswith(PROBABILITY_KEYS) and value is not None and not (_is_number(value) and 0 <= value < 1):
                _refuse(key, value, "a probability in [0, 1)")
    present, warmup = _value(cfg, "task.scheduler.warmup_steps")
    steps = OmegaConf.select(cfg, "trainer.max_steps", default=-1)
    if present and _is_int(steps) and steps > 0 and warmup > steps:  # a smoke test's normal state: said, not refused
        log.warning("task.scheduler.warmup_steps=%d > trainer.max_steps=%d: the learning rate never reaches its peak "
                    "(%.0f%% of it at the last step); lower warmup_steps unless this is a short test", warmup, steps,
                    100 * steps / warmup)
    if "task" in cfg:
        task_config.check_task(cfg.task)
    check_devices(cfg.get("trainer") or {})
    check_registered(cfg.get("trainer") or {})


def check_registered(trainer) -> None:
    """trainer.strategy given by name: one Lightning knows (a typo is one line here, not Lightning's error after
    the data is built)."""
    from lightning.pytorch.strategies import StrategyRegistry  # noqa: PLC0415

    from lab.runtime.cli.errors import did_you_mean  # noqa: PLC0415

    value, known = trainer.get("strategy", "auto"), {"auto", *StrategyRegistry.available_strategies()}
    if isinstance(value, str) and value not in known:
        close = did_you_mean(value, known).removeprefix("; did you mean ").removesuffix("?")
        raise LabError(f"trainer.strategy={value!r} is not a strategy Lightning knows; "
                       + (f"did you mean trainer.strategy={close}?" if close else "e.g. auto, ddp, fsdp, deepspeed"))


def check_devices(trainer) -> None:
    """devices against the accelerator: CPU takes a process count, a GPU count cannot exceed what is visible."""
    import torch  # noqa: PLC0415

    accelerator, devices = trainer.get("accelerator", "auto"), trainer.get("devices", "auto")
    if accelerator == "cpu" and not (devices == "auto" or _is_int(devices)):
        raise LabError(f"trainer.devices={devices} with trainer.accelerator=cpu: CPU devices are a process count "
                       "(e.g. trainer.devices=2), not a list of indices")
    if accelerator in ("gpu", "cuda") and torch.cuda.is_available():
        wanted = len(devices) if isinstance(devices, list | ListConfig) else devices
        visible = torch.cuda.device_count()
        if _is_int(wanted) and wanted > visible:
            raise LabError(f"trainer.devices={devices} but {visible} GPU(s) are visible; use trainer.devices={visible} "
                           "or fewer (or -1 for all)")


def _walk(node, where: str):
    if isinstance(node, DictConfig):
        for key, value in node.items():
            yield from _walk(value, f"{where}.{key}")
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            yield from _walk(value, f"{where}[{i}]")
    else:
        yield where, node


def _targets(node, where: str):
    """(path, node) of every `_target_` node under node."""
    if isinstance(node, DictConfig):
        if "_target_" in node:
            yield where, node
        for key, value in node.items():
            if not str(key).startswith("_"):
                yield from _targets(value, f"{where}.{key}")
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            yield from _targets(value, f"{where}[{i}]")


def check_arguments(cfg: DictConfig) -> None:
    """Every `_target_` in model/task/data/callbacks/logger exists and takes the keys given to it, so a key
    added with `+` that nothing reads is an error with the closest real argument, not silently ignored."""
    from hydra.utils import get_method  # noqa: PLC0415

    from lab.nn.config import TransformerConfig  # noqa: PLC0415
    from lab.runtime.cli.errors import did_you_mean  # noqa: PLC0415

    for section in BUILT_SECTIONS:
        for where, node in _targets(cfg.get(section), section):
            try:
                target = get_method(node._target_)
            except Exception as e:
                raise LabError(f"{where}._target_={node._target_!r} cannot be imported ({str(e).splitlines()[0]}); "
                               "check the spelling of the class path") from None
            try:
                params = inspect.signature(target).parameters
            except (TypeError, ValueError):
                continue
            known = set(params)
            if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                if where != "model":
                    continue
                known |= {f.name for f in dataclasses.fields(TransformerConfig)}  # a model's **arch fields
            for key in node:
                if not str(key).startswith("_") and key not in known:
                    hint = did_you_mean(str(key), [f"{where}.{p}" for p in known], f"{where}.")
                    raise LabError(f"{where}.{key} is not an argument of {node._target_}{hint}; remove it (or fix its name)")


def check_schemas(cfg: DictConfig) -> None:
    """What a typed schema cannot say (ranges, choices, cross-field rules): each schema's own validation, run by
    building it from its composed node (OmegaConf already checked the types, missing values and unknown keys)."""
    for section in ("model",):
        node = cfg.get(section)
        if isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)):
            OmegaConf.to_object(node)  # its __post_init__ raises a ConfigError naming the key


def check_schema_keys(node, where: str) -> None:
    """A key added with `+` to a node that has a schema (Hydra's `+` lets one in) must be one of its fields:
    otherwise nothing would read it."""
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key in node:
        if fields is not None and key not in fields:
            from lab.runtime.cli.errors import did_you_mean  # noqa: PLC0415

            hint = did_you_mean(str(key), [f"{where}.{f}" for f in fields if not f.startswith("_")], f"{where}.")
            raise LabError(f"{where}.{key} is not a setting of {where} ({schema.__name__}){hint}; remove it (or fix its name)")
        check_schema_keys(node._get_node(key), f"{where}.{key}")


def check_top_level(cfg: DictConfig) -> None:
    """The top-level values that typed keys interpolate (data.seed: int = ${seed}), first: a wrong one is named
    by its own key (seed='abc'), not as the typed key that cannot take it."""
    for key, (ok, what) in RULES.items():
        present, value = _value(cfg, key) if "." not in key else (False, None)
        if present and not ok(value):
            _refuse(key, value, what)


def check_config(cfg: DictConfig) -> None:
    """All checks, cheapest first; the first mistake found is raised as one LabError."""
    check_top_level(cfg)
    check_missing(cfg)
    resolved = check_resolves(cfg)
    check_values(resolved)
    check_arguments(cfg)  # a `_target_`'s unknown key is named with its target's signature; the other nodes':
    for section in ("task", "data"):
        check_schema_keys(cfg.get(section), section)
    check_schemas(cfg)
