"""report.md: the tables, for pasting into a paper or a PR."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report import Report
    from lab.report.tables import Table

GENERATOR = "<!-- written by lab.report -->"
TITLES = {"summary": "Summary", "metrics": "Every metric at the compared step (mean ± std over seeds)", "runs": "Runs", "config": "Config difference",
          "skipped": "Not shown"}


def table(t: Table) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, t.header)) + " |", "|" + "---|" * len(t.header)]
    for i, row in enumerate(t.rows):
        cells = [esc(c.text) for c in row]
        if i in t.highlight:
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(report: Report) -> str:
    parts = [GENERATOR, f"# {report.title}", " ".join(report.intro()) + " Best variant in bold."]
    for t in report.tables + report.scaling_tables:
        if not t.rows and t.name == "config":
            continue
        parts += [f"## {TITLES.get(t.name, t.name)}", table(t)]
    return "\n\n".join(parts) + "\n"
