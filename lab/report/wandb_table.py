"""The report's tables logged to W&B as tables, in the sweep's group, as a run of job_type "report": one run
per sweep (its id derived from the group), updated in place by every render (`--watch` included).

The mode is decided as lab.train decides it (lab.runtime.trainer.loggers.decide_mode): offline without a key,
and with a key the server is asked first, waiting at most PROBE_S, so an unreachable server costs seconds and
an offline run (`wandb sync` later) instead of W&B's own wait for its init timeout. The report process's own
system metrics, environment, requirements and console are not W&B's to record: only the tables are logged."""
from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report import Report

PROBE_S = 3.0  # the longest a render waits for an answer from the W&B server before logging offline
INIT_S = 15  # W&B's bound on starting the run once the server answered


def report_run_id(project: str, group: str) -> str:
    """The same W&B run id for every render of one sweep's report: a new render replaces the tables."""
    return "report-" + hashlib.sha1(f"{project}/{group}".encode()).hexdigest()[:12]


def wandb_dir(sweep):
    """Where the report's own W&B run writes: a hidden folder beside the runs, inside no run directory, never
    matched by a glob of them (`sweep/*`) nor taken for a run."""
    path = sweep / ".lab_report"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_tables(report: Report, required: bool) -> None:
    """auto (required=False): only when the runs logged to W&B (a wandb/ directory in a run), in the mode lab
    decides (offline without credentials or without an answer). Any W&B failure is one line, never a lost report."""
    if not required and not any((r.path / "wandb").is_dir() for r in report.runs):
        return
    try:
        first = report.runs[0]
        name = str(first.config.get("name") or "lab")
        sweep = first.path.parent
        # the group lab.train gave the sweep's jobs (lab.runtime.trainer.loggers.sweep_settings): <name>/<sweep dir name>
        group = f"{name}/{sweep.name}" if (sweep / "multirun.yaml").is_file() else f"{name}/report"
        project = str(first.config.get("logger.wandb.project") or "lab")
        from lab.runtime.trainer.loggers import decide_mode  # noqa: PLC0415

        mode = decide_mode(None, False, PROBE_S, str(wandb_dir(sweep)))
        os.environ["WANDB_MODE"] = mode  # wandb reads it (and rejects an empty one) whatever init is given
        import wandb  # noqa: PLC0415 - after the mode is decided: only a render that logs pays for it

        settings = wandb.Settings(init_timeout=INIT_S, silent=True, x_disable_stats=True, x_disable_meta=True,
                                  x_save_requirements=False, console="off")
        run = wandb.init(project=project, group=group, job_type="report", name=f"{name}-report", mode=mode,
                         id=report_run_id(project, group), resume="allow", dir=str(wandb_dir(sweep)), settings=settings)
        # each render is logged at its time in seconds: steps only increase, so after `wandb sync` the offline
        # segments of one report are one run whose latest tables are the newest render
        run.log({f"report/{t.name}": wandb.Table(columns=t.header, data=[[c.text for c in row] for row in t.rows])
                 for t in report.tables + report.scaling_tables}, step=int(time.time()))
        run.finish()
        print(f"W&B: report tables logged to group {group} ({run.settings.mode})", file=sys.stderr)
    except Exception as e:  # W&B down or misconfigured never costs the report
        print(f"W&B: report tables not logged ({type(e).__name__}: {e}); report.html and report.md are written", file=sys.stderr)
