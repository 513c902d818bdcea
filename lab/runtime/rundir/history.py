"""status.json's `history`: one entry appended each time a run's state is written (RunDir.write_status with a
`state`), never rewritten, so a run's record says when each attempt started, from which step, in which process,
and how it ended. A status.json written before history existed has none; readers treat it as empty.

    {"event": "started" | "resumed" | <the state written: completed, interrupted, failed, pruned, ...>,
     "at": <UTC time>, "attempt": n, "host": ..., "pid": ..., "step": <last step in metrics.csv then>,
     "from_step": <the checkpoint's step a resumed attempt continues from>}

A process killed by SIGKILL writes no entry: its attempt's end is the next attempt's start, whose `step` is the
last step the killed attempt logged."""
from __future__ import annotations

from pathlib import Path
from typing import Any

KEY = "history"
METRICS_CSV = Path("csv") / "metrics.csv"  # lab.runtime.trainer.metrics_csv.RunCSVLogger's file
TAIL_BYTES = 4096  # a metrics.csv row is far shorter: the last whole row is in the file's last TAIL_BYTES


def last_logged_step(run_path: Path) -> int | None:
    """The step of metrics.csv's last whole row (its header names the step column), or None."""
    path = run_path / METRICS_CSV
    try:
        with open(path, "rb") as f:
            header = f.readline().decode(errors="replace").strip().split(",")
            header_end = f.tell()  # reading from its newline on, the first piece read is never a whole row
            f.seek(max(f.seek(0, 2) - TAIL_BYTES, header_end - 1))
            lines = f.read().decode(errors="replace").split("\n")
    except OSError:
        return None
    column = header.index("step") if "step" in header else None
    # a row ends with its newline: the text after the last one is a row cut by a kill; the first line may be cut too
    for line in reversed(lines[1:-1]):
        cells = line.split(",")
        if column is not None and len(cells) == len(header) and cells[column].isdigit():
            return int(cells[column])
    return None


def entry(before: dict[str, Any], after: dict[str, Any], run_path: Path) -> dict[str, Any]:
    """The history entry for the state change `before` -> `after` (status.json's contents)."""
    past = before.get(KEY) or []
    starts = sum(e.get("event") in ("started", "resumed") for e in past)
    state = after["state"]
    if state == "running":
        attempt = after.get("attempts") or starts + 1  # single runs count no attempts in status.json
        event = "resumed" if past or attempt > 1 else "started"
    else:
        attempt = after.get("attempts") or max(starts, 1)
        event = state
    out = dict(event=event, at=after["updated"], attempt=attempt, host=after.get("host"), pid=after.get("pid"),
               step=last_logged_step(run_path))
    if event == "resumed" and after.get("resumed_from") is not None:
        out["from_step"] = after["resumed_from"]
    return {k: v for k, v in out.items() if v is not None}
