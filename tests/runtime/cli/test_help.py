"""`python -m lab.<verb> --help`: the entry point's own options, values and one-line descriptions taken from
the configs' comments and typed schemas, and the experiments with their purpose."""
from __future__ import annotations

import re

import pytest
from conftest import CONF, run_module

from lab.runtime.cli.help import experiments, render, yaml_comments


@pytest.fixture(scope="module")
def train_help(tmp_path_factory):
    result = run_module("lab.train", ["--help"], tmp_path_factory.mktemp("help"))
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def option_line(text: str, key: str) -> str:
    (line,) = [ln for ln in text.splitlines() if re.match(rf"^  {re.escape(key)}\s", ln)]
    return line


@pytest.mark.parametrize("group,option", [("trainer", "default"), ("callbacks", "default"), ("data", "shakespeare"),
                                          ("logger", "default"), ("paths", "default")])
def test_every_commented_option_shows_its_comment(train_help, group, option):
    comments, _ = yaml_comments(CONF / group / f"{option}.yaml", group)
    assert comments, "nothing to check"
    for key, comment in comments.items():
        line = option_line(train_help, key)
        assert line.rstrip().endswith(comment), (key, line)


def test_options_show_values_and_schema_descriptions(train_help):
    assert re.search(r"trainer\.max_steps\s+2000\s+\S", option_line(train_help, "trainer.max_steps"))
    # documented once, in lab.nn.config.TransformerConfig's field docstring
    assert option_line(train_help, "model.n_heads").endswith("Attention heads; must divide d_model.")
    assert option_line(train_help, "task.scheduler.min_lr").endswith("the learning rate at and after total_steps.")
    assert "Traceback" not in train_help


def test_every_experiment_is_listed_with_its_first_comment_line(train_help):
    listed = experiments()
    assert {name for name, _ in listed} == {p.stem for p in (CONF / "experiment").glob("*.yaml")}
    for name, purpose in listed:
        assert purpose and not purpose.startswith("@package")
        assert re.search(rf"^  {name}\s+{re.escape(purpose)}$", train_help, re.M), name
    assert "gpt_nano_char" in train_help and "The best-known CPU baseline" in train_help


def test_the_chosen_experiment_changes_the_values_shown():
    text = render("train", ["+experiment=translator_small"], "usage")
    assert "lab.tasks.translation" not in text  # _target_ keys are not options
    assert re.search(r"^  task\.label_smoothing\s+0\.1\b", text, re.M)
    assert re.search(r"^  task/scheduler\s+.*inverse_sqrt\*", text, re.M)


def test_a_recipe_is_listed_and_its_comments_describe_the_whole_config():
    """conf/recipe files are `# @package _global_`: their comments describe task.*, model.*, not recipe.task.*."""
    text = render("train", ["+experiment=gpt_small", "+recipe=speedrun"], "usage")
    assert re.search(r"^  \+recipe\s+speedrun\s+\(after \+experiment: conf/recipe\)$", text, re.M)
    assert option_line(text, "task.optimizer.lr").endswith("AdamW's: embeddings, head, norms, biases")
    assert not re.search(r"^  recipe\s", text, re.M)  # not among the group=option groups


def test_inference_help_lists_its_own_options_only(tmp_path):
    result = run_module("lab.generate", ["--help"], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert option_line(out, "temperature").endswith("0 = greedy")
    assert option_line(out, "device").endswith("auto | cpu | cuda")
    assert option_line(out, "prompt").split()[1] == "'\\n'"
    assert "Experiments" not in out and "trainer.max_steps" not in out


def test_inference_refuses_an_experiment_instead_of_ignoring_it(tmp_path):
    result = run_module("lab.generate", ["+experiment=gpt_small", "ckpt_path=x.ckpt"], tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: lab.generate takes no +experiment=gpt_small")
