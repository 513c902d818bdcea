"""`python -m lab.<verb> --help`: this entry point's options with their values and one-line descriptions, and
(for training) the experiments with their purpose. Nothing is written twice: a description is the comment on
the option's line in conf/ (the chosen experiment's file first, then the group files, then the entry point's
own file), else the typed schema's field docstring (lab.nn TransformerConfig / MoEConfig, the model's schema in
lab.runtime.cli.schemas), else the `_target_`'s documented arguments ("Args:" / "Fields:" lines of its docstring).
An experiment's purpose is the first comment line of its file after `# @package _global_`. `--hydra-help` still
shows Hydra's flags."""
from __future__ import annotations

import ast
import inspect
import itertools
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

CONF = Path(__file__).resolve().parents[3] / "conf"
# Typed schemas of config nodes whose _target_ takes them as **kwargs.
SCHEMAS = {"model": "lab.nn.config.TransformerConfig", "model.moe": "lab.nn.config.MoEConfig",
           "task.finetune": "lab.tasks.config.Finetune", "task.samples": "lab.tasks.config.Samples"}
KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w]*)\s*:(.*)$")


def _comment(rest: str) -> str:
    """The `# comment` at the end of a YAML line (not a # inside quotes)."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[i + 1 :].strip()
    return ""


def yaml_comments(path: Path, package: str) -> tuple[dict[str, str], list[str]]:
    """({dotted key: its line's comment}, the file's own `defaults` entries) of one config file."""
    comments, defaults, stack = {}, [], []  # stack: (indent, key)
    in_defaults = False
    for line in path.read_text().splitlines():
        if in_defaults and line.lstrip().startswith("- "):
            defaults.append(line.strip()[2:].split("#")[0].strip())
            continue
        m = KEY_LINE.match(line)
        if not m:
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        stack = [(i, k) for i, k in stack if i < indent]
        in_defaults = indent == 0 and key == "defaults"
        if in_defaults:
            defaults += [d.strip() for d in rest.split("#")[0].strip().strip("[]").split(",") if d.strip()]
            continue
        dotted = ".".join([package] * bool(package) + [k for _, k in stack] + [key])
        if text := _comment(rest):
            comments[dotted] = text
        stack.append((indent, key))
    return comments, defaults


def conf_comments(config_name: str, choices: dict[str, str]) -> dict[str, str]:
    """Descriptions from the comments of every file this composition used; earlier sources win."""
    files: list[tuple[Path, str]] = []

    def add(path: Path, package: str) -> None:
        if not path.is_file() or (path, package) in files:
            return
        files.append((path, package))
        _, defaults = yaml_comments(path, package)
        for entry in defaults:  # same-group bases (trainer/cpu -> trainer/default, experiment -> experiment)
            if ":" not in entry and entry != "_self_":
                add(path.parent / f"{entry}.yaml", package)

    for group in ("experiment", "debug"):
        if choices.get(group):
            add(CONF / group / f"{choices[group]}.yaml", "")
    for group, choice in choices.items():
        if group not in ("experiment", "debug") and not group.startswith("hydra") and choice:
            path = CONF / group / f"{choice}.yaml"  # a recipe is global: its keys are the whole config's
            add(path, "" if path.is_file() and path.read_text().startswith("# @package _global_") else group.replace("/", "."))
    add(CONF / f"{config_name}.yaml", "")
    out: dict[str, str] = {}
    for path, package in files:
        for key, text in yaml_comments(path, package)[0].items():
            out.setdefault(key, text)
    return out


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return re.split(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z(`])", text, maxsplit=1)[0].rstrip(".") + "."


def documented_fields(target: Any) -> dict[str, str]:
    """{field: first sentence} from a dataclass's attribute docstrings, or from the "Args:" / "Fields:" lines
    of a class's or function's docstrings (`name: text`, `a / b: text` for several)."""
    out: dict[str, str] = {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError):
        tree = None
    body = tree.body[0].body if tree and isinstance(tree.body[0], ast.ClassDef) else []
    for node, after in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            out[node.target.id] = first_sentence(str(after.value.value))
    docs = [inspect.getdoc(target) or ""] + ([inspect.getdoc(target.__init__) or ""] if inspect.isclass(target) else [])
    for doc in docs:
        lines = doc.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^\s*([a-z_][\w]*(?: / [a-z_][\w]*)*)(?: \([^)]*\))?:\s*(\S.*)?$", line)
            if not m:
                continue
            indent = len(line) - len(line.lstrip())
            more = itertools.takewhile(lambda nxt, at=indent: len(nxt) - len(nxt.lstrip()) > at, lines[i + 1 : i + 4])
            text = [m.group(2) or "", *more]
            for name in m.group(1).split(" / "):
                out.setdefault(name, first_sentence(" ".join(text)))
    return out


def schema_comments(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Descriptions of every node's keys from its `_target_` (or SCHEMAS) documentation."""
    from hydra.utils import get_object  # noqa: PLC0415

    from lab.runtime.cli import schemas  # noqa: PLC0415

    out: dict[str, str] = {}
    targets = [SCHEMAS[prefix]] if prefix in SCHEMAS else []
    if isinstance(tree.get("_target_"), str):
        schema = schemas.schema_for(tree["_target_"])
        targets += [f"{schema.__module__}.{schema.__qualname__}"] if schema else []
        targets.append(tree["_target_"])
    for name in targets:
        try:
            fields = documented_fields(get_object(name))
        except Exception:
            continue
        for key, text in fields.items():
            out.setdefault(f"{prefix}.{key}" if prefix else key, text)
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update({k: v for k, v in schema_comments(value, f"{prefix}.{key}" if prefix else key).items() if k not in out})
    return out


def experiments() -> list[tuple[str, str]]:
    """(name, purpose) of every conf/experiment file: its first comment line after the package directive."""
    out = []
    for path in sorted((CONF / "experiment").glob("*.yaml")):
        lines = [ln[1:].strip() for ln in path.read_text().splitlines() if ln.startswith("#") and "@package" not in ln]
        out.append((path.stem, lines[0] if lines else ""))
    return out


def option_rows(tree: Any, described: dict[str, str], prefix: str = "") -> list[tuple[str, str]]:
    """(key, value as shown) of every leaf, and of every group of options that has a description of its own
    (e.g. callbacks.progress: the switch that turns the bar off)."""
    if isinstance(tree, dict) and tree:
        head = [(prefix[:-1], "{...}")] if prefix[:-1] in described else []
        return head + [kv for k, v in tree.items() if not str(k).startswith("_") for kv in option_rows(v, described, f"{prefix}{k}.")]
    return [(prefix[:-1], shown(tree))]


def shown(value: Any) -> str:
    """A value as typed on the command line: null, and strings with whitespace quoted (prompt="\\n")."""
    if value is None:
        return "null"
    if isinstance(value, str) and (not value.isprintable() or value.strip() != value or not value):
        return repr(value)
    return str(value)


def render(config_name: str, overrides: list[str], usage: str) -> str:
    """The help text of one Hydra entry point composed with these overrides."""
    from hydra import compose, initialize_config_dir  # noqa: PLC0415
    from omegaconf import OmegaConf  # noqa: PLC0415

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    choices = {k: v for k, v in OmegaConf.to_container(cfg.hydra.runtime.choices).items() if not k.startswith("hydra")}
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    descriptions = conf_comments(config_name, choices)
    descriptions.update({k: v for k, v in schema_comments(tree).items() if k not in descriptions})
    out = [usage, ""]
    if "task" in choices:  # a training entry point
        out.append("Experiments (+experiment=NAME; the defaults below are changed by the chosen one):")
        out += [f"  {name:<32}{purpose}" for name, purpose in experiments()]
        out.append("")
        out.append("Config groups (group=option; * = chosen):")
        for group, choice in sorted(choices.items()):
            if group in ("experiment", "debug", "recipe"):
                continue
            options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
            out.append(f"  {group:<32}" + " | ".join(o + "*" * (o == choice) for o in options))
        debug = sorted(p.stem for p in (CONF / "debug").glob("*.yaml"))
        recipes = sorted(p.stem for p in (CONF / "recipe").glob("*.yaml"))
        out += [f"  {'+debug':<32}" + " | ".join(debug) + "   (quick checks: conf/debug)",
                f"  {'+recipe':<32}" + " | ".join(recipes) + "   (after +experiment: conf/recipe)", ""]
    out.append("Options (key=value; value as composed from this command line):")
    rows = [(key, value, descriptions.get(key, "")) for key, value in option_rows(tree, descriptions)]
    width = max(len(key) for key, _, _ in rows)
    for key, value, text in rows:
        out.append(f"  {key:<{width}}  {value:<22} {text}".rstrip() if len(value) <= 22 else f"  {key:<{width}}  {value}  {text}".rstrip())
    return "\n".join(out)


def exit_with_help(config_name: str, argv: list[str] | None = None) -> None:
    """If the command line asks for --help (or -h): print this entry point's help and exit 0; else return.
    An entry point without the experiment group (inference: settings come from the checkpoint) refuses
    `+experiment=` with one line instead of composing it in and ignoring it, and `+recipe=` before
    `+experiment=` is refused rather than silently losing to the preset."""
    from lab.runtime.cli.errors import user_errors_exit  # noqa: PLC0415

    argv = sys.argv[1:] if argv is None else argv
    given = [a for a in argv if a.lstrip("+~").startswith("experiment=")]
    if given and "- task" not in (CONF / f"{config_name}.yaml").read_text():
        print(f"error: lab.{config_name} takes no {given[0]}: the model and its settings come from the checkpoint "
              "(ckpt_path=...); see --help for its options", file=sys.stderr)
        sys.exit(2)
    keys = [a.split("=")[0] for a in argv]
    if {"+recipe", "+experiment"} <= set(keys) and keys.index("+recipe") < keys.index("+experiment"):
        print(f"error: {argv[keys.index('+recipe')]} comes before {argv[keys.index('+experiment')]}: Hydra applies "
              "them in that order, so the preset would override the recipe; put +recipe=... after +experiment=...",
              file=sys.stderr)
        sys.exit(2)
    if not {"--help", "-h"} & set(argv):
        return
    overrides = [a for a in argv if a not in ("--help", "-h", "-m", "--multirun")]
    doc = (sys.modules["__main__"].__doc__ or "").strip().splitlines()
    usage = f"python -m lab.{config_name} [key=value ...]" + (f"\n{doc[0]}" if doc else "")
    print(user_errors_exit(render)(config_name, overrides, usage))
    sys.exit(0)
