"""A W&B outage never costs a run (issue 18), on loopback only: a closed port and a server that accepts
connections and never answers both mean offline logging with one warning line, the exact `wandb sync`
command and at most ~10 s more than an offline run; a server answering 401 is one error line before any
data is fetched; require_online turns unreachable into an error."""
from __future__ import annotations

import glob
import http.server
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import TINY_LM, run_module

FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 characters, like a real key
RUN = [a for a in TINY_LM if not a.startswith(("logger.wandb", "trainer.max_steps", "trainer.val_check_interval"))] + [
    "trainer.max_steps=4", "trainer.val_check_interval=2", "callbacks.progress=null"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when this returns: connecting is refused


@pytest.fixture
def silent_server():
    """Completes TCP handshakes (the kernel's backlog) and never reads or answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def unauthorized_server():
    """Answers every request the way W&B answers a wrong API key."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"errors": [{"message": "user is not logged in"}]}')

        do_GET = do_POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def wandb_env(port: int) -> dict:
    return {"WANDB_API_KEY": FAKE_KEY, "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_MODE": ""}


def timed(module: str, args: list[str], runs, env: dict | None = None):
    t0 = time.perf_counter()
    out = run_module(module, args, runs, env=env)
    return out, time.perf_counter() - t0


@pytest.fixture(scope="module")
def offline_seconds(tmp_path_factory):
    """Wall time of the same run with logger.wandb.mode=offline (the bound's reference)."""
    out, seconds = timed("lab.train", [*RUN, "logger.wandb.mode=offline"], tmp_path_factory.mktemp("offline"))
    assert out.returncode == 0, out.stderr[-3000:]
    return seconds


def assert_offline_runs(out, jobs: int) -> None:
    """Exit 0; per job one warning line whose `wandb sync` command names exactly one offline W&B run that
    holds the run's logged metrics."""
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    warnings = [line for line in text.splitlines() if "W&B:" in line and "unreachable" in line]
    assert len(warnings) == jobs, warnings
    for line in warnings:
        pattern = re.search(r"Upload later with: wandb sync (\S+)$", line).group(1)
        (offline,) = glob.glob(pattern)  # the command's glob names this job's one offline run
        (record,) = glob.glob(f"{offline}/*.wandb")
        data = Path(record).read_bytes()
        assert b"train/loss" in data and b"val/loss" in data
    assert "Traceback" not in text


@pytest.mark.parametrize("server", ["closed-port", "silent-server"])
def test_unreachable_server_logs_offline_and_trains(tmp_path, server, request, offline_seconds):
    port = closed_port() if server == "closed-port" else request.getfixturevalue("silent_server")
    out, seconds = timed("lab.train", RUN, tmp_path, env=wandb_env(port))
    assert_offline_runs(out, jobs=1)
    assert seconds <= offline_seconds + 10, (seconds, offline_seconds)


@pytest.mark.slow
@pytest.mark.parametrize("server", ["closed-port", "silent-server"])
def test_unreachable_server_in_a_two_job_sweep(tmp_path, server, request, offline_seconds):
    port = closed_port() if server == "closed-port" else request.getfixturevalue("silent_server")
    out, seconds = timed("lab.train", ["-m", *RUN, "seed=1,2"], tmp_path, env=wandb_env(port))
    assert_offline_runs(out, jobs=2)
    assert seconds <= 2 * offline_seconds + 20, (seconds, offline_seconds)


def assert_one_error(out, *needles: str) -> str:
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert all(n in errors[0] for n in needles), errors[0]
    return errors[0]


def test_rejected_key_is_one_error_before_data_is_fetched(tmp_path, unauthorized_server):
    cache = tmp_path / "cache"  # the corpus would be fetched into it
    env = {**wandb_env(unauthorized_server), "LAB_CACHE_DIR": str(cache)}
    out = run_module("lab.train", RUN, tmp_path / "runs", env=env)
    assert_one_error(out, "HTTP 401", "wandb login")
    assert not cache.exists()


def test_require_online_makes_unreachable_an_error(tmp_path):
    cache = tmp_path / "cache"
    env = {**wandb_env(closed_port()), "LAB_CACHE_DIR": str(cache)}
    out = run_module("lab.train", [*RUN, "logger.wandb.mode=online", "logger.wandb.require_online=true"],
                     tmp_path / "runs", env=env)
    assert_one_error(out, "cannot be reached", "require_online")
    assert not cache.exists()


def test_probe_is_bounded_even_when_the_server_never_answers(silent_server):
    from lab.runtime.trainer.loggers import probe_server

    t0 = time.perf_counter()
    status, why = probe_server(f"http://127.0.0.1:{silent_server}", FAKE_KEY, timeout=1.0)
    assert status is None and time.perf_counter() - t0 < 1.5, why


def test_explicit_offline_and_disabled_never_probe(monkeypatch):
    from lab.runtime.trainer import loggers

    monkeypatch.setattr(loggers, "probe_server", lambda *a: pytest.fail("probed"))
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert loggers.decide_mode("offline", False, 5, "d") == "offline"
    assert loggers.decide_mode("disabled", False, 5, "d") == "disabled"


@pytest.mark.parametrize(("status", "expected"), [(200, "online"), (503, "offline"), (None, "offline")])
def test_an_answer_means_online_anything_else_offline(monkeypatch, status, expected):
    from lab.runtime.trainer import loggers

    monkeypatch.setattr(loggers, "probe_server", lambda *a: (status, "why"))
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setattr(loggers, "USER_WANDB_MODE", None)
    assert loggers.decide_mode(None, False, 5, "d") == expected



def test_an_id_in_the_config_is_the_runs_id_everywhere(tmp_path):
    """A sweep job's W&B id (kept in its status.json) wins over the run directory's file, and is written there,
    so status.json, <run dir>/wandb_id and the W&B run agree; without one the file's id is kept."""
    from omegaconf import OmegaConf

    from lab.runtime.rundir.run_dir import WANDB_ID_FILE, RunDir

    (tmp_path / WANDB_ID_FILE).write_text("older000\n")
    cfg = OmegaConf.create({"logger": {"wandb": {"mode": "offline", "id": "sweepjob1234"}}})
    RunDir(tmp_path).pin_wandb_run(cfg)
    assert cfg.logger.wandb.id == "sweepjob1234" and (tmp_path / WANDB_ID_FILE).read_text().strip() == "sweepjob1234"
    again = OmegaConf.create({"logger": {"wandb": {"mode": "offline"}}})
    RunDir(tmp_path).pin_wandb_run(again)
    assert again.logger.wandb.id == "sweepjob1234" and again.logger.wandb.resume == "allow"


def test_resumed_logger_skips_steps_the_earlier_attempt_logged_and_keeps_its_config(tmp_path, monkeypatch):
    """The W&B logger's own rules, on a stand-in experiment: steps are the training steps, a resumed attempt
    does not log again the steps its predecessor logged (wandb_last_step), ckpt_path of the run's own
    checkpoint is not config."""
    from lab.runtime.rundir.run_dir import LAST_STEP_FILE
    from lab.runtime.trainer.loggers import is_own_resume, step_wandb_logger

    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / LAST_STEP_FILE).write_text("abc123 7\n")
    logger = step_wandb_logger()(save_dir=str(tmp_path), id="abc123", mode="offline")
    logged = []

    class Experiment:
        id = "abc123"
        starting_step = 0  # offline: W&B knows no earlier step

        def log(self, row, step):
            logged.append((step, sorted(row)))

    logger._experiment = Experiment()
    logger.start()  # what StartWandbRun does when training starts
    for step in (6, 7, 8):
        logger.log_metrics({"train/loss": 1.0}, step=step)
    logger.log_metrics({"samples": 2.0})  # no step: joins the last row
    assert logged == [(8, ["train/loss", "trainer/global_step"]), (8, ["samples", "trainer/global_step"])]
    assert "anonymous" not in logger._wandb_init
    assert is_own_resume({"ckpt_path": str(tmp_path / "checkpoints" / "last.ckpt"), "paths": {"output_dir": str(tmp_path)}})
    assert not is_own_resume({"ckpt_path": "/elsewhere/pretrained.ckpt", "paths": {"output_dir": str(tmp_path)}})


def metric_rows(steps: range) -> list[dict]:
    """Rows as lab logs them: a train row at every step, a val row at every 5th (its own row, same step)."""
    rows = [{"step": s, "epoch": 0, "train/loss": 3.0 - s / 100, "val/loss": ""} for s in steps]
    rows += [{"step": s, "epoch": 0, "train/loss": "", "val/loss": 2.5 - s / 100} for s in steps if s % 5 == 4]
    return sorted(rows, key=lambda r: r["step"])


def write_metrics_csv(run: Path, steps: range) -> list[dict]:
    import csv

    rows = metric_rows(steps)
    (run / "csv").mkdir(parents=True, exist_ok=True)
    with open(run / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "epoch", "train/loss", "val/loss"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def wandb_rows(run: Path) -> dict[int, dict]:
    """Every history row of every offline segment of the run, by `_step`; a step held twice fails."""
    import json

    from lab.runtime.trainer.wandb_resume import read_records

    rows: dict[int, dict] = {}
    for run_file in sorted(run.glob("wandb/offline-run-*/run-*.wandb")):
        for record in read_records(run_file):
            if record.WhichOneof("record_type") == "history":
                row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
                assert row["_step"] not in rows, f"step {row['_step']} is in W&B twice"
                rows[row["_step"]] = row
    return rows


def test_steps_a_killed_attempt_never_wrote_are_logged_again_on_resume(tmp_path, monkeypatch, caplog):
    """Real offline W&B segments: the first attempt's file holds steps 0-9 while metrics.csv (and its
    checkpoint) reached step 14, as when SIGKILL lands before W&B writes its buffered rows; the resumed attempt
    logs 15-19. After both, W&B holds every metrics.csv value once (issue 47 item 5: steps 10-14 were lost)."""
    import wandb

    from lab.runtime.trainer.loggers import step_wandb_logger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    expected = write_metrics_csv(tmp_path, range(15))
    killed = step_wandb_logger()(save_dir=str(tmp_path), id="kill123", mode="offline", project="lab")
    killed.start()
    for row in expected:
        if row["step"] <= 9:
            killed.log_metrics({k: v for k, v in row.items() if k != "step" and v != ""}, step=row["step"])
    killed.experiment.finish()  # what a killed segment holds: the rows W&B wrote before the kill
    wandb.teardown()  # W&B's service writes the file out when it stops
    resumed = step_wandb_logger()(save_dir=str(tmp_path), id="kill123", mode="offline", project="lab")
    resumed.start()
    later = metric_rows(range(15, 20))
    with caplog.at_level("INFO", logger="lab"):
        for row in later:
            resumed.log_metrics({k: v for k, v in row.items() if k != "step" and v != ""}, step=row["step"])
        resumed.experiment.finish()
    wandb.teardown()
    assert [r.message for r in caplog.records if r.message.startswith("wandb: re-logged")] == [
        "wandb: re-logged steps 10..14 that the killed run had not written (5 rows from metrics.csv)"]
    held = wandb_rows(tmp_path)
    assert sorted(held) == list(range(20)), "a step is missing from W&B"
    for row in expected + later:
        for key in ("train/loss", "val/loss"):
            if row[key] != "":
                assert held[row["step"]][key] == pytest.approx(row[key]), (row["step"], key)


def test_a_wandb_file_cut_by_a_kill_reads_up_to_its_last_whole_record(tmp_path, monkeypatch):
    """A .wandb file cut anywhere (the kill lands mid-write) gives its whole records and their steps, no error
    and no partial record taken for whole (its row's values would be missing, its step counted as held)."""
    import wandb

    from lab.runtime.trainer.loggers import step_wandb_logger
    from lab.runtime.trainer.wandb_resume import history_steps, last_held_step, read_records

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = step_wandb_logger()(save_dir=str(tmp_path), id="cut123", mode="offline", project="lab")
    logger.start()
    for step in range(40):
        logger.log_metrics({"train/loss": float(step)}, step=step)
    logger.experiment.finish()
    wandb.teardown()
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-cut123.wandb")
    assert history_steps(run_file) == list(range(40)) and last_held_step(tmp_path, "cut123") == 39
    data, whole = run_file.read_bytes(), read_records(run_file)
    for cut in range(7, len(data), max(1, len(data) // 200)):
        run_file.write_bytes(data[:cut])
        records = read_records(run_file)
        assert records == whole[:len(records)], f"cut at byte {cut}: a partial record read as whole"
        steps = history_steps(run_file)
        assert steps == list(range(len(steps)))


def test_a_sweep_jobs_tags_are_its_choices_and_its_name_carries_the_variant():
    """Tags held every override, `seed=2` included (W&B's group-by-tag split each variant by seed), and the
    name was `<name>-<job>` only (issue 47 item 5)."""
    from lab.runtime.trainer.loggers import job_tags_and_name

    tags, name = job_tags_and_name("gpt_nano_char", ["model.positions=rotary", "seed=2", "data.seed=3",
                                                     "ckpt_path=/r/1/checkpoints/last.ckpt", "+task.optimizer.lr=" + "1" * 100], 4)
    assert tags == ["model.positions=rotary", "+task.optimizer.lr=" + "1" * 45]
    assert name.startswith("gpt_nano_char-4 positions=rotary seed=2 seed=3 lr=111") and len(name) == 128


class RecordedRun:
    """What wandb.init returns in the tests below: records the config and rows lab sends, starts nothing."""

    def __init__(self, calls: list, **init):
        self.id, self.starting_step, self.rows, self.config_updates = init.get("id"), 0, [], []
        self.config = type("Config", (), {"update": lambda _, params, **kw: self.config_updates.append(params)})()
        calls.append(init)

    def log(self, row, step=None):
        self.rows.append((step, row))

    def watch(self, model, **kwargs):
        self.rows.append(("watch", type(model).__name__))


def fit_with_lab_trainer(run_dir: Path, monkeypatch, refuse_in_setup: bool, **trainer_settings):
    """lab's build_trainer (callbacks, loggers, config logging) with W&B offline in run_dir, wandb.init replaced
    by a recorder, and a two-step model that logs from its setup and sanity validation; refuse_in_setup: its
    setup hook raises a LabError, as model.init_from or a resumed checkpoint's checks do. -> (init calls, logger)."""
    import lightning.pytorch as pl
    import torch
    import wandb
    from omegaconf import OmegaConf

    from lab.errors import LabError
    from lab.runtime.rundir.run_dir import RunDir
    from lab.runtime.trainer.fitting import build_trainer

    calls: list[dict] = []
    monkeypatch.setattr(wandb, "init", lambda **init: RecordedRun(calls, **init))
    monkeypatch.setenv("WANDB_MODE", "offline")

    class TwoSteps(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def setup(self, stage):
            self.logger.log_metrics({"setup/tokens": 7.0}, step=0)
            self.logger.watch(self.layer)
            self.logger.experiment.log({"user/early": 1.0})  # a user's own call on the run, before it began
            if refuse_in_setup:
                raise LabError("model.init_from=x is not a model directory")

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("train/loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val/loss", self.layer(batch[0]).pow(2).mean())

        def test_step(self, batch, batch_idx):
            self.log("test/loss", self.layer(batch[0]).pow(2).mean())

        def on_validation_epoch_end(self):
            if self.trainer.sanity_checking:
                self.logger.log_text(key="samples", columns=["text"], data=[["sanity"]])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    cfg = OmegaConf.create({
        "trainer": {"_target_": "lightning.pytorch.Trainer", "max_steps": 2, "val_check_interval": 2, "log_every_n_steps": 1,
                    "accelerator": "cpu", "enable_checkpointing": False, "enable_model_summary": False,
                    "num_sanity_val_steps": 1, **trainer_settings},
        "logger": {"wandb": {"_target_": "lab.runtime.trainer.loggers.wandb_logger", "mode": "offline", "project": "lab",
                             "name": "mine", "save_dir": str(run_dir)}}})
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)
    trainer, loggers = build_trainer(cfg, type("Data", (), {"shards_batches": False})(), RunDir(run_dir), {"lr": 0.1})
    try:
        trainer.fit(module := TwoSteps(), train_dataloaders=data, val_dataloaders=data)
        trainer.test(module, dataloaders=data)
    except LabError:
        assert refuse_in_setup
    return calls, loggers[0]


def test_a_launch_refused_in_setup_never_starts_the_other_runs_wandb_run(tmp_path, monkeypatch):
    """In another run's directory lab logs to that run's W&B id; a refusal in Lightning's setup hooks (after the
    trainer and its loggers were built) must not call wandb.init at all: online, that init resumes their run on
    the server and replaces its config. Catches: W&B begun when the loggers are built or set up (as Lightning's
    own `_ = logger.experiment` in its setup does) instead of at the first training step."""
    (tmp_path / "wandb_id").write_text("theirs01\n")
    calls, logger = fit_with_lab_trainer(tmp_path, monkeypatch, refuse_in_setup=True)
    assert calls == [] and logger._experiment is None
    assert not (tmp_path / "wandb").exists()


def test_a_run_logs_its_config_and_every_row_held_from_before_training_started(tmp_path, monkeypatch):
    """W&B begins when training starts, once, with the run directory's own id (resume allowed), and then gets
    everything logged before in order: the config build_trainer logged, the setup hook's row, model watch and
    a user's own call on logger.experiment, the sanity validation's table, then training's steps 0 and 1. Catches: held calls dropped instead of replayed
    (the config and step-0 setup row never reach W&B)."""
    (tmp_path / "wandb_id").write_text("mine0001\n")
    calls, logger = fit_with_lab_trainer(tmp_path, monkeypatch, refuse_in_setup=False)
    assert [(c["id"], c["resume"]) for c in calls] == [("mine0001", "allow")]
    run = logger._experiment
    assert run.config_updates[0] == {"lr": 0.1}
    assert run.rows[:4] == [(0, {"setup/tokens": 7.0, "trainer/global_step": 0}), ("watch", "Linear"),
                            (None, {"user/early": 1.0}),
                            (0, {"samples": run.rows[3][1]["samples"], "trainer/global_step": 0})]
    train_steps = [step for step, row in run.rows if "train/loss" in row]
    assert train_steps == [0, 1], run.rows


def test_a_run_with_no_step_left_begins_its_wandb_run_for_the_test(tmp_path, monkeypatch):
    """Resumed from a checkpoint at its last step (here: no training batch), fit takes no step and never calls
    on_train_start; the test that follows still begins the W&B run and logs its metrics and the held config.
    Catches: W&B begun only at the first training step, the test metrics held and never logged."""
    calls, logger = fit_with_lab_trainer(tmp_path, monkeypatch, refuse_in_setup=False, limit_train_batches=0)
    run = logger._experiment
    assert len(calls) == 1 and run.config_updates[0] == {"lr": 0.1}
    assert [row for _, row in run.rows if "test/loss" in row], run.rows
