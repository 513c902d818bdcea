"""report.md: the tables, for pasting into a paper or a PR."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report import Report


def table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
    return "\n".join(lines)


def render(report: Report) -> str:
    return "\n\n".join([f"# {report.title}", "## Summary", table(*report.summary), "## All metrics (final, best)",
                         table(*report.metrics), "## Overrides", table(*report.overrides)]) + "\n"
