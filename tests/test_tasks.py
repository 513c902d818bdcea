"""What every task shares, by hand: learning-rate schedules and the weight-decay parameter groups."""
from __future__ import annotations

import functools
import math

import pytest
import torch

from lab.models.gpt import GPT
from lab.tasks.language_model import LanguageModelTask
from lab.tasks.optim import inverse_sqrt, warmup_cosine


def lrs(make, steps: int) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedule, out = make(opt), []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    return out


def test_warmup_cosine_by_hand():
    """lr 2, 4 warmup steps, cosine to 0.2 at step 14, then flat."""
    got = lrs(lambda o: warmup_cosine(o, warmup_steps=4, total_steps=14, min_lr=0.2), 17)
    expected = [2 * (s + 1) / 4 for s in range(4)]
    expected += [0.2 + (2 - 0.2) * 0.5 * (1 + math.cos(math.pi * (s - 4) / 10)) for s in range(4, 14)]
    expected += [0.2] * 3
    assert got == pytest.approx(expected)


def test_inverse_sqrt_by_hand():
    got = lrs(lambda o: inverse_sqrt(o, warmup_steps=4), 9)
    assert got == pytest.approx([2 * min((s + 1) / 4, math.sqrt(4 / (s + 1))) for s in range(9)])
    assert max(got) == pytest.approx(2.0) and got.index(max(got)) == 3  # peak at the end of warmup


def test_weight_decay_applies_to_matrices_only():
    model = GPT(vocab_size=20, d_model=16, n_layers=1, n_heads=2, max_seq_len=8, tie_embeddings=False)
    task = LanguageModelTask(model, functools.partial(torch.optim.AdamW, weight_decay=0.1))
    decayed, plain = task.configure_optimizers().param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in decayed["params"]} == {n for n, p in model.named_parameters() if p.dim() == 2}
    assert {names[id(p)] for p in plain["params"]} == {n for n, p in model.named_parameters() if p.dim() == 1}
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
