"""Experiment loggers. W&B's mode is decided here, never by a prompt, and a W&B outage never costs a run.

Before any data is fetched, rank 0 asks the W&B server who the API key belongs to, waiting at most
`probe_timeout` seconds (decide_wandb). An answer means online; a rejected key (HTTP 401) is one error line;
no answer (no route, closed port, a proxy that swallows the request, an outage) means offline, with one
warning line and the `wandb sync` command that uploads the run later, unless `require_online` asks for an
error instead. Only then is `wandb.init` called, once, in the decided mode: lab never tries offline after a
failed online `init` in the same process (W&B issue #9865: that second `init` times out too). Other DDP
ranks never probe and never wait (Lightning gives them no W&B run), and finishing a run waits at most
`finish_timeout` seconds for uploads (the rest stays on disk for `wandb sync`)."""
from __future__ import annotations

import base64
import functools
import json
import logging
import netrc
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from lab.errors import LabError
from lab.runtime.rundir.run_dir import RunDir
from lab.runtime.trainer.wandb_resume import last_held_step, rows_between

log = logging.getLogger("lab")
MODES = ("online", "offline", "disabled")
DEFAULT_BASE_URL = "https://api.wandb.ai"
USER_WANDB_MODE = os.environ.get("WANDB_MODE")  # the user's own setting, before lab writes its decision there
_decided_runs: dict[str, str] = {}  # run directory -> mode decided for it (a sweep's jobs each get their own)


def base_url() -> str:
    return (os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def api_key() -> str | None:
    """WANDB_API_KEY, else the key `wandb login` stored in ~/.netrc for the server's host."""
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    try:
        auth = netrc.netrc().authenticators(urlparse(base_url()).hostname or "")
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return None
    return auth[2] if auth else None


def has_wandb_credentials() -> bool:
    return api_key() is not None


def resolve_wandb_mode(mode: str | None, env_mode: str | None = None) -> str:
    """Explicit mode > WANDB_MODE (env_mode, default the environment's) > online if credentials exist > offline.
    Never asks."""
    mode = mode or (os.environ.get("WANDB_MODE") if env_mode is None else env_mode) or None
    if mode == "dryrun":
        mode = "offline"
    if mode is None:
        mode = "online" if has_wandb_credentials() else "offline"
        if mode == "offline":
            log.info("W&B: no API key found, logging offline (upload later with `wandb sync <run dir>/wandb/offline-run-*`)")
    if mode not in MODES:
        raise LabError(f"logger.wandb.mode={mode!r} is not valid; choose one of {', '.join(MODES)} (or leave it null)")
    return mode


def probe_server(url: str, key: str, timeout: float) -> tuple[int | None, str]:
    """Ask W&B's GraphQL endpoint who `key` belongs to. -> (HTTP status, or None when there is no answer
    within `timeout` seconds in all: refused, unresolvable, silent; why). Runs in a daemon thread, so a
    server that accepts and never answers (or answers byte by byte) cannot hold the run longer."""
    result: list[tuple[int | None, str]] = []

    def ask():
        request = urllib.request.Request(
            f"{url}/graphql", data=json.dumps({"query": "query Viewer { viewer { id } }"}).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode()})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                result.append((response.status, "answered"))
        except urllib.error.HTTPError as e:
            result.append((e.code, f"answered HTTP {e.code}"))
        except Exception as e:  # URLError, timeouts, resets: all mean "no usable answer"
            reason = getattr(e, "reason", e)
            result.append((None, f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__))

    thread = threading.Thread(target=ask, name="wandb-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else (None, f"no answer within {timeout:g} s")


def decide_mode(mode: str | None, require_online: bool, probe_timeout: float, sync_dir: str) -> str:
    """The mode this run logs in: the configured one, with online checked against the server first."""
    mode = resolve_wandb_mode(mode, USER_WANDB_MODE or "")  # not a decision an earlier job of a sweep wrote
    if require_online and mode != "online":
        why = "no API key was found (`wandb login`, or set WANDB_API_KEY)" if not has_wandb_credentials() else f"the mode is {mode}"
        raise LabError(f"logger.wandb.require_online=true but {why}; log in, or set logger.wandb.require_online=false")
    if mode != "online":
        return mode
    key, url = api_key(), base_url()
    if key is None:
        raise LabError("logger.wandb.mode=online but no W&B API key was found: run `wandb login` (or set WANDB_API_KEY), "
                       "or use logger.wandb.mode=offline")
    t0 = time.perf_counter()
    status, why = probe_server(url, key, probe_timeout)
    if status == 401:
        raise LabError(f"W&B at {url} rejected the API key (HTTP 401): run `wandb login --relogin` with a valid key "
                       "(or fix WANDB_API_KEY), or log offline with logger.wandb.mode=offline")
    if status is not None and 200 <= status < 300:
        return "online"
    if require_online:
        raise LabError(f"W&B at {url} cannot be reached ({why}) and logger.wandb.require_online=true; check the "
                       "network (or WANDB_BASE_URL), or set logger.wandb.require_online=false to log offline")
    log.warning("W&B: %s unreachable (%s, %.1f s); logging offline. Upload later with: "
                "wandb sync %s/wandb/offline-run-*", url, why, time.perf_counter() - t0, sync_dir)
    return "offline"


def decide_wandb(cfg) -> None:
    """Decide the run's W&B mode before data is fetched (rank 0 only) and write it into the config, so the
    logger, the saved config.yaml and DDP ranks (via WANDB_MODE) all follow this one decision."""
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415
    from omegaconf import open_dict  # noqa: PLC0415

    wb = (cfg.get("logger") or {}).get("wandb")
    if wb is None or rank_zero_only.rank != 0:
        return
    mode = decide_mode(wb.get("mode"), bool(wb.get("require_online")), float(wb.get("probe_timeout", 5)), str(wb.save_dir))
    with open_dict(wb):
        wb.mode = mode
    _decided_runs[str(wb.save_dir)] = mode
    os.environ["WANDB_MODE"] = mode  # DDP ranks inherit the decision


def job_tags_and_name(name: str | None, overrides: list[str], num: int) -> tuple[list[str], str]:
    """(tags, run name) of a sweep job from its overrides: tags hold the variant's choices (W&B's grouping by
    tag then shows the ablation), never a seed (each seed would be a group of one) nor ckpt_path (a resumed
    job's attempt, not a choice: its continued run keeps the tags its siblings have); the name carries the
    job number and every choice with its seed, short keys (`positions=rotary seed=2`). W&B caps tags at 64
    characters and names at 128."""
    kept = [o for o in overrides if not o.lstrip("+~").startswith("ckpt_path=")]
    key = lambda o: o.lstrip("+~").split("=", 1)[0]  # noqa: E731
    tags = [o[:64] for o in kept if key(o).rsplit(".", 1)[-1] != "seed"]
    short = " ".join(f"{key(o).rsplit('.', 1)[-1]}={o.split('=', 1)[1]}" if "=" in o else o for o in kept)
    return tags, f"{name}-{num} {short}".strip()[:128]


def sweep_settings(name: str | None) -> dict:
    """W&B grouping for a job of a Hydra multirun (grid or Optuna): group = <name>/<sweep directory name>
    (its start time), job_type = sweep, tags and name from its overrides (job_tags_and_name).
    Empty outside a multirun (W&B sweeps via `wandb agent` group their runs themselves)."""
    from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415
    from hydra.types import RunMode  # noqa: PLC0415

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return {}
    hc = HydraConfig.get()
    tags, run_name = job_tags_and_name(name, list(hc.overrides.task), hc.job.num)
    return {"group": f"{name}/{Path(hc.sweep.dir).name}", "job_type": "sweep", "tags": tags, "name": run_name}


def is_own_resume(params: dict) -> bool:
    """ckpt_path is the run's own checkpoint (a resumed sweep job, ckpt_path=auto): a fact about this attempt,
    not about the run, which a user-given checkpoint (fine-tuning from another run) is."""
    ckpt, out = str(params.get("ckpt_path") or ""), str((params.get("paths") or {}).get("output_dir") or "")
    return bool(ckpt and out) and Path(ckpt).resolve().is_relative_to(Path(out).resolve())


@functools.cache
def step_wandb_logger():
    """Lightning's WandbLogger with W&B's `_step` = the training step instead of a count of `log` calls: a
    resumed run's next segment (another offline-run-* directory, or the same online run) continues at the
    step it resumed from, so after `wandb sync` the segments are one run whose steps increase and never
    repeat. Rows an earlier attempt of the same W&B run already holds (steps after its checkpoint, up to
    the interruption: RunDir.wandb_last_step, or its segments' files) are not logged again, with one line
    saying how many (lab's resume is exact: the values are the same); rows a killed attempt never wrote are
    logged again from metrics.csv before the first new one (lab.runtime.trainer.wandb_resume). Logs without a step (tables) join the row of the last step. The config
    it logs leaves out ckpt_path when it is the run's own checkpoint, so every attempt logs the first's.

    The W&B run begins only at start() (StartWandbRun: when training starts), not when Lightning sets the loggers
    up: a launch refused during setup in another run's directory would otherwise already have resumed that run's
    W&B id on the server and replaced its config. What is logged before (the config, setup and sanity rows,
    a model watch) is held and logged, in order, once the run has begun."""
    from lightning.fabric.utilities.logger import _add_prefix  # noqa: PLC0415
    from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415

    class HeldExperiment:
        """What `logger.experiment` is before the W&B run begins: a call made on it (a user's
        `self.logger.experiment.log(...)` in a setup hook, say) is held with the logger's own and made on the run,
        in order, once it has begun. Attribute reads other than calls have no value yet."""

        def __init__(self, hold) -> None:
            self._hold = hold

        def __getattr__(self, name: str):
            if name.startswith("__"):  # copy, pickle and friends probing for protocols: not a W&B call
                raise AttributeError(name)
            return lambda *args, **kwargs: self._hold(name, args, kwargs)

    class StepWandbLogger(WandbLogger):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # Lightning always passes `anonymous` (None unless asked); wandb >= 0.19 warns on every run that the
            # setting has no effect
            self._wandb_init.pop("anonymous", None)
            self._last_step, self._logged_before, self._skipped, self._first_row = 0, -1, [], False
            if self._wandb_init.get("id"):  # maybe an earlier attempt's run: what its segments hold is logged
                run_id, save_dir = str(self._wandb_init["id"]), Path(self.save_dir or ".")
                self._logged_before = max(RunDir(save_dir).wandb_last_step(run_id), last_held_step(save_dir, run_id))
                self._first_row = True
            self._held: list | None = []  # calls made before start(), replayed by it; None once the run has begun

        @property
        def experiment(self):
            """The W&B run once start() has begun it; before, a stand-in that starts nothing and holds the calls made
            on it (Lightning reads this when it sets the loggers up, before the setup hooks that may still refuse
            the launch)."""
            if self._held is not None:
                return HeldExperiment(lambda name, args, kwargs: self._hold(
                    lambda: getattr(self.experiment, name)(*args, **kwargs)))
            return super().experiment

        def start(self) -> None:
            """Begin the W&B run (wandb.init on rank 0) and log what was held before, in order."""
            held, self._held = self._held, None
            if held is None:
                return
            _ = self.experiment
            for call in held:
                call()

        def _hold(self, call) -> bool:
            """True when the run has not begun: `call` is kept for start()."""
            if self._held is not None:
                self._held.append(call)
            return self._held is not None

        def watch(self, model, **kwargs):
            if not self._hold(functools.partial(self.watch, model, **kwargs)):
                super().watch(model, **kwargs)

        def log_metrics(self, metrics, step=None):
            if self._hold(functools.partial(self.log_metrics, dict(metrics), step)):
                return
            if self._first_row and step is not None:  # a row without a step (a table) is no row of training
                self._first_row = False
                self._relog_unwritten(int(step))
            step = self._last_step if step is None else int(step)
            if step <= self._logged_before:  # logged by the interrupted attempt already
                self._skipped.append(step)
                return
            if self._skipped:
                log.info("W&B: %d rows at steps %d-%d were logged by the earlier attempt of this run and are not "
                         "logged again (the resumed run computes the same values)", len(self._skipped),
                         min(self._skipped), max(self._skipped))
                self._skipped = []
            self._last_step = max(self._last_step, step)
            metrics = _add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
            self.experiment.log(dict(metrics, **{"trainer/global_step": step}), step=step)

        def _relog_unwritten(self, step: int) -> None:
            """Before this attempt's first row (at `step`): metrics.csv's rows after the last step W&B holds
            (the earlier segments' files; online, the server's resumed step), which a killed attempt logged
            but never wrote."""
            self._logged_before = max(self._logged_before, self.experiment.starting_step - 1)
            rows = rows_between(Path(self.save_dir or ".") / "csv" / "metrics.csv", self._logged_before, step)
            for row_step, row in rows.items():
                row = _add_prefix(row, self._prefix, self.LOGGER_JOIN_CHAR)
                self.experiment.log(dict(row, **{"trainer/global_step": row_step}), step=row_step)
            if rows:
                self._last_step = max(rows)
                log.info("wandb: re-logged steps %d..%d that the killed run had not written (%d rows from metrics.csv)",
                         min(rows), max(rows), len(rows))

        def log_hyperparams(self, params):
            if self._hold(functools.partial(self.log_hyperparams, params)):
                return
            if isinstance(params, dict) and is_own_resume(params):
                params = {k: v for k, v in params.items() if k != "ckpt_path"}
            super().log_hyperparams(params)

        def finalize(self, status):
            if self._experiment is not None and self.save_dir:
                step = max(self._last_step, self._logged_before)
                RunDir(self.save_dir).record_wandb_last_step(self._experiment.id, step)
            super().finalize(status)

    return StepWandbLogger


def start_wandb_on_train_start():
    """A callback that begins the W&B run of every lab W&B logger when training starts (after Lightning's setup,
    the checkpoint's restore and the sanity validation: the refusals a launch can still meet), or when the test
    starts if fit had no step left to take (resumed from a checkpoint at its last step)."""
    from lightning.pytorch.callbacks import Callback  # noqa: PLC0415

    class StartWandbRun(Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            for logger in trainer.loggers:
                if isinstance(logger, step_wandb_logger()):
                    logger.start()

        on_test_start = on_train_start

    return StartWandbRun()


def wandb_logger(mode: str | None = None, name: str | None = None, group: str | None = None,
                 job_type: str = "train", tags=(), save_dir: str = ".", require_online: bool = False,
                 probe_timeout: float = 5.0, init_timeout: float = 60.0, finish_timeout: float = 60.0, **kwargs):
    """A Lightning WandbLogger in the decided mode, or None when disabled (no run is created at all).
    require_online: an unreachable server is an error instead of offline logging. probe_timeout: seconds to
    wait for the server before logging offline. init_timeout / finish_timeout: W&B's own bounds on starting
    the run and on uploading at its end (data not uploaded by then stays on disk for `wandb sync`).
    Inside a Hydra multirun: group (unless set) and name come from the sweep, its tags are added (sweep_settings)."""
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    if save_dir in _decided_runs:
        mode = _decided_runs[save_dir]
    elif rank_zero_only.rank == 0:  # built without lab.train's early decision: decide now
        mode = decide_mode(mode, require_online, probe_timeout, save_dir)
    else:
        mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    os.environ["WANDB_MODE"] = mode  # DDP ranks and sweep jobs inherit the decision
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb  # noqa: PLC0415 - after WANDB_* are set

    sweep = sweep_settings(name)
    if sweep:
        group = group or sweep["group"]
        job_type = sweep["job_type"] if job_type == "train" else job_type
        tags = [*tags, *sweep["tags"]]
        name = sweep["name"]
    settings = wandb.Settings(init_timeout=init_timeout, finish_timeout=finish_timeout)
    return step_wandb_logger()(mode=mode, name=name, group=group, job_type=job_type, tags=list(tags), save_dir=save_dir,
                               settings=settings, **kwargs)


def finish_loggers(loggers: list, exit_code: int = 0) -> None:
    """End this job's W&B run (rank 0 owns it). Lightning leaves it open, and the next job of a sweep in
    the same process would otherwise log into it instead of starting its own run. exit_code != 0: the run
    was interrupted or failed, and W&B records it so (not as a success). Bounded by the run's finish_timeout;
    what did not upload by then is on disk, and the line says how to upload it."""
    from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415
    from lightning.pytorch.utilities import rank_zero_only  # noqa: PLC0415

    for logger in loggers:
        if isinstance(logger, WandbLogger) and rank_zero_only.rank == 0 and logger._experiment is not None:
            run = logger.experiment
            limit, online, run_dir = float(run.settings.finish_timeout or 0), run.settings.mode == "online", Path(run.dir).parent
            t0 = time.perf_counter()
            run.finish(exit_code=exit_code)
            if limit and online and time.perf_counter() - t0 >= limit:
                log.warning("W&B: uploads did not finish within %g s (logger.wandb.finish_timeout); the rest is on "
                            "disk, upload it with: wandb sync %s", limit, run_dir)
