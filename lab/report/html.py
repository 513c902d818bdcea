"""report.html: one self-contained interactive page (tables, plotly charts with plotly.js inlined, the runs
table driven by DataTables, inlined by runs_view) that opens offline. Chart rendering and script errors are
recorded in the page itself (body[data-rendered], #js-errors), so a headless browser can check them."""
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
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:8px}.chart{min-width:0;border:1px solid #ddd}.note{color:#555;font-size:13px}
#js-errors{color:#b00}.controls{position:sticky;top:0;background:#fff;padding:4px 0;font-size:13px;z-index:5}
.examples{display:flex;gap:8px;flex-wrap:wrap}.example{width:420px;border:1px solid #ddd;padding:4px 8px;font-size:12px}
.example pre{white-space:pre-wrap;margin:2px 0 8px;max-height:260px;overflow:auto;background:#fafafa}
table.runs tbody tr:hover td{background:#eef4fb}div.dt-container div.dt-info{font-size:13px;color:#555}
ol.run-history{font-size:13px}.run-history .when{color:#555}#run-detail .chart{max-width:900px}#run-detail td{text-align:left}tr.differs td{background:#fff7e0}
.table-scroll{overflow-x:auto;max-width:100%}.table-scroll td:first-child,.table-scroll th:first-child{position:sticky;left:0;z-index:1}
.table-scroll td:first-child{background:#fff}.table-scroll tr.best td:first-child{background:#e3f4e1}"""

# Collect script errors into the page and count charts drawn, before any chart code runs.
PROBE = """<script>window.labErrors=[];window.addEventListener('error',e=>{window.labErrors.push(String(e.message));
document.getElementById('js-errors').textContent=window.labErrors.join('\\n')});
const _ce=console.error;console.error=(...a)=>{window.labErrors.push(a.join(' '));_ce(...a)};</script>"""

# The curve controls: the x-axis (step, tokens seen, training time: each trace's meta.x), smoothing (W&B's
# debiased exponential moving average of each mean and seed curve, and of the band's two edges; off by default,
# and only of the traces charts.smoothable marks: dense training curves, never a compared value or the lr) and
# the seeds' own curves shown or not. Initial values may come from the address (report.html#x=tokens&smooth=0.6&seeds=1),
# applied once every chart is drawn; the runs table's filter, sort and group share the address (runs_view).
CONTROLS = """<div class="controls">curves: x-axis <select id="xaxis" onchange="labControls()"><option value="step">step
</option>{options}</select>
smoothing of dense training curves <input type="range" id="smooth" min="0" max="0.99" step="0.01" value="0" oninput="labControls()">
<span id="smooth-value">0.00</span> <label><input type="checkbox" id="seeds" onchange="labControls()"> each seed's
curve</label></div><script>
const labRaw={};
function labEma(ys,w){let last=0,norm=0;return ys.map(v=>{if(v===null||!isFinite(v))return v;
last=last*w+(1-w)*v;norm=norm*w+(1-w);return last/norm})}
function labBand(y,w){const n=y.length/2,low=y.slice(n).reverse();  // upper, then lower reversed
return labEma(y.slice(0,n),w).concat(labEma(low,w).reverse())}
function labControls(){const w=+document.getElementById('smooth').value,seeds=document.getElementById('seeds').checked,
axis=document.getElementById('xaxis').value;document.getElementById('smooth-value').textContent=w.toFixed(2);
document.querySelectorAll('.chart.curve').forEach(div=>{if(!div.data)return;const idx=[],xs=[],ys=[],vis=[];
div.data.forEach((t,i)=>{if(!t.meta||!t.meta.kind)return;const k=div.id+':'+i;
labRaw[k]=labRaw[k]||{x:Array.from(t.x),y:Array.from(t.y)};const raw=labRaw[k];idx.push(i);
const has=axis==='step'||!!t.meta.x[axis];xs.push(has?t.meta.x[axis]||raw.x:raw.x);const sw=t.meta.smooth?w:0;ys.push(t.meta.kind==='band'?labBand(raw.y,sw):labEma(raw.y,sw));
let v;if(!has){v='legendonly';raw.hid=true}else if(t.meta.kind==='seed')v=seeds?true:'legendonly';
else if(raw.hid){v=true;raw.hid=false}else v=t.visible===undefined?true:t.visible;vis.push(v)});
if(idx.length){Plotly.restyle(div,{x:xs,y:ys,visible:vis},idx);
const sel=document.getElementById('xaxis'),lay={'xaxis.title.text':sel.options[sel.selectedIndex].text.trim()},
b=div.layout.meta&&div.layout.meta.budget_x;if(b){const x=b[axis]===undefined?null:b[axis];
lay['shapes[0].visible']=x!==null;if(x!==null)lay['shapes[0].x0']=lay['shapes[0].x1']=x}
Plotly.relayout(div,lay)}});
document.body.dataset.controls='x='+axis+',smooth='+w+',seeds='+(seeds?1:0);
const h=new URLSearchParams(location.hash.slice(1));h.set('x',axis);h.set('smooth',w);h.set('seeds',seeds?1:0);
history.replaceState(null,'','#'+h)}
function labReady(){const b=document.body;b.dataset.rendered=(+b.dataset.rendered||0)+1;
if(b.dataset.rendered!==b.dataset.charts)return;const h=new URLSearchParams(location.hash.slice(1));
const sel=document.getElementById('xaxis');if([...sel.options].some(o=>o.value===h.get('x')))sel.value=h.get('x');
if(h.has('smooth'))document.getElementById('smooth').value=h.get('smooth');
if(h.get('seeds')==='1')document.getElementById('seeds').checked=true;if(['x','smooth','seeds'].some(k=>h.has(k)))labControls()}
</script>"""
AXIS_NAMES = {"tokens": "tokens seen", "flops": "training FLOPs", "time": "training time (s)"}


def table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    rows = []
    for i, row in enumerate(t.rows):
        cells = "".join(f"<td{'' if c.value is None else f' data-value={c.value!r}'}>{html.escape(c.text)}</td>" for c in row)
        rows.append(f"<tr{' class=best' if i in t.highlight else ''}>{cells}</tr>")
    # wider than the page (many factors, long preset names): the table scrolls inside its box with its first
    # column (the variant or run) kept in view, as W&B's and TensorBoard's run tables do; the page never scrolls sideways
    return (f'<div class="table-scroll"><table class="{t.name}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            '</tbody></table></div>')


def _chart(i: int, title: str, fig, curve: bool) -> str:
    div = f"chart-{i}"
    script = (
        "(()=>{const f=" + fig.to_json().replace("</", "<\\/") + ";"
        f"Plotly.newPlot('{div}',f.data,f.layout,{{responsive:true,displaylogo:false}})"
        ".then(labReady)"
        ".catch(e=>{window.labErrors.push(String(e));document.getElementById('js-errors').textContent=window.labErrors.join('\\n')})"
        "})();"
    )
    return f'<div class="chart{" curve" if curve else ""}" id="{div}" title="{html.escape(title)}"></div><script>{script}</script>'


def examples(report: Report) -> list[str]:
    """Generated examples side by side, a box per variant: each run's last examples at or before the compared
    step (the same step for every run when they log at the same steps)."""
    budget = report.budget.step
    kinds = sorted({k for r in report.runs for k, _, _ in r.examples})
    parts = []
    for kind in kinds:
        boxes = []
        for v in report.variants:
            blocks = []
            for r in v.runs:
                mine = [(s, t) for k, s, t in r.examples if k == kind and (budget is None or s <= budget)]
                if mine:
                    step = max(s for s, _ in mine)
                    blocks += [f"<div>{html.escape(v.seed_label(r))}, step {step:,}</div><pre>{html.escape(t)}</pre>"
                               for s, t in mine if s == step]
            if blocks:
                boxes.append(f"<div class='example'><b>{html.escape(v.label)}</b>{''.join(blocks)}</div>")
        if boxes:
            parts.append(f"<h2>{html.escape(kind)} (per variant)</h2><div class='examples'>{''.join(boxes)}</div>")
    return parts


# While `lab.report --watch` runs and some run is still going, the page reloads itself: the controls live in
# the address (labControls writes them there), so a reload keeps them.
LIVE_RELOAD_S = 5


# Served by `lab.report --serve`: the page listens to the server's event stream (serve.EVENTS_PATH), which sends the
# report's version after each render, and reloads itself when it changed. After SERVE_FAILS failures in a row
# (EventSource retries by itself in between), or one it does not retry (an http error), it asks for the version
# (serve.VERSION_PATH) every SERVE_POLL_S seconds instead (window.labLive says which). Opened from a file: neither.
SERVE_POLL_S = 2
SERVE_FAILS = 3
SERVE_LIVE = ("<script>(()=>{if(location.protocol==='file:')return;let seen=null,fails=0;"
              "const see=v=>{if(seen!==null&&v!==seen)location.reload();seen=window.labLiveVersion=v};"
              "const poll=()=>{window.labLive='polling';setInterval(()=>fetch('{version}',{cache:'no-store'})"
              ".then(r=>r.ok?r.text():null).then(v=>{if(v!==null)see(v)}).catch(()=>{}),{ms})};"
              "if(!window.EventSource)return poll();window.labLive='events';const es=new EventSource('{events}');"
              "es.onmessage=e=>{fails=0;see(e.data)};es.onerror=()=>{if(es.readyState===2||++fails>={fails}){es.close();poll()}}})()</script>")


def render(report: Report, live: bool = False, served: bool = False) -> str:
    """live: the page reloads every LIVE_RELOAD_S seconds (--watch while some run is still running); served:
    it reloads when the report changes (--serve)."""
    from plotly.offline import get_plotlyjs  # noqa: PLC0415 - 4.6 MB of JavaScript, inlined once

    from lab.report import runs_view  # noqa: PLC0415
    from lab.report.serve import EVENTS_PATH, VERSION_PATH  # noqa: PLC0415

    title = html.escape(report.title)
    by_name = {t.name: t for t in report.tables}
    n_charts = sum(len(charts) for _, charts in report.sections)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'>{GENERATOR}<title>{title}</title><style>{CSS}</style>",
        f'<meta http-equiv="refresh" content="{LIVE_RELOAD_S}">' if live and not served else "",
        SERVE_LIVE.replace("{version}", VERSION_PATH).replace("{events}", EVENTS_PATH).replace("{ms}", str(SERVE_POLL_S * 1000))
        .replace("{fails}", str(SERVE_FAILS)) if served else "",
        PROBE, f"<script>{get_plotlyjs()}</script></head>",
        f'<body data-charts="{n_charts}" data-rendered="0"><pre id="js-errors"></pre><h1>{title}</h1>',
        *(f'<p class="note">{html.escape(line)}</p>' for line in report.intro()),
        f'<p class="note live">Live: lab.report --watch re-renders as runs write; this page reloads every '
        f'{LIVE_RELOAD_S} s until every run has ended.</p>' if live and not served else "",
        '<p class="note live">Live: served by lab.report --serve, which re-renders as runs write; this page reloads '
        'itself when the report changed.</p>' if served else "",
        "<h2>Summary</h2>", table(by_name["summary"]),
    ]
    i = 0
    axes = {a for _, charts in report.sections for _, fig in charts for t in fig.data
            if isinstance(t.meta, dict) and "kind" in t.meta for a in t.meta["x"]}  # those some run logged
    parts.append(CONTROLS.replace("{options}", "".join(f'<option value="{a}">{n}</option>' for a, n in AXIS_NAMES.items() if a in axes)))
    for section, charts in report.sections:
        parts.append(f"<h2>{html.escape(section)}</h2><div class='charts'>")
        for chart_title, fig in charts:
            parts.append(_chart(i, chart_title, fig, curve=any(isinstance(t.meta, dict) and "kind" in t.meta for t in fig.data)))
            i += 1
        parts.append("</div>")
    parts += [f"<h2>{html.escape(t.name)}</h2>{table(t)}" for t in report.scaling_tables]
    parts += examples(report)
    parts += ["<h2>Every metric at the compared step (mean ± std over seeds)</h2>", table(by_name["metrics"]),
              "<h2>Runs</h2>"]
    above, below = runs_view.render(report)
    parts += [above, table(by_name["runs"]), below]
    if by_name["config"].rows:  # collapsed: two presets differ in dozens of keys
        parts += [f"<details><summary><h2 style='display:inline'>Config difference ({len(by_name['config'].rows)} keys)"
                  "</h2></summary>", table(by_name["config"]), "</details>"]
    if "skipped" in by_name:
        parts += ["<h2>Not shown</h2>", table(by_name["skipped"])]
    parts.append("</body></html>")
    return "".join(parts)
