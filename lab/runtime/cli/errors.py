"""What every entry point shares: one clear message for user mistakes, the config tree, quiet imports."""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import sys
import time
import warnings
from pathlib import Path

from omegaconf import OmegaConf

from lab.errors import LabError
from lab.runtime.cli import schemas  # registers the typed schemas before Hydra composes
from lab.runtime.cli.console import record_in_log_files
from lab.runtime.rundir import journal
from lab.runtime.rundir.ranks import run_dir

LAUNCH_TIME = time.time()  # entry points import this module first: "time since launch" starts here
log = logging.getLogger("lab")
USER_ERRORS = (LabError,)


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


def _required(key: str, what: str) -> None:
    """`${lab.required:model.init_from,an encoder_mlm checkpoint}`: a value an experiment cannot run without.
    (`???` cannot mark it: OmegaConf's merge never lets `???` replace a value a config below already set.)"""
    raise LabError(f"{key} is required here: give {key}=<{what}> on the command line")


# Resolvers the configs use; registered when any entry point imports this module (before Hydra composes).
OmegaConf.register_new_resolver("lab.sqlite", _sqlite_url, replace=True)
OmegaConf.register_new_resolver("lab.direction", _optuna_direction, replace=True)
OmegaConf.register_new_resolver("lab.required", _required, replace=True)
OmegaConf.register_new_resolver("lab.run_dir", run_dir, replace=True)  # hydra.run.dir: rank 0's, see lab.runtime.rundir.ranks


def user_errors_exit(fn):
    """Run an entry point; a LabError prints one line and exits 2 instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _Task.started = True  # until it returns, errors are the task's own (not Hydra's parsing/composition)
        quiet_warnings()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            cause = user_error_in(e)
            if cause is None:
                raise
            restored = journal.undo()  # refused before training: the run directory as it was (a new one removed)
            exit_with_error(str(cause), to_log=not restored)
        finally:
            _Task.started = False  # the next job of a sweep is composed after this one

    return wrapper


def exit_with_error(message: str, to_log: bool = True) -> None:
    """One `error:` line on stderr (and in the run's log, when there is one) and exit code 2."""
    if to_log:
        record_in_log_files(f"error: {message}")  # in train.log; on screen once: the line below
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


# ---- Hydra's own parse and composition errors, in lab's one-line form ----

class _Task:
    """Whether an entry point's task is running (its errors are its own, not Hydra's). A class attribute, not a
    threading.Event: launchers that pickle the task function (submitit) must be able to pickle what it uses."""

    started = False


def _known_keys(path: list[str]) -> set[str]:
    """Keys that exist at `path` (e.g. ["model"]) in any option of the conf/ tree: the group's files (and a
    nested group's, e.g. task/scheduler), the primary configs and the experiments (global deltas)."""
    conf = Path(__file__).resolve().parents[3] / "conf"
    candidates: list[tuple[Path, list[str]]] = [(f, path) for f in conf.glob("*.yaml")]
    candidates += [(f, path) for f in (conf / "experiment").glob("*.yaml")]
    for depth in range(1, len(path) + 1):
        group = conf.joinpath(*path[:depth])
        candidates += [(f, path[depth:]) for f in group.glob("*.yaml")] if group.is_dir() else []
    keys: set[str] = set()
    for file, rest in candidates:
        try:
            node = OmegaConf.load(file)
        except Exception:
            continue
        for part in rest:
            node = node.get(part) if OmegaConf.is_dict(node) else None
        if OmegaConf.is_dict(node):
            keys |= {str(k) for k in node if k != "defaults"}
    if len(path) == 1 and (conf / path[0]).is_dir():  # nested groups: task/scheduler is the key task.scheduler
        keys |= {p.name for p in (conf / path[0]).iterdir() if p.is_dir()}
    if path:  # the typed schemas' fields, which conf/ files no longer repeat
        inner = "".join(f"{p}." for p in path[1:])
        keys |= {f.removeprefix(inner) for f in schemas.schema_fields(path[0])
                 if f.startswith(inner) and "." not in f.removeprefix(inner)}
    return keys


def did_you_mean(word: str, choices, prefix: str = "") -> str:
    """"; did you mean <closest choice>?" or "" (choices may carry a common prefix that word lacks)."""
    import difflib  # noqa: PLC0415

    close = difflib.get_close_matches(prefix + word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def hydra_error_line(e: BaseException) -> str | None:
    """Hydra's multi-line report of a bad command line as one line saying what and how to fix it (None:
    not a command-line mistake)."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException  # noqa: PLC0415
    from omegaconf.errors import OmegaConfBaseException  # noqa: PLC0415

    text = str(e).strip()
    if isinstance(e, MissingConfigException) and e.options is not None:
        found = re.search(r"Could not find '([^']+)'", text)
        where = found.group(1) if found else str(e.missing_cfg_file)
        group, _, option = where.rpartition("/")
        return (f"{group}={option}: no such option in conf/{group}/{did_you_mean(option, e.options)}; available: "
                f"{', '.join(sorted(e.options))}")
    if isinstance(e, OverrideParseException):
        key, eq, value = e.override.partition("=")
        if eq and not value.isascii() and value[:1] not in "'\"":  # Hydra's grammar reads unquoted ASCII only
            return f"{e.override}: a value with non-ASCII characters must be quoted; write {key}=\"'{value}'\""
        lines = text.splitlines()
        return f"cannot parse the command line: {lines[0]}; see https://hydra.cc/docs/1.3/advanced/override_grammar/basic"
    if isinstance(e, ConfigCompositionException):
        swept = re.search(r"Sweeping over Hydra's configuration is not supported : '(hydra\.sweeper\.params\.)?([^=']+)=(.*)'", text)
        if swept and swept.group(1):  # the key path conf/hparams_search/*.yaml shows, typed on the command line
            return (f"{swept.group(1)}{swept.group(2)}=... cannot be swept from the command line; give the key itself: "
                    f"{swept.group(2)}={swept.group(3)} (it replaces the search's own range)")
        comma = re.match(r"Ambiguous value for argument '([^=']+)=(.*)'", text)
        if comma:  # a,b is Hydra's sweep syntax, which a single run refuses
            key, value = comma.groups()
            return (f"{key}={value} is a sweep; add -m to run one job per value, or write a list {key}=[{value}] "
                    f"or a string {key}=\"'{value}'\"")
        multi = re.match(r"Sweep parameters '([^']+)' requires --multirun", text)
        if multi:  # range()/choice() a plain multirun runs; interval() only a search samples
            how = ("add +hparams_search=optuna to search it" if "interval(" in multi.group(1)
                   else "add -m to run one job per value")
            return f"{multi.group(1)} is a sweep; {how}"
        found = re.search(r"Could not override '([^']+)'", text)
        append = re.search(r"use (\+\S+)", text)
        if found and "No match in the defaults list" in text:
            return f"{found.group(1)} is not a config group of this command; {append.group(1) if append else ''} adds it"
        if found:
            key = found.group(1)
            parent, _, leaf = key.rpartition(".")
            prefix = f"{parent}." if parent else ""
            hint = did_you_mean(leaf, {prefix + k for k in _known_keys(parent.split(".") if parent else [])}, prefix)
            elsewhere = None if hint else key_named(key, Path(sys.argv[0]).stem)  # e.g. max_steps: trainer.max_steps
            if elsewhere:
                value = append.group(1).partition("=")[2] if append else "<value>"
                return f"{key} is not a config key; did you mean {elsewhere}={value}?"
            if hint:
                return f"{key} is not a config key{hint} (to add a new key on purpose: {append.group(1) if append else '+' + key})"
            return f"{key} is not a config key (to add a new key on purpose: {append.group(1) if append else '+' + key})"
        present = re.search(r"An item is already at '([^']+)'.*remove \+ prefix: '([^']+)'", text, re.S)
        if present:  # a key a schema declares (model.embed_norm, task.optimizer.eps): it is set, not added
            return f"{present.group(1)} is already a config key: give it without the +, {present.group(2)}"
        cause = e.__cause__
        typed = schema_error_line(cause) if isinstance(cause, OmegaConfBaseException) else None
        if typed:
            return typed
        in_file = re.search(r"^In '([^']+)': \w+ raised while composing config:\n(.*)\n\s*full_key: (\S+)", text, re.M)
        if in_file:  # a value in a conf/ file (an experiment, a recipe) that the schema refuses
            where, why, key = in_file.groups()
            unknown = re.search(r"^Key '[^']+' not in '(\w+)'", why)
            if unknown:
                parent, _, leaf = key.rpartition(".")
                schema = next((c for c in schemas.SCHEMAS.values() if c.__name__ == unknown.group(1)), None)
                fields = {f.name for f in dataclasses.fields(schema)} if schema else _known_keys(parent.split("."))
                hint = did_you_mean(leaf, {k for k in fields if not k.startswith("_")}).replace("mean ", f"mean {parent}.")
                return f"{key} (set in conf/{where}.yaml) is not a field of {unknown.group(1)}{hint}; remove it there"
            return schema_type_error(key, why, f"conf/{where}.yaml")
        return f"{text.splitlines()[0]}{': ' + str(cause).splitlines()[0] if cause else ''}"
    if isinstance(e, OSError) and e.filename:  # the run directory: Hydra makes it before the task starts
        return (f"cannot create the run directory {e.filename} ({e.strerror}); set paths.runs_dir=<a directory you "
                "can write>")
    if isinstance(e, OmegaConfBaseException):  # e.g. the run directory's ${name} pointing at a missing key
        key = getattr(e, "full_key", None) or "a config value"
        return f"{key} cannot be resolved: {text.splitlines()[0]}; fix the ${{...}} reference (or the value it uses)"
    return None


# OmegaConf's words for a value its typed schema refuses -> what the value must be.
SCHEMA_TYPES = {"converted to Integer": "an integer", "converted to Float": "a number", "valid bool": "true or false",
                "converted to String": "a string", "is not Optional": "given (not null)"}


def schema_type_error(key: str, text: str, file: str | None = None) -> str:
    """OmegaConf's refusal (text) of a value of the wrong type for a schema field, in the form of lab's other checks
    (file: the conf/ file that set it; None: the command line)."""
    found = re.search(r"^Value '(.*)' (?:of type|is not)", text)
    value = repr(found.group(1)) if found else "null"
    what = next((w for words, w in SCHEMA_TYPES.items() if words in text), None)
    if what is None:
        return f"{key}: {text}; fix the value" + (f" in {file}" if file else "")
    if file:
        return f"{key}={value} in {file} must be {what}; fix it there"
    return f"{key}={value} must be {what}; set {key}=<that> on the command line (or in the experiment)"


def _kind(hint) -> str:
    """A schema field's type in words: what the value must be."""
    import dataclasses  # noqa: PLC0415
    import types  # noqa: PLC0415
    import typing  # noqa: PLC0415

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return f"{_kind(args[0])} or null" if len(args) == 1 else "one of its types"
    if typing.get_origin(hint) is list:
        return f"a list, e.g. [{', '.join(['0.9', '0.95'] if args[:1] == [float] else ['...'])}]"
    if typing.get_origin(hint) is dict or dataclasses.is_dataclass(hint):
        return "a mapping of settings, e.g. {key: value}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, "of its type")


def schema_error_line(e) -> str | None:
    """A value whose type its schema refuses (OmegaConf's ValidationError), or a key its schema lacks, in lab's
    one-line form: `task.optimizer.lr='fast' must be a number; ...` (None: not such an error)."""
    import dataclasses  # noqa: PLC0415
    import typing  # noqa: PLC0415

    from omegaconf.errors import ConfigKeyError, ValidationError  # noqa: PLC0415

    schema, key = e.object_type, e.full_key
    if not key or not isinstance(schema, type) or not dataclasses.is_dataclass(schema):
        return None
    leaf = str(key).rpartition(".")[2]
    if isinstance(e, ConfigKeyError) and not isinstance(e, ValidationError):
        parent = str(key).rpartition(".")[0]
        hint = did_you_mean(leaf, {f"{parent}.{f}" for f in schema.__dataclass_fields__}, f"{parent}.")
        return f"{key} is not a setting of {parent} ({schema.__name__}){hint}; remove it (or fix its name)"
    if isinstance(e, ValidationError) and leaf in schema.__dataclass_fields__:
        if e.value is None:  # null for a field that is not Optional
            return f"{key}=null must be given (not null); set {key}=<that> on the command line (or in the experiment)"
        what = _kind(typing.get_type_hints(schema)[leaf])
        return f"{key}={e.value!r} must be {what}; set {key}=<that> on the command line (or in the experiment)"
    return None


def _translating_run_and_report(original):
    """Hydra's run_and_report, with command-line mistakes made before the task starts ending as one
    `error:` line and exit 2 (HYDRA_FULL_ERROR=1 still shows Hydra's own report)."""

    @functools.wraps(original)
    def run_and_report(func):
        def translated():
            try:
                return func()
            except Exception as e:
                if _Task.started or os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                message = hydra_error_line(e)
                if message is None:
                    raise
                exit_with_error(message, to_log=False)  # no run log yet; the logger would print it twice

        return original(translated)

    return run_and_report


def _config_keys(entry_point: str) -> dict[str, set[str]]:
    """{last part of a key: the dotted keys ending in it} over the conf/ tree an entry point composes from: the
    groups, the experiments and presets, and its own primary config (and inference.yaml, which they share)."""
    conf = Path(__file__).resolve().parents[3] / "conf"
    out: dict[str, set[str]] = {}

    def add(node, prefix: str) -> None:
        for k, v in node.items() if isinstance(node, dict) else ():
            if k in ("defaults", "hydra") or str(k).startswith("_"):
                continue
            out.setdefault(str(k), set()).add(prefix + str(k))
            add(v, f"{prefix}{k}.")

    if entry_point == "train":  # the typed schemas' fields: keys the conf/ files do not repeat
        for group in {group for group, _ in schemas.SCHEMAS}:
            for name in schemas.schema_fields(group):
                out.setdefault(name.rpartition(".")[2], set()).add(f"{group}.{name}")
    own = {entry_point} | ({"inference"} if entry_point != "train" else set())
    for file in conf.rglob("*.yaml"):
        group = file.parent.relative_to(conf).parts
        if (file.stem not in own) if not group else entry_point != "train":  # inference: no groups
            continue
        try:
            node = OmegaConf.to_container(OmegaConf.load(file), resolve=False)  # ??? and ${..} as written
        except Exception:
            continue
        is_global = group[:1] in (("experiment",), ("debug",), ("hparams_search",)) or "@package _global_" in file.read_text()
        add(node, "" if is_global or not group else ".".join(group) + ".")
    return out


def dashed_argument_line(message: str, entry_point: str) -> str:
    """argparse's complaint about the command line (e.g. `--max_steps=20`) as one line naming the override."""
    found = re.search(r"unrecognized arguments: (.*)", message)
    if not found:
        return f"{message}; settings are key=value overrides (see --help)"
    arg = found.group(1).split()[0]
    key, _, value = arg.lstrip("-").partition("=")
    named = key_named(key, entry_point)
    if not named:
        return f"{arg} is not an option, and {key} is not a setting of lab.{entry_point}; see python -m lab.{entry_point} --help"
    return f"{arg} is not an option: settings are key=value overrides without dashes; give {named}={value or '<value>'}"


def key_named(key: str, entry_point: str) -> str | None:
    """The config key a user most likely meant by `key` (a leaf such as max_steps, or a near spelling of one):
    the shortest full key ending in it, preferring those under key's own parent; None when nothing is close."""
    import difflib  # noqa: PLC0415

    keys = _config_keys(entry_point)
    parent, _, leaf = key.rpartition(".")
    if leaf not in keys:
        close = difflib.get_close_matches(leaf, sorted(keys), n=1, cutoff=0.75)
        leaf = close[0] if close else leaf
    matches = sorted(keys.get(leaf, set()), key=lambda k: (not k.startswith(parent), k.count("."), k))
    return matches[0] if matches and matches[0] != key else None


def _journaling_job_start(configure_log, save_config):
    """Hydra's job start (run_job: make the run directory, configure its log, save .hydra/*.yaml) recorded in
    lab.runtime.rundir.journal, so that a refused run can leave the directory as it was."""

    @functools.wraps(configure_log)
    def configure_log_journaled(*args, **kwargs):
        from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

        hc = HydraConfig.get() if HydraConfig.initialized() else None
        out = hc.runtime.output_dir if hc is not None else None
        # an entry point with a run dir, or a log folder of its own (lab.prepare's); never the working directory
        if out and (hc.output_subdir is not None or Path(out).resolve() != Path.cwd().resolve()):
            journal.begin(out)
        return configure_log(*args, **kwargs)

    @functools.wraps(save_config)
    def save_config_journaled(cfg, filename, output_dir):
        journal.before_write(Path(output_dir) / filename)
        return save_config(cfg, filename, output_dir)

    configure_log_journaled.lab_translates = save_config_journaled.lab_translates = True
    return configure_log_journaled, save_config_journaled


def _noting_missing_folders(run_job):
    """Hydra's run_job makes the run directory with its parents: which of them were missing is noted first
    (journal.note_missing), so that a refused run removes the folders it made (a runs or cache root too) and
    never one that was there."""

    @functools.wraps(run_job)
    def run_job_noting(*args, **kwargs):
        from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415

        try:
            HydraConfig.instance().set_config(kwargs["config"])  # as run_job does first: the directory may read it
            journal.note_missing(str(OmegaConf.select(kwargs["config"], kwargs["job_dir_key"])))
        except Exception:  # a directory that does not resolve: run_job reports it
            journal.note_missing(None)
        return run_job(*args, **kwargs)

    run_job_noting.lab_translates = True
    return run_job_noting


def _install_hydra_translation() -> None:
    import hydra._internal.hydra as hydra_run  # noqa: PLC0415 - Hydra.run calls run_job by this module's name
    import hydra._internal.utils as hydra_utils  # noqa: PLC0415 - the function hydra.main reports errors with
    import hydra.core.utils as hydra_core  # noqa: PLC0415 - run_job calls these two by their module's names

    if not getattr(hydra_run.run_job, "lab_translates", False):
        hydra_run.run_job = _noting_missing_folders(hydra_run.run_job)

    if not getattr(hydra_core.configure_log, "lab_translates", False):
        hydra_core.configure_log, hydra_core._save_config = _journaling_job_start(hydra_core.configure_log,
                                                                                 hydra_core._save_config)

    if not getattr(hydra_utils.run_and_report, "lab_translates", False):
        hydra_utils.run_and_report = _translating_run_and_report(hydra_utils.run_and_report)
        hydra_utils.run_and_report.lab_translates = True
    main_module = sys.modules["hydra.main"]  # hydra.main took its own reference to get_args_parser
    if not getattr(main_module.get_args_parser, "lab_translates", False):
        original = main_module.get_args_parser

        def get_args_parser():
            parser = original()
            entry = Path(sys.argv[0]).stem  # lab/train.py -> train: its primary config's keys
            parser.error = lambda message: exit_with_error(dashed_argument_line(message, entry), to_log=False)
            return parser

        get_args_parser.lab_translates = True
        main_module.get_args_parser = get_args_parser


_install_hydra_translation()


def user_error_in(e: BaseException | None) -> BaseException | None:
    """The user error behind e, also when Hydra's instantiate wrapped it in an InstantiationException; a
    required value left unset (`???`) that the task reads is one too."""
    from omegaconf.errors import MissingMandatoryValue  # noqa: PLC0415

    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, USER_ERRORS):
            return e
        if isinstance(e, MissingMandatoryValue):
            key = getattr(e, "full_key", None) or "a value"
            return LabError(f"{key} is required but not set; give it on the command line, e.g. {key}=<value>")
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
        ".*Detected pickle protocol .* in the checkpoint.*",  # a file that is no lab checkpoint: its error says so
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
    from lab.runtime.cli.console import show  # noqa: PLC0415

    show(tree)  # in a sweep job: into its train.log only
