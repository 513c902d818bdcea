"""report.html: one self-contained interactive page (tables, plotly charts with plotly.js inlined) that
opens offline. Chart rendering and script errors are recorded in the page itself (body[data-rendered],
#js-errors), so a headless browser can check them."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.report import Report
    from lab.report.tables import Table

GENERATOR = '<meta name="generator" content="lab.report">'

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.35em}h2{font-size:1.12em;margin-top:1.6em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}tr.best td{background:#e3f4e1;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:8px}.chart{width:560px;border:1px solid #ddd}.note{color:#555;font-size:13px}
#js-errors{color:#b00}"""

# Collect script errors into the page and count charts drawn, before any chart code runs.
PROBE = """<script>window.labErrors=[];window.addEventListener('error',e=>{window.labErrors.push(String(e.message));
document.getElementById('js-errors').textContent=window.labErrors.join('\\n')});
const _ce=console.error;console.error=(...a)=>{window.labErrors.push(a.join(' '));_ce(...a)};</script>"""


def table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    rows = []
    for i, row in enumerate(t.rows):
        cells = "".join(f"<td{'' if c.value is None else f' data-value={c.value!r}'}>{html.escape(c.text)}</td>" for c in row)
        rows.append(f"<tr{' class=best' if i in t.highlight else ''}>{cells}</tr>")
    return f'<table class="{t.name}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _chart(i: int, title: str, fig) -> str:
    div = f"chart-{i}"
    script = (
        "(()=>{const f=" + fig.to_json().replace("</", "<\\/") + ";"
        f"Plotly.newPlot('{div}',f.data,f.layout,{{responsive:true,displaylogo:false}})"
        ".then(()=>{document.body.dataset.rendered=(+document.body.dataset.rendered||0)+1})"
        ".catch(e=>{window.labErrors.push(String(e));document.getElementById('js-errors').textContent=window.labErrors.join('\\n')})"
        "})();"
    )
    return f'<div class="chart" id="{div}" title="{html.escape(title)}"></div><script>{script}</script>'


def render(report: Report) -> str:
    from plotly.offline import get_plotlyjs  # noqa: PLC0415 - 4.6 MB of JavaScript, inlined once

    title = html.escape(report.title)
    summary, metrics, runs, *skipped = report.tables
    n_charts = sum(len(charts) for _, charts in report.sections)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'>{GENERATOR}<title>{title}</title><style>{CSS}</style>",
        PROBE, f"<script>{get_plotlyjs()}</script></head>",
        f'<body data-charts="{n_charts}" data-rendered="0"><pre id="js-errors"></pre><h1>{title}</h1>',
        *(f'<p class="note">{html.escape(line)}</p>' for line in report.intro()),
        "<h2>Summary</h2>", table(summary),
    ]
    i = 0
    for section, charts in report.sections:
        parts.append(f"<h2>{html.escape(section)}</h2><div class='charts'>")
        for chart_title, fig in charts:
            parts.append(_chart(i, chart_title, fig))
            i += 1
        parts.append("</div>")
    parts += ["<h2>Every metric at the compared step (mean ± std over seeds)</h2>", table(metrics), "<h2>Runs</h2>", table(runs)]
    if skipped:
        parts += ["<h2>Not shown</h2>", table(skipped[0])]
    parts.append("</body></html>")
    return "".join(parts)
