"""What a run prints: each message once, no adverts, user errors once, the progress bar (and its off switch),
long phases announced."""
from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest
from conftest import ROOT, TINY_LM, run_dirs, run_module, train

SHORT = [a for a in TINY_LM if not a.startswith(("trainer.max_steps", "trainer.val_check_interval"))] + [
    "trainer.max_steps=8", "trainer.val_check_interval=4"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    result = train(SHORT, runs)
    (run,) = run_dirs(runs)
    return result.stdout + result.stderr, (run / "train.log").read_text()


@pytest.mark.parametrize("message", ["GPU available", "`Trainer.fit` stopped", "Restoring states from the checkpoint",
                                     "samples @ step 8", "setup took"])
def test_each_message_is_printed_and_logged_once(tiny, message):
    screen, log = tiny
    assert screen.count(message) == 1, screen[-3000:]
    assert log.count(message) == 1


def test_no_advert_and_no_lightning_default_bar(tiny):
    screen, log = tiny
    assert "litlogger" not in screen + log and "Tip:" not in screen
    assert "Epoch 0" not in screen and "it/s" not in screen


def test_long_phases_are_announced_and_progress_is_logged_without_a_terminal(tiny):
    screen, _ = tiny
    assert "data: LMDataModule (a first run fetches the corpus and trains the tokenizer" in screen
    steps = [int(m) for m in re.findall(r"progress: step (\d+)/8 · loss \d", screen)]
    assert steps == list(range(1, 9)), steps  # every 10% of 8 steps = every step


def test_progress_null_prints_no_bar_at_all(tmp_path):
    result = train([*SHORT, "callbacks.progress=null"], tmp_path)
    screen = result.stdout + result.stderr
    assert "progress: step" not in screen and "Epoch 0" not in screen and "Testing" not in screen
    assert not re.search(r"━.*\d+/\d+", screen), "a progress bar was drawn"


def test_user_error_is_printed_once_and_leaves_no_run_behind(tmp_path):
    """A refused run prints its line once; the run directory it began is undone (rundir.journal: lab.report would
    list it as a failed run), so no train.log is left either: the screen is where the line stays."""
    result = run_module("lab.train", [*SHORT, "model.n_heads=3"], tmp_path)
    assert result.returncode == 2
    screen = result.stdout + result.stderr
    assert screen.count("error: model.d_model=128 is not divisible by model.n_heads=3") == 1, screen[-2000:]
    assert not list(tmp_path.rglob("train.log")) and not list(tmp_path.rglob("config.yaml"))


def test_cuda_without_cuda_is_one_error_line(tmp_path):
    result = run_module("lab.generate", ["ckpt_path=/none.ckpt", "device=cuda"], tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        result.stderr.strip().splitlines()[0]] and "device=cuda but no CUDA GPU" in result.stderr


def test_terminal_bar_shows_step_tokens_loss_eta_with_logs_above(tmp_path):
    """In a terminal: one bar `step n/8` with loss, tok/s and ETA; every log line starts on its own line."""
    master, slave = pty.openpty()
    env = {**os.environ, "LAB_RUNS_DIR": str(tmp_path), "COLUMNS": "200", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "lab.train", *SHORT, "callbacks.progress.refresh_rate=1",
                             "callbacks.throughput.every_n_batches=2"], cwd=ROOT, env=env, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    raw = b"".join(chunks).decode(errors="replace")
    text = ANSI.sub("", raw).replace("\r", "\n")
    bars = [ln for ln in text.splitlines() if re.search(r"step\s.*\d+/8", ln)]
    assert bars and re.search(r"8/8 +loss \d\.\d{4} · [\d.]+k? tok/s .*ETA", bars[-1]), bars[-3:]
    for line in text.splitlines():
        if "[lab][INFO]" in line:
            assert line.startswith("[20"), f"a log line was drawn into the bar: {line!r}"
    assert "progress: step" not in text  # the bar, not the log lines, in a terminal


def test_a_sweep_jobs_console_leaves_its_detail_to_the_log_file(tmp_path):
    """Inside sweep_job_console: files read, examples and the config tree reach train.log, not the console;
    warnings and progress reach both; one line counts what the console did not show."""
    import io
    import logging

    import rich.tree

    from lab.runtime.cli import console

    root, screen = logging.getLogger(), io.StringIO()
    handlers = [logging.StreamHandler(screen), logging.FileHandler(tmp_path / "train.log")]
    for h in handlers:
        root.addHandler(h)
    lab_log, level = logging.getLogger("lab"), logging.getLogger("lab").level
    lab_log.setLevel(logging.INFO)
    try:
        with console.sweep_job_console(str(tmp_path / "train.log")):
            lab_log.info("data: read /x/a.txt (train): bytes 10")
            lab_log.info("%s @ step %d | %s", "samples", 3, "prompt: ROMEO.")
            lab_log.warning("data: read failed")  # a warning is never detail
            lab_log.info("setup took 1.0s")
            console.show(rich.tree.Tree("config"))
        lab_log.info("data: read /x/b.txt (train): bytes 10")  # outside a sweep job: shown
    finally:
        for h in handlers:
            root.removeHandler(h)
            h.close()
        lab_log.setLevel(level)
    shown, logged = screen.getvalue(), (tmp_path / "train.log").read_text()
    assert "a.txt" not in shown and "ROMEO" not in shown and "config" not in shown.replace("(config,", "")
    assert "data: read failed" in shown and "setup took" in shown and "b.txt" in shown
    assert "3 lines of detail (config, files read, samples) are in" in shown
    for line in ("a.txt", "samples @ step 3 | prompt: ROMEO.", "config\n", "data: read failed"):
        assert line in logged
