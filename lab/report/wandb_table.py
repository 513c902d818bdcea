"""The report's tables logged to W&B as tables, in the sweep's group, as a run of job_type "report"."""
from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report import Report

log = logging.getLogger("lab")


def log_tables(report: Report, required: bool) -> None:
    """auto (required=False): only when the runs logged to W&B (a wandb/ directory in a run), in the mode lab
    decides (offline without credentials). Any W&B failure is one line, never a lost report."""
    if not required and not any((r.path / "wandb").is_dir() for r in report.runs):
        return
    try:
        import wandb  # noqa: PLC0415

        from lab.runtime.loggers import resolve_wandb_mode  # noqa: PLC0415

        first = report.runs[0]
        name = str(first.config.get("name") or "lab")
        sweep = first.path.parent
        # the group lab.train gave the sweep's jobs (lab.runtime.loggers.sweep_settings): <name>/<sweep dir name>
        group = f"{name}/{sweep.name}" if (sweep / "multirun.yaml").is_file() else f"{name}/report"
        run = wandb.init(project=str(first.config.get("logger.wandb.project") or "lab"), group=group,
                         job_type="report", name=f"{name}-report", mode=resolve_wandb_mode(None),
                         dir=str(sweep), settings=wandb.Settings(init_timeout=15, silent=True))
        for t in report.tables:
            run.log({f"report/{t.name}": wandb.Table(columns=t.header, data=[[c.text for c in row] for row in t.rows])})
        run.finish()
        print(f"W&B: report tables logged to group {group} ({run.settings.mode})", file=sys.stderr)
    except Exception as e:  # W&B down or misconfigured never costs the report
        print(f"W&B: report tables not logged ({type(e).__name__}: {e}); report.html and report.md are written", file=sys.stderr)
