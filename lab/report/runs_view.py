"""The page's runs table made navigable, in the page itself (no server): DataTables (itables' bundle, inlined)
filters by config values or text, sorts and groups by any config key or column; and a drill-down per run (its
status and attempts, its whole config, each of its curves, its last examples). The data is one JSON object per
run, in the order of the runs table's rows; the script below works on the table the page already shows."""
from __future__ import annotations

import base64
import functools
import json
import math
from datetime import UTC, datetime
from pathlib import Path
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


CONTROLS = """<div class="runs-controls note">filter <input id="runs-filter" size="40"
placeholder="lr=0.001 seed!=1 n_layers>2 or any text"> sort by <select id="runs-sort"></select>
<select id="runs-order"><option value="1">ascending</option><option value="-1">descending</option>
</select> group by <select id="runs-group"><option value="">nothing</option></select> (click a column's header to sort
by it, a run for its record)</div>"""

# DataTables (with its RowGroup extension) from itables' bundle, an ES module inlined in base64 and imported
# through a Blob URL, so a saved page needs no network: window.labDataTable is a promise of DataTables' class.
# The bytes are decoded as UTF-8 (the bundle has non-ASCII characters, in its number-format pattern among others).
LOADER = """<style>__CSS__</style><script>window.labDataTable=(async()=>{const b=Uint8Array.from(atob('__B64__'),c=>c.charCodeAt(0)),
u=URL.createObjectURL(new Blob([b],{type:'text/javascript'}));try{return (await import(u)).default}finally{URL.revokeObjectURL(u)}})();</script>"""

# DataTables drives the runs table the page already shows: a hidden column per config key (shown while it is
# the sort or group key), ordering (a column's header, or the controls), RowGroup's group rows, and lab's filter
# as a fixed search. A numeric column orders by the cells' exact values (data-order), a NaN or infinite one as
# an empty cell: the text "nan" would make DataTables order the whole column as text ("10.5" before "9.5").
# Terms of the filter: `key=value`, `key!=value`, `key<number`, `key>number` (key: a config key, its last part,
# or a column's header), else text any of the row's cells or config values contains. Sorting and grouping take
# a column ("col:<index>") or a config key. The four controls are kept in the address
# (report.html#filter=lr%3D0.001&sort=seed&order=-1&group=col%3A1), beside the curve controls: a reload
# (--watch, --serve) or a shared link shows the same rows.
SCRIPT = """<script>
(async()=>{const D=LABRUNS,table=document.querySelector('table.runs');if(!table)return;const DataTable=await labDataTable,
rows=[...table.tBodies[0].rows],heads=[...table.tHead.rows[0].cells].map(c=>c.textContent),n=heads.length,
cells=rows.map(tr=>[...tr.cells].map(c=>c.dataset.value!==undefined?+c.dataset.value:c.textContent)),
texts=rows.map((tr,i)=>[tr.textContent,...Object.entries(D.runs[i].config).map(([k,v])=>k+'='+v)].map(t=>t.toLowerCase())),
e=id=>document.getElementById(id),filter=e('runs-filter'),sort=e('runs-sort'),order=e('runs-order'),group=e('runs-group');
const opt=(sel,v,t)=>{const o=document.createElement('option');o.value=v;o.textContent=t;sel.appendChild(o)};
opt(sort,'','table order');heads.forEach((h,j)=>opt(sort,'col:'+j,h));[1,3].forEach(j=>opt(group,'col:'+j,heads[j]));
D.keys.forEach(k=>{opt(sort,k,k);opt(group,k,k)});
heads.forEach((_,j)=>{if(cells.some(r=>typeof r[j]==='number'))rows.forEach((tr,i)=>{tr.cells[j].dataset.order=isFinite(cells[i][j])?cells[i][j]:''})});
D.keys.forEach(k=>{table.tHead.rows[0].appendChild(document.createElement('th')).textContent=k;
rows.forEach((tr,i)=>{const v=D.runs[i].config[k];tr.insertCell().textContent=v===undefined||v===null?'':v})});
rows.forEach(tr=>{tr.style.cursor='pointer'});
const col=k=>k.startsWith('col:')?+k.slice(4):n+D.keys.indexOf(k),name=k=>k.startsWith('col:')?heads[+k.slice(4)]:k;
function val(i,key){if(key.startsWith('col:'))return cells[i][+key.slice(4)];const v=D.runs[i].config[key];return v===undefined?null:v}
function keyOf(k){if(D.keys.includes(k))return k;const j=heads.indexOf(k);if(j>=0)return 'col:'+j;
return D.keys.find(x=>x.endsWith('.'+k))||null}
function test(i,term){const m=term.match(/^([^=<>!]+)(!=|=|<|>)(.*)$/);if(m){const key=keyOf(m[1]);if(key===null)return false;
const v=val(i,key),num=+m[3],isNum=m[3]!==''&&!isNaN(num)&&typeof v==='number';
if(m[2]==='<')return isNum&&v<num;if(m[2]==='>')return isNum&&v>num;const eq=isNum?v===num:String(v)===m[3];
return m[2]==='='?eq:!eq}const t=term.toLowerCase();return texts[i].some(s=>s.includes(t))}
const dt=new DataTable(table,{paging:false,autoWidth:false,order:[],layout:{topStart:'info',topEnd:null,bottomStart:null,bottomEnd:null},
language:{info:'_TOTAL_ of _MAX_ runs shown',infoFiltered:'',infoEmpty:'0 of _MAX_ runs shown'},
columnDefs:[{targets:D.keys.map((_,k)=>n+k),visible:false}],rowGroup:{enable:false,startRender:(rs,g)=>{const c=rs.count();
return document.createTextNode(name(group.value)+' = '+val(rs.indexes()[0],group.value)+' ('+c+' run'+(c>1?'s':'')+')')}}});
dt.search.fixed('lab',(s,d,i)=>filter.value.split(/\\s+/).filter(Boolean).every(t=>test(i,t)));
function save(){const h=new URLSearchParams(location.hash.slice(1));[['filter',filter.value],['sort',sort.value],
['order',sort.value&&order.value==='-1'?'-1':''],['group',group.value]].forEach(([k,v])=>v?h.set(k,v):h.delete(k));
history.replaceState(null,'',h.toString()?'#'+h:location.pathname+location.search)}
let drawing=false;function view(){const s=sort.value,g=group.value,shown=new Set([s,g].filter(k=>k&&!k.startsWith('col:')).map(col));
drawing=true;D.keys.forEach((_,k)=>dt.column(n+k).visible(shown.has(n+k),false));dt.rowGroup().enable(!!g);
if(g)dt.rowGroup().dataSrc(col(g));dt.order.fixed(g?{pre:[[col(g),'asc']]}:{});
dt.order(s?[[col(s),order.value==='-1'?'desc':'asc']]:[]);dt.columns.adjust().draw();drawing=false;save()}
dt.on('order',()=>{if(drawing)return;const o=dt.order()[0];sort.value=o?(o[0]<n?'col:'+o[0]:D.keys[o[0]-n]):'';
if(o)order.value=o[1]==='desc'?'-1':'1';save()});
dt.on('click','tbody tr',function(){const i=dt.row(this).index();if(i!==undefined)labRunDetail(i)});
filter.addEventListener('input',()=>{dt.draw();save()});[sort,order,group].forEach(s=>s.addEventListener('change',view));
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
const h=new URLSearchParams(location.hash.slice(1)),set=(el,k)=>{const v=h.get(k);
if(v!==null&&(el.tagName!=='SELECT'||[...el.options].some(o=>o.value===v)))el.value=v};
set(filter,'filter');set(sort,'sort');set(order,'order');set(group,'group');view();table.dataset.ready=1})()
.catch(err=>{window.labErrors.push(String(err));document.getElementById('js-errors').textContent=window.labErrors.join('\\n')});</script>"""


@functools.cache
def datatables() -> str:
    """LOADER with itables' DataTables bundle (its CSS, its module in base64), read once per process. The bundle's
    path is itables' own option for its offline mode (itables.options.dt_bundle); itables' offline HTML is not
    used as is, since it decodes the module as Latin-1 and names its promise after itables' version."""
    from itables import options  # noqa: PLC0415 - and pandas where installed (0.6 s): only for a page

    js = Path(options.dt_bundle)
    css = js.with_suffix(".css").read_text(encoding="utf-8")
    return LOADER.replace("__B64__", base64.b64encode(js.read_bytes()).decode("ascii")).replace("__CSS__", css)


def render(report: Report) -> tuple[str, str]:
    """(the controls above the runs table, the detail box, DataTables and the script below it)."""
    data = json.dumps(records(report), separators=(",", ":")).replace("</", "<\\/")
    return CONTROLS, '<div id="run-detail"></div>' + datatables() + SCRIPT.replace("LABRUNS", data, 1)
