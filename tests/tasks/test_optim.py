"""What every task shares, by hand: learning-rate schedules and the weight-decay parameter groups."""
from __future__ import annotations

import functools
import logging
import math

import pytest
import torch

from lab.errors import LabError
from lab.models.gpt import GPT
from lab.tasks.language_model import LanguageModelTask
from lab.tasks.optim import inverse_sqrt, warmup_cosine, warmup_stable_decay


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


@pytest.mark.slow
def test_compile_for_training_compiles_the_loss_with_eager_numbers_and_leaves_decoding_eager():
    """compile=true on a language model (LanguageModelTask.compile_for_training): the model and the loss as one
    inductor graph give eager's loss and gradients on a batch with ignored targets; the model itself, which
    decoding runs, stays the eager module."""
    import copy

    torch.manual_seed(0)
    model = GPT(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=16, init_std=0.2)
    eager, compiled = LanguageModelTask(model, None), LanguageModelTask(copy.deepcopy(model), None)
    compiled.compile_for_training()
    x = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, 1)
    y[0, 10:] = -100  # a window's already-scored targets
    losses = []
    for task in (eager, compiled):
        loss, _ = task._loss((x, y))
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(eager.model.named_parameters(), compiled.model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert type(compiled.model) is GPT and type(eager._loss) is not type(compiled._loss)


# ---- warmup-stable-decay ----------------------------------------------------------------------------------

def test_wsd_schedule_by_hand():
    """warmup 2, total 10, decay over the last 30% = 3 steps (7 -> 10), min_lr 0.1 of lr 1.0."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [p]}, {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.5}], lr=1.0)
    sched = warmup_stable_decay(opt, warmup_steps=2, total_steps=10, min_lr=0.1, decay_fraction=0.3)
    lrs = []
    for _ in range(12):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    first = [0.5, 1, 1, 1, 1, 1, 1, 1, 0.7, 0.4, 0.1, 0.1]
    assert [a for a, _ in lrs] == pytest.approx(first)
    assert [b for _, b in lrs] == pytest.approx([0.5 * f for f in first])  # the same fraction of each group's lr


def test_wsd_resumed_with_another_length_says_so(caplog):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    old = warmup_stable_decay(opt, 2, 10, decay_fraction=0.5)
    for _ in range(6):
        opt.step()
        old.step()  # step 6: 1/5 into the decay of steps 5..10
    state = old.state_dict()
    new = warmup_stable_decay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 2, 20, decay_fraction=0.5)
    with caplog.at_level(logging.INFO, logger="lab"):
        new.load_state_dict(state)
    assert new.total_steps == 20 and new.factor(6) == 1.0 and new.factor(15) == pytest.approx(0.5)
    assert any("total_steps 10 -> 20 at step 6" in r.getMessage() and "0.8 -> 1" in r.getMessage()
               for r in caplog.records)


def test_wsd_refuses_an_empty_decay():
    with pytest.raises(LabError, match="decay_fraction=0.2"):
        warmup_stable_decay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 2, 10, decay_fraction=0)
