"""report.html: one self-contained page (tables and inline charts) that opens offline."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report import Report


def table(header: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0;border:1px solid #ddd;padding:4px}figcaption{font-size:12px;color:#555}code{font-size:12px}"""


def _figures(charts: list[tuple[str, str]]) -> str:
    return "".join(
        f'<figure><img alt="{html.escape(t)}" src="data:image/png;base64,{b}"><figcaption>{html.escape(t)}</figcaption></figure>'
        for t, b in charts)


def render(report: Report) -> str:
    title = html.escape(report.title)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        "<h2>Summary</h2>", table(*report.summary, "summary"),
        "<h2>Curves</h2>", f'<div class="charts">{_figures(report.curves)}</div>',
    ]
    if report.moe:
        parts += ["<h2>MoE expert load</h2>", f'<div class="charts">{_figures(report.moe)}</div>']
    parts += [
        "<h2>All metrics (final, best)</h2>", table(*report.metrics, "metrics"),
        "<h2>Overrides</h2>", table(*report.overrides, "overrides"),
        "</body></html>",
    ]
    return "".join(parts)
