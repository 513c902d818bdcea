"""The page's runs table made navigable, in the page itself (no server, no library beyond plotly): filter by
config values or text, sort and group by any config key or column, and a drill-down per run (its status and
attempts, its whole config, each of its curves, its last examples). The data is one JSON object per run, in the
order of the runs table's rows; the script below works on the table the page already shows."""
from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lab.report.tables import curve_columns
from lab.report.variants import X_AXES, metric_columns

if TYPE_CHECKING:
    from lab.report import Report
    from lab.report.runs import Run

# A run's examples shown in its drill-down: its last ones (every example is in its train.log).
EXAMPLES_SHOWN = 3


def _json_value(v):
    """Config values and curve points as JSON: non-finite floats become null (a NaN step of a diverged run)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _when(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t is not None else None


def _at(entry: dict) -> str:
    return str(entry.get("at", "")).replace("T", " ").replace("+00:00", " UTC")


def _process(entry: dict) -> str:
    where = " on ".join(str(entry[k]) for k in ("pid", "host") if entry.get(k) is not None)
    return f" (pid {where})" if entry.get("pid") is not None else f" (on {where})" if where else ""


def timeline(run: Run) -> list[list[str]]:
    """[when, what] per state change of the run, from status.json's history (lab.runtime.rundir.history), and
    what the report knows that no process wrote: an attempt that ended without a record (killed: the next
    attempt's start says how far it had logged), how the last attempt stands now, the step it diverged at."""
    if not run.history:
        return [["", f"no state history recorded (a status.json from before lab kept one): {run.state}, "
                     f"{run.attempts} attempt{'s' if run.attempts > 1 else ''}"]]
    out, open_attempt = [], None
    for e in run.history:
        event, attempt, step = e.get("event"), e.get("attempt"), e.get("step")
        if event in ("started", "resumed"):
            if open_attempt is not None:
                reached = f", metrics logged to step {step:,}" if step is not None else ""
                out.append(["", f"attempt {open_attempt}: no end recorded (killed or crashed){reached}"])
            where = f" from step {e['from_step']:,}" if e.get("from_step") is not None else ""
            out.append([_at(e), f"attempt {attempt} {event}{where}{_process(e)}"])
            open_attempt = attempt
        else:
            at_step = f" at step {step:,}" if step is not None else ""
            out.append([_at(e), f"attempt {attempt} {event}{at_step}"])
            open_attempt = None
    if open_attempt is not None and run.status != "running":
        out.append(["", f"attempt {open_attempt}: {run.status}" + (f": {run.status_note}" if run.status_note else "")])
    elif open_attempt is not None:
        out.append(["", f"attempt {open_attempt}: running"])
    if run.diverged_at is not None:
        out.append(["", f"diverged at step {run.diverged_at:,} (a NaN or infinite loss in metrics.csv)"])
    return out


def resumes(run: Run) -> list[list[int]]:
    """[step, attempt] where an attempt continued from a checkpoint: the drill-down marks them on the curve."""
    return [[e["from_step"], e.get("attempt")] for e in run.history
            if e.get("event") == "resumed" and isinstance(e.get("from_step"), int)]


def records(report: Report) -> dict:
    """{"keys": every config key, those that differ between runs first, "differing": those, "runs": one dict per
    runs-table row}: a run's name, variant, seed, state, attempts, last step, host and times, overrides, whole
    config, curves ({column: [steps, values]}), last examples, state timeline and resume steps."""
    runs = [(v, r) for v in report.variants for r in v.runs]  # the runs table's row order
    columns = [c for c in curve_columns(report.runs, metric_columns(report.runs)) if c not in X_AXES.values()]
    keys = sorted({k for _, r in runs for k in r.config})
    differing = [k for k in keys if len({json.dumps(_json_value(r.config.get(k))) for _, r in runs}) > 1]
    out = []
    for v, r in runs:
        curves = {}
        for c in columns:
            steps, values = r.series(c)
            if steps:
                curves[c] = [steps, [_json_value(y) for y in values]]
        out.append(dict(name=r.name, variant=v.label, seed=v.seed_label(r), state=r.state, status=r.status,
                        attempts=r.attempts, last_step=r.last_step, host=r.host, started=_when(r.started),
                        ended=_when(r.ended), path=str(r.path), overrides=r.overrides,
                        config={k: _json_value(r.config[k]) for k in sorted(r.config)}, curves=curves,
                        examples=[list(e) for e in r.examples[-EXAMPLES_SHOWN:]], timeline=timeline(r),
                        resumes=resumes(r)))
    return dict(keys=differing + [k for k in keys if k not in differing], differing=differing, runs=out,
                metric=report.metric)


CONTROLS = """<div class="runs-controls note">filter <input id="runs-filter" size="40" oninput="labRunsView()"
placeholder="lr=0.001 seed!=1 n_layers>2 or any text"> sort by <select id="runs-sort" onchange="labRunsView()"></select>
<select id="runs-order" onchange="labRunsView()"><option value="1">ascending</option><option value="-1">descending</option>
</select> group by <select id="runs-group" onchange="labRunsView()"><option value="">nothing</option></select>
<span id="runs-shown"></span> (click a run for its record)</div>"""

# Terms of the filter: `key=value`, `key!=value`, `key<number`, `key>number` (key: a config key, its last part,
# or a column's header), else text any of the row's cells or config values contains. Sorting and grouping take
# a column ("col:<index>") or a config key; the chosen key's values are shown in an extra last column. The four
# controls are kept in the address (report.html#filter=lr%3D0.001&sort=seed&order=-1&group=col%3A1), beside the
# curve controls: a reload (--watch, --serve) or a shared link shows the same rows.
SCRIPT = """<script>
(()=>{const D=LABRUNS,table=document.querySelector('table.runs');if(!table)return;const body=table.tBodies[0],
rows=[...body.rows],heads=[...table.tHead.rows[0].cells].map(c=>c.textContent),extra=document.createElement('th');
table.tHead.rows[0].appendChild(extra);rows.forEach((tr,i)=>{tr.dataset.run=i;tr.style.cursor='pointer';
tr.appendChild(document.createElement('td')).className='key-value';tr.onclick=()=>labRunDetail(i)});
const opt=(sel,v,t)=>{const o=document.createElement('option');o.value=v;o.textContent=t;sel.appendChild(o)};
const sort=document.getElementById('runs-sort'),group=document.getElementById('runs-group');
opt(sort,'','table order');heads.forEach((h,j)=>opt(sort,'col:'+j,h));[1,3].forEach(j=>opt(group,'col:'+j,heads[j]));
D.keys.forEach(k=>{opt(sort,k,k);opt(group,k,k)});
function val(i,key){if(key.startsWith('col:')){const c=rows[i].cells[+key.slice(4)];
return c.dataset.value!==undefined?+c.dataset.value:c.textContent}const v=D.runs[i].config[key];return v===undefined?null:v}
function keyOf(k){if(D.keys.includes(k))return k;const j=heads.indexOf(k);if(j>=0)return 'col:'+j;
return D.keys.find(x=>x.endsWith('.'+k))||null}
function test(i,term){const m=term.match(/^([^=<>!]+)(!=|=|<|>)(.*)$/);if(m){const key=keyOf(m[1]);if(key===null)return false;
const v=val(i,key),num=+m[3],isNum=m[3]!==''&&!isNaN(num)&&typeof v==='number';
if(m[2]==='<')return isNum&&v<num;if(m[2]==='>')return isNum&&v>num;const eq=isNum?v===num:String(v)===m[3];
return m[2]==='='?eq:!eq}const t=term.toLowerCase();return rows[i].textContent.toLowerCase().includes(t)||
Object.entries(D.runs[i].config).some(([k,v])=>(k+'='+v).toLowerCase().includes(t))}
function cmp(a,b){if(a===b)return 0;if(a===null)return 1;if(b===null)return -1;
return typeof a==='number'&&typeof b==='number'?a-b:String(a).localeCompare(String(b),undefined,{numeric:true})}
window.labRunsFilter=(text)=>rows.map((_,i)=>i).filter(i=>text.split(/\\s+/).filter(Boolean).every(t=>test(i,t)));
window.labRunsView=()=>{const f=document.getElementById('runs-filter').value,s=sort.value,g=group.value,
dir=+document.getElementById('runs-order').value;const shown=labRunsFilter(f);
shown.sort((a,b)=>(g?cmp(val(a,g),val(b,g)):0)||(s?dir*cmp(val(a,s),val(b,s)):0)||a-b);
body.querySelectorAll('tr.group').forEach(r=>r.remove());rows.forEach(r=>r.hidden=true);
const shownKey=s&&!s.startsWith('col:')?s:g&&!g.startsWith('col:')?g:'';extra.textContent=shownKey;let last;
shown.forEach(i=>{const r=rows[i];if(g){const v=val(i,g);if(last===undefined||cmp(v,last)){last=v;const n=shown.filter(j=>!cmp(val(j,g),v)).length,
h=body.insertRow(-1);h.className='group';const c=h.insertCell();c.colSpan=heads.length+1;
c.textContent=(g.startsWith('col:')?heads[+g.slice(4)]:g)+' = '+v+' ('+n+' run'+(n>1?'s':'')+')'}}
r.cells[heads.length].textContent=shownKey?String(val(i,shownKey)):'';r.hidden=false;body.appendChild(r)});
document.getElementById('runs-shown').textContent=shown.length+' of '+rows.length+' runs shown';
const h=new URLSearchParams(location.hash.slice(1));[['filter',f],['sort',s],['order',dir>0?'':'-1'],['group',g]].forEach(
([k,v])=>v?h.set(k,v):h.delete(k));history.replaceState(null,'',h.toString()?'#'+h:location.pathname+location.search);
window.labRunsOrder=shown.map(i=>D.runs[i].name)};
const esc=s=>String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'})[c]);
window.labRunDetail=(i)=>{const r=D.runs[i],d=document.getElementById('run-detail'),cols=Object.keys(r.curves);
const facts=[['variant',r.variant],['seed',r.seed],['state',r.state],['attempts',r.attempts+(r.attempts>1?' (resumed)':'')],
['last step',r.last_step],['host',r.host],['started',r.started],['ended',r.ended],['directory',r.path],
['overrides',r.overrides.join(' ')]].filter(f=>f[1]!==null&&f[1]!=='');
d.innerHTML='<h3>Run '+esc(r.name)+'</h3><table class="run-facts">'+facts.map(f=>'<tr><td>'+esc(f[0])+'</td><td>'+esc(f[1])+
'</td></tr>').join('')+'</table><ol class="run-history">'+r.timeline.map(t=>'<li>'+(t[0]?'<span class="when">'+esc(t[0])+
'</span> ':'')+esc(t[1])+'</li>').join('')+'</ol>'+(cols.length?'curve <select id="run-curve">'+cols.map(c=>'<option'+(c===D.metric?' selected':'')+
'>'+esc(c)+'</option>').join('')+'</select><div id="run-curve-plot" class="chart"></div>':'')+
r.examples.map(e=>'<div class="example"><b>'+esc(e[0])+', step '+esc(e[1])+'</b><pre>'+esc(e[2])+'</pre></div>').join('')+
'<details open><summary>config ('+Object.keys(r.config).length+' keys)</summary><table class="run-config">'+
Object.entries(r.config).map(([k,v])=>'<tr'+(D.differing.includes(k)?' class="differs"':'')+'><td>'+esc(k)+'</td><td>'+esc(v)+
'</td></tr>').join('')+'</table></details>';d.dataset.run=r.name;
const cuts=r.resumes.map(m=>m[0]);
const draw=()=>{const c=document.getElementById('run-curve').value,[x,y]=r.curves[c];
const parts=[-Infinity,...cuts].map((lo,k)=>{const hi=k<cuts.length?cuts[k]:Infinity,j=x.map((_,n)=>n).filter(n=>x[n]>=lo&&x[n]<hi);
return {x:j.map(n=>x[n]),y:j.map(n=>y[n]),mode:j.length<30?'lines+markers':'lines',
name:cuts.length?'attempt '+(k?r.resumes[k-1][1]:r.resumes[0][1]-1):c}}).filter(p=>p.x.length);
Plotly.newPlot('run-curve-plot',parts,{title:{text:r.name+': '+c,font:{size:13}},height:300,
template:'plotly_white',margin:{l:55,r:10,t:40,b:40},xaxis:{title:{text:'step'}},
shapes:r.resumes.map(m=>({type:'line',xref:'x',yref:'paper',x0:m[0],x1:m[0],y0:0,y1:1,line:{dash:'dash',color:'#888'}})),
annotations:r.resumes.map(m=>({xref:'x',yref:'paper',x:m[0],y:1,yanchor:'bottom',showarrow:false,font:{size:10},
text:'attempt '+m[1]+' resumed'}))},{responsive:true,displaylogo:false})};
if(cols.length){document.getElementById('run-curve').onchange=draw;draw()}d.scrollIntoView()};
const h=new URLSearchParams(location.hash.slice(1)),set=(id,k)=>{const e=document.getElementById(id),v=h.get(k);
if(v!==null&&(e.tagName!=='SELECT'||[...e.options].some(o=>o.value===v)))e.value=v};
set('runs-filter','filter');set('runs-sort','sort');set('runs-order','order');set('runs-group','group');
labRunsView()})();</script>"""


def render(report: Report) -> tuple[str, str]:
    """(the controls above the runs table, the detail box and script below it)."""
    data = json.dumps(records(report), separators=(",", ":")).replace("</", "<\\/")
    return CONTROLS, '<div id="run-detail"></div>' + SCRIPT.replace("LABRUNS", data, 1)
