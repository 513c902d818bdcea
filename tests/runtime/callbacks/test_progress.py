"""The end-of-run test pass says what it costs: a line before it, `test progress` lines with an ETA in a log
file (no terminal), and the token positions it put through the model and its time after it."""
from __future__ import annotations

import logging
import re
from types import SimpleNamespace

from lab.runtime.callbacks.progress import Progress


class _Task:
    def count_tokens(self, batch) -> int:
        return batch  # each fake batch is its own token count


def test_the_test_pass_logs_its_eta_every_tenth_and_its_tokens_and_time(caplog, monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    trainer = SimpleNamespace(is_global_zero=True, num_test_batches=[20], world_size=2, sanity_checking=False)
    bar, task = Progress(log_every_percent=10), _Task()
    batches = [100 + i for i in range(20)]
    with caplog.at_level(logging.INFO, logger="lab"):
        bar.on_test_start(trainer, task)
        for i, b in enumerate(batches):
            bar.on_test_batch_end(trainer, task, None, b, i)
        bar.on_test_end(trainer, task)
    text = caplog.text
    assert "20 batches per device (test=false skips it; python -m lab.eval" in text
    # every 10% of 20 batches = every 2nd batch from the first; none at the last (the end line says it)
    done = [int(m) for m in re.findall(r"test progress: batch (\d+)/20 · ETA \d\d:\d\d:\d\d", text)]
    assert done == list(range(1, 20, 2)), done
    # catches: tokens of one batch only, or not scaled by the world size (by hand: 2 x sum(100..119) = 4380)
    assert re.search(r"test: 4\.4k token positions through the model in \d+\.\d s \(an LM's test windows overlap", text), text
