"""task.finetune: frozen embeddings / first blocks keep their values, the head trains at its own learning rate."""
from __future__ import annotations

from functools import partial

import pytest
import torch

from lab.models.encoder import EncoderClassifier
from lab.models.seq2seq import EncoderDecoder
from lab.nn import ConfigError
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


@pytest.mark.parametrize("finetune, named", [
    ({"freeze_blocks": 4}, "freeze_blocks=4 but a stack has 3 blocks"),
    ({"head_lr": 0}, "head_lr=0 must be a number > 0"),
    ({"freeze_layers": 1}, "task.finetune has no freeze_layers"),
])
def test_bad_finetune_settings_are_one_error(finetune, named):
    with pytest.raises(ConfigError, match=named):
        _classifier_task(**finetune)
