"""task.finetune: frozen embeddings / first blocks keep their values, the head trains at its own learning rate."""
from __future__ import annotations

import re
from functools import partial

import pytest
import torch
from omegaconf import open_dict

from lab.errors import ConfigError, LabError
from lab.models.encoder import EncoderClassifier
from lab.models.seq2seq import EncoderDecoder
from lab.tasks.classification import ClassificationTask
from lab.tasks.translation import TranslationTask


def _classifier_task(**finetune):
    torch.manual_seed(0)
    model = EncoderClassifier(40, 0, 3, pooling="bert", d_model=16, n_layers=3, n_heads=2, max_seq_len=16)
    return ClassificationTask(model, partial(torch.optim.SGD, lr=1e-3), finetune=finetune)


def test_frozen_parts_keep_their_values_and_the_head_moves_at_head_lr():
    task = _classifier_task(freeze_embeddings=True, freeze_blocks=2, head_lr=0.5)
    names = dict(task.model.named_parameters())
    frozen = {n for n, p in names.items() if not p.requires_grad}
    assert frozen == {n for n in names if n.startswith(("encoder.embed.", "encoder.stack.layers.0.", "encoder.stack.layers.1."))}
    opt = task.configure_optimizers()
    lrs = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert {n for n, p in names.items() if lrs.get(id(p)) == 0.5} == {n for n in names if n.startswith(("classifier.", "pool."))}
    assert not any(id(names[n]) in lrs for n in frozen)  # a frozen tensor is in no group
    before = {n: p.detach().clone() for n, p in names.items()}
    ids = torch.randint(1, 40, (4, 10))
    torch.nn.functional.cross_entropy(task.model(ids), torch.tensor([0, 1, 2, 0])).backward()
    opt.step()
    step = {n: (p - before[n]).abs().max().item() for n, p in names.items()}
    grad = {n: p.grad.abs().max().item() for n, p in names.items() if p.grad is not None}
    assert all(step[n] == 0 for n in frozen)
    for n in grad:  # plain SGD: each tensor moved by its group's lr times its gradient
        assert step[n] == pytest.approx((0.5 if n.startswith(("classifier.", "pool.")) else 1e-3) * grad[n], rel=1e-2, abs=1e-7)  # rounding of p - lr * g


def test_freeze_blocks_freezes_the_first_blocks_of_every_stack():
    model = EncoderDecoder(30, 0, 1, 2, d_model=16, n_layers=2, n_heads=2, max_seq_len=16)
    task = TranslationTask(model, partial(torch.optim.SGD, lr=1e-3), finetune={"freeze_blocks": 1})
    frozen = {n for n, p in task.model.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in model.named_parameters() if n.startswith(("encoder.layers.0.", "decoder.layers.0."))}


def test_more_finetune_blocks_than_a_stack_has_is_one_error():
    with pytest.raises(ConfigError, match="freeze_blocks=4 but a stack has 3 blocks"):
        _classifier_task(freeze_blocks=4)


@pytest.mark.parametrize("override, named", [
    ("task.finetune.head_lr=0", "task.finetune.head_lr=0.0 must be a number > 0"),
    ("task.finetune.freeze_blocks=-1", "task.finetune.freeze_blocks=-1 must be an integer >= 0"),
    ("+task.finetune.freeze_layers=1", "task.finetune.freeze_layers is not a setting of task.finetune (Finetune); "
                                       "did you mean task.finetune.freeze_blocks?"),
])
def test_bad_finetune_settings_are_one_error_before_anything_is_built(compose, override, named):
    from lab.runtime.cli.config_checks import check_config

    cfg = compose(["+experiment=encoder_classifier", "paths.output_dir=/tmp/x", override])
    with open_dict(cfg):
        del cfg["hydra"]
    with pytest.raises(LabError, match=re.escape(named)):
        check_config(cfg)
